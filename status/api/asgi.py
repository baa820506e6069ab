"""ASGI entry points: the only way into the HTTP layer from outside ``status.api``.

``uvicorn --factory status.api.asgi:app_from_env`` is what ``serve --workers N``
runs (each worker process builds its own engine and service from the
environment); ``app_for`` serves a service built by the composition root
(``serve`` with one process, ``dev``).
"""

from __future__ import annotations

from starlette.applications import Starlette

from status import logs
from status.api.app import app_of, create_app
from status.api.serving import on_drain
from status.bootstrap import Components
from status.settings import Settings


def app_for(parts: Components) -> Starlette:
    return app_of(parts)


def app_from_env() -> Starlette:
    """A ``serve --workers N`` worker's application; on SIGTERM its readiness drains
    (``status.api.serving``)."""
    logs.configure()
    app = create_app(Settings.from_env())
    on_drain(app.state.parts.readiness.drain)
    return app
