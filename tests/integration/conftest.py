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
from status.infra.shards import ShardedDatabases
from status.infra.tokens import ExecutionTokens
from status.infra.uow import SqlDatabase
from tests.conftest import SHARD_NAMES, SHARDED


@pytest.fixture(scope="session")
def engine(db_url: str) -> Iterator[sa.Engine]:
    eng = create_engine(db_url)
    yield eng
    eng.dispose()


@pytest.fixture(scope="session")
def execution_tokens() -> ExecutionTokens:
    return ExecutionTokens(secrets.token_hex(32))


@pytest.fixture(scope="session")
def shard_engines(engine: sa.Engine, request: pytest.FixtureRequest) -> Iterator[dict[str, sa.Engine]]:
    """Each shard's engine by name, ``engine`` (the home shard) first; one entry without shards."""
    if not SHARDED:
        yield {SHARD_NAMES[0]: engine}
        return
    shard_urls: dict[str, str] = request.getfixturevalue("shard_urls")
    others = {name: create_engine(url) for name, url in shard_urls.items() if name != SHARD_NAMES[0]}
    yield {SHARD_NAMES[0]: engine, **others}
    for other in others.values():
        other.dispose()


@pytest.fixture(scope="session")
def service(engine: sa.Engine, shard_engines: dict[str, sa.Engine], execution_tokens: ExecutionTokens) -> StatusService:
    shards = None
    if SHARDED:
        databases = {name: SqlDatabase(shard) for name, shard in shard_engines.items()}
        shards = ShardedDatabases(engine, databases, SHARD_NAMES[0])
    # The maximum event age of the settings' defaults (events older are refused: EVENT_TOO_OLD).
    svc = StatusService(
        SqlDatabase(engine),
        execution_tokens=execution_tokens,
        validator=JsonSchemaValidator(),
        max_event_age_seconds=6 * 24 * 3600,
        shards=shards,
    )
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


# ---------------------------------------------------------------- HTTP
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

from starlette.testclient import TestClient  # noqa: E402

from status.api.app import create_app  # noqa: E402
from status.infra.tokens import ServiceTokens, UserTokens  # noqa: E402
from status.settings import Settings  # noqa: E402
from tests.support.settings import make_settings  # noqa: E402


@pytest.fixture(scope="session")
def settings(
    db_url: str,
    tmp_path_factory: pytest.TempPathFactory,
    execution_tokens: ExecutionTokens,
    request: pytest.FixtureRequest,
) -> Settings:
    sharding = {}
    if SHARDED:
        shard_urls: dict[str, str] = request.getfixturevalue("shard_urls")
        sharding = {"shard_name": SHARD_NAMES[0], "shards": {n: u for n, u in shard_urls.items() if u != db_url}}
    return make_settings(
        db_url,
        Path(tmp_path_factory.mktemp("data")),
        execution_token_secret=execution_tokens._secret,  # type: ignore[attr-defined]
        **sharding,
    )


@dataclass
class Http:
    """A TestClient plus credentials for one test's tenant."""

    client: TestClient
    tenant: str
    service_tokens: ServiceTokens
    user_tokens: UserTokens

    def service_token(self, producer: str, *roles: str, tenant: str | None = None, scope: str = "content") -> str:
        from status.domain.auth import Role

        return self.service_tokens.issue(producer, tenant or self.tenant, scope, [Role(r) for r in roles])

    def auth(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    @property
    def coordinator(self) -> dict[str, str]:
        return self.auth(self.service_token("coordinator-1", "COORDINATOR"))

    @property
    def worker(self) -> dict[str, str]:
        return self.auth(self.service_token("document-parser", "WORKER"))

    def user(
        self,
        user_id: str,
        tenant: str | None = None,
        projects: list[str] | None = None,
        roles: list[str] | None = None,
    ) -> dict[str, str]:
        return self.auth(self.user_tokens.issue(tenant or self.tenant, user_id, projects=projects, roles=roles))


@pytest.fixture(scope="session")
def app_client(settings: Settings, engine: sa.Engine, service: StatusService) -> Iterator[TestClient]:
    with TestClient(create_app(settings, engine, service), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture
def http(app_client: TestClient, settings: Settings, tenant: str) -> Http:
    return Http(
        app_client, tenant, ServiceTokens(settings.service_token_secret), UserTokens(settings.user_token_secret)
    )
