"""Fixtures for service-level tests: a StatusService on a real database."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from status.app.service import StatusService
from status.domain.auth import Role, ServicePrincipal
from status.infra.db import create_engine
from status.infra.schemas import JsonSchemaValidator
from status.infra.tokens import ExecutionTokens


@pytest.fixture(scope="session")
def engine(db_url: str) -> Iterator[sa.Engine]:
    eng = create_engine(db_url)
    yield eng
    eng.dispose()


@pytest.fixture(scope="session")
def execution_tokens() -> ExecutionTokens:
    return ExecutionTokens(secrets.token_hex(32))


@pytest.fixture(scope="session")
def service(engine: sa.Engine, execution_tokens: ExecutionTokens) -> StatusService:
    svc = StatusService(engine, execution_tokens=execution_tokens, validator=JsonSchemaValidator())
    svc.install_default_definitions()
    return svc


@pytest.fixture
def tenant() -> str:
    """A fresh tenant per test: tests share a database but never each other's rows."""
    return f"tenant-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def coordinator(tenant: str) -> ServicePrincipal:
    return ServicePrincipal("coordinator-1", tenant, "content", frozenset({Role.COORDINATOR}))


@pytest.fixture
def worker(tenant: str) -> ServicePrincipal:
    return ServicePrincipal("document-parser", tenant, "content", frozenset({Role.WORKER}))


@pytest.fixture
def health(tenant: str) -> ServicePrincipal:
    return ServicePrincipal("reconciler", tenant, "content", frozenset({Role.HEALTH}))
