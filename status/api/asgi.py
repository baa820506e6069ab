"""ASGI entry points: the only way into the HTTP layer from outside ``status.api``.

``uvicorn --factory status.api.asgi:app_from_env`` is what ``serve --workers N``
runs (each worker process builds its own engine and service from the
environment); ``app_for`` serves a service built by the composition root
(``serve`` with one process, ``dev``).
"""

from __future__ import annotations

import sqlalchemy as sa
from starlette.applications import Starlette

from status import logs
from status.api.app import create_app
from status.app.service import StatusService
from status.settings import Settings


def app_for(settings: Settings, engine: sa.Engine, service: StatusService) -> Starlette:
    return create_app(settings, engine, service)


def app_from_env() -> Starlette:
    logs.configure()
    return create_app(Settings.from_env())
