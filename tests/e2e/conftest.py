"""End-to-end harness: the HTTP API and the relay wired to a real Centrifugo on MariaDB."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from observer.relay import OutboxRelay, RelayConfig
from status.api.app import create_app
from status.app.service import StatusService
from status.bootstrap import Components
from status.infra import tables as t
from status.infra.centrifugo import CentrifugoApi
from status.infra.db import create_engine
from status.infra.tokens import ServiceTokens, UserTokens
from status.settings import Settings
from tests.integration.conftest import Http
from tests.support.processes import CentrifugoNode
from tests.support.settings import make_settings


@pytest.fixture(scope="session")
def e2e_settings(mariadb_url: str, centrifugo: CentrifugoNode, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return make_settings(
        mariadb_url,
        Path(tmp_path_factory.mktemp("e2e")),
        centrifugo_api_url=centrifugo.api_url,
        centrifugo_api_key=centrifugo.api_key,
        centrifugo_token_secret=centrifugo.token_secret,
        centrifugo_public_url=centrifugo.ws_url,
        detail_subscription_limit=3,
    )


@pytest.fixture(scope="session")
def e2e_engine(e2e_settings: Settings) -> Iterator[sa.Engine]:
    engine = create_engine(e2e_settings.database_url)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def e2e_parts(e2e_settings: Settings, e2e_engine: sa.Engine) -> Components:
    return Components(e2e_settings, e2e_engine)


@pytest.fixture(scope="session")
def e2e_service(e2e_parts: Components) -> StatusService:
    service = e2e_parts.service
    service.install_default_definitions()
    return service


@pytest.fixture(scope="session")
def e2e_client(e2e_settings: Settings, e2e_engine: sa.Engine, e2e_service: StatusService) -> Iterator[TestClient]:
    with TestClient(create_app(e2e_settings, e2e_engine, e2e_service), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture
def api(e2e_client: TestClient, e2e_settings: Settings) -> Http:
    tenant = f"tenant-{secrets.token_hex(4)}"
    return Http(
        e2e_client, tenant, ServiceTokens(e2e_settings.service_token_secret), UserTokens(e2e_settings.user_token_secret)
    )


@pytest.fixture
async def relay(e2e_engine: sa.Engine, e2e_settings: Settings) -> AsyncIterator[OutboxRelay]:
    publisher = CentrifugoApi(e2e_settings.centrifugo_api_url, e2e_settings.centrifugo_api_key)
    relay = OutboxRelay(e2e_engine, publisher, f"relay-{secrets.token_hex(3)}", RelayConfig(batch_size=1000))
    yield relay
    # The next test's relays take the outbox partitions at once, not after a lease that
    # this test's relays (some with clocks set ahead) may have left behind.
    with e2e_engine.begin() as conn:
        conn.execute(sa.update(t.outbox_partition).values(relay_id=None, lease_until=None))
        conn.execute(sa.delete(t.outbox_relay))
    await publisher.aclose()


@pytest.fixture
def make_relay(e2e_engine: sa.Engine) -> Iterator[Callable[..., OutboxRelay]]:
    """Relays a test builds itself; their outbox partitions are given back when the test ends."""
    made: list[OutboxRelay] = []

    def make(publisher: CentrifugoApi, relay_id: str, config: RelayConfig | None = None) -> OutboxRelay:
        made.append(OutboxRelay(e2e_engine, publisher, relay_id, config))
        return made[-1]

    yield make
    for relay in made:
        relay.release_partitions()


@pytest.fixture(scope="session")
def live_api(e2e_settings: Settings, e2e_engine: sa.Engine, e2e_service: StatusService) -> Iterator[str]:
    """The status API on a real socket (uvicorn in a thread), for clients that need a URL."""
    from tests.support.processes import serving

    with serving(create_app(e2e_settings, e2e_engine, e2e_service)) as url:
        yield url


# ---------------------------------------------------------------- the same service on SQLite (the demo default)
@dataclass
class Backend:
    """One status service as a test's workers and observer see it: its HTTP client, its URL, its
    database and its service (MariaDB, or SQLite as the demo stack runs it)."""

    name: str
    client: TestClient
    url: str
    engine: sa.Engine
    service: StatusService
    settings: Settings

    def http(self) -> Http:
        tenant = f"tenant-{secrets.token_hex(4)}"
        return Http(
            self.client,
            tenant,
            ServiceTokens(self.settings.service_token_secret),
            UserTokens(self.settings.user_token_secret),
        )


@pytest.fixture(scope="session")
def sqlite_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    from status.infra import migrate
    from tests.support.processes import serving

    data = Path(tmp_path_factory.mktemp("e2e-sqlite"))
    url = f"sqlite:///{data / 'status.sqlite3'}"
    migrate.upgrade(url)
    settings = make_settings(url, data)
    engine = create_engine(url)
    service = Components(settings, engine).service
    service.install_default_definitions()
    with (
        TestClient(create_app(settings, engine, service), raise_server_exceptions=False) as client,
        serving(create_app(settings, engine, service)) as live,
    ):
        yield Backend("sqlite", client, live, engine, service, settings)
    engine.dispose()


@pytest.fixture(scope="session")
def mariadb_backend(
    e2e_client: TestClient, live_api: str, e2e_engine: sa.Engine, e2e_service: StatusService, e2e_settings: Settings
) -> Backend:
    return Backend("mariadb", e2e_client, live_api, e2e_engine, e2e_service, e2e_settings)
