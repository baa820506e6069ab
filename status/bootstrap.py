"""The composition root: builds the application service from settings.

The API, the CLI, the observer, benchmarks and tests all get their
``StatusService`` here, so nothing outside ``status.api`` needs the HTTP layer.
"""

from __future__ import annotations

import sqlalchemy as sa

from status.app.service import StatusService
from status.infra.db import create_engine
from status.infra.schemas import JsonSchemaValidator
from status.infra.tokens import ExecutionTokens
from status.settings import Settings


def build_service(settings: Settings, engine: sa.Engine | None = None) -> StatusService:
    return StatusService(
        engine if engine is not None else create_engine(settings.database_url),
        execution_tokens=ExecutionTokens(settings.execution_token_secret),
        validator=JsonSchemaValidator(),
        execution_token_ttl_seconds=settings.execution_token_ttl_seconds,
        max_data_bytes=settings.max_data_bytes,
        overdue_after_seconds=settings.overdue_after_seconds,
    )
