"""The Starlette application of the status service."""

from __future__ import annotations

import sqlalchemy as sa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from status.infra.db import create_engine
from status.settings import Settings


def create_app(settings: Settings, engine: sa.Engine | None = None) -> Starlette:
    engine = engine or create_engine(settings.database_url)

    async def healthz(_: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(_: Request) -> JSONResponse:
        try:
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
        except sa.exc.SQLAlchemyError:
            return JSONResponse({"status": "unavailable", "database": "down"}, status_code=503)
        return JSONResponse({"status": "ok", "database": "up"})

    app = Starlette(routes=[Route("/healthz", healthz), Route("/readyz", readyz)])
    app.state.settings = settings
    app.state.engine = engine
    return app
