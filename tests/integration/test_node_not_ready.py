"""A Galera node that is not ready (outside the primary component, or still joining) answers every
statement with 1047 while its connection stays open. The service drops that connection like a lost
one and retries the work on a new one — which the balancer sends to a node that takes writes.

The server here raises the same error as Galera does (SIGNAL with MYSQL_ERRNO 1047) for the first
statements of the work, so the real driver, pool and unit of work see it; the failover itself, on
a real cluster, is tests/e2e/test_failover.py."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from status.infra.db import create_engine
from status.infra.uow import SqlDatabase, is_retryable

NOT_READY = "SIGNAL SQLSTATE '08S01' SET MYSQL_ERRNO = 1047, MESSAGE_TEXT = 'WSREP has not yet prepared node'"


def test_a_node_that_is_not_ready_is_a_lost_connection_and_retryable(mariadb_url: str) -> None:
    engine = create_engine(mariadb_url)
    with pytest.raises(sa.exc.DBAPIError) as refused, engine.connect() as conn:
        conn.exec_driver_sql(NOT_READY)
    assert refused.value.orig is not None and refused.value.orig.args[0] == 1047
    assert refused.value.connection_invalidated  # the pool does not hand that connection out again
    assert is_retryable(refused.value)
    engine.dispose()


def test_work_refused_by_a_node_that_is_not_ready_runs_again_on_a_new_connection(mariadb_url: str) -> None:
    engine = create_engine(mariadb_url, pool_size=1, max_overflow=0)
    database = SqlDatabase(engine)
    connections: list[int] = []

    def work(uow: Any) -> int:
        connections.append(int(uow.conn.exec_driver_sql("SELECT CONNECTION_ID()").scalar_one()))
        if len(connections) < 3:
            uow.conn.exec_driver_sql(NOT_READY)
        return len(connections)

    assert database.run(work) == 3
    assert len(set(connections)) == 3  # each attempt on a fresh connection, never the refused one
    engine.dispose()
