"""Shared set-up for benchmarks: a throwaway MariaDB database and a real Centrifugo node."""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from status.infra import migrate  # noqa: E402
from tests.support.processes import CentrifugoNode  # noqa: E402

SERVER = os.environ.get("TASK_OBSERVER_TEST_MYSQL_URL", "mysql+pymysql://tso:tso@127.0.0.1:3306")


@contextmanager
def scratch_database() -> Iterator[str]:
    name = f"tso_bench_{secrets.token_hex(3)}"
    server = sa.create_engine(SERVER + "/", poolclass=sa.pool.NullPool)
    with server.begin() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
    url = f"{SERVER}/{name}?charset=utf8mb4"
    try:
        migrate.upgrade(url)
        yield url
    finally:
        with server.begin() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name}"))


@contextmanager
def centrifugo_node() -> Iterator[CentrifugoNode]:
    with tempfile.TemporaryDirectory() as tmp:
        node = CentrifugoNode(workdir=Path(tmp)).start()
        try:
            yield node
        finally:
            node.stop()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values) or [0.0]
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
