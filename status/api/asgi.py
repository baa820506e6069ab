"""ASGI entry point: ``uvicorn --factory status.api.asgi:app_from_env`` (what ``serve --workers N`` runs).

Each worker process builds its own engine and service from the environment.
"""

from __future__ import annotations

from starlette.applications import Starlette

from status import logs
from status.api.app import create_app
from status.settings import Settings


def app_from_env() -> Starlette:
    logs.configure()
    return create_app(Settings.from_env())
