"""Engine construction for MySQL/MariaDB and SQLite."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from status.infra.metrics import POOLS


def create_engine(database_url: str, **kwargs: Any) -> sa.Engine:
    """An engine with the settings the status service relies on.

    * MySQL/MariaDB: READ COMMITTED (row locks are taken explicitly with
      ``FOR UPDATE``; gap locks from REPEATABLE READ only add deadlocks), a
      pre-ping so failovers surface as retryable errors, utf8mb4.
    * SQLite: one writer at a time; transactions start with ``BEGIN IMMEDIATE``
      so a read-then-write never upgrades a lock mid-transaction.
    """
    url = sa.make_url(database_url)
    # Errors are logged: their text must not carry bound values (tokens, payloads, user data).
    kwargs.setdefault("hide_parameters", True)
    if url.get_backend_name() == "sqlite":
        engine = sa.create_engine(url, connect_args={"timeout": 30, "check_same_thread": False}, **kwargs)

        @sa.event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        @sa.event.listens_for(engine, "begin")
        def _begin_immediate(conn: sa.Connection) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    kwargs.setdefault("pool_pre_ping", True)
    # Every unit of work ends its transaction (commit, or rollback on close), so the
    # pool's own rollback on check-in would only add a round trip per transaction.
    kwargs.setdefault("pool_reset_on_return", None)
    kwargs.setdefault("pool_size", 20)
    kwargs.setdefault("max_overflow", 20)
    kwargs.setdefault("isolation_level", "READ COMMITTED")
    engine = sa.create_engine(url, **kwargs)
    POOLS.watch(engine)  # db_pool_connections on /metrics
    return engine
