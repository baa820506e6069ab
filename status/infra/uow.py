"""The SQL unit of work: one transaction, rolled back unless explicitly committed.

It implements ``status.app.ports``: the application gets its stores from here
and never sees a connection.  The stores record what kind of rows a
transaction wrote (``wrote``); after COMMIT — only then are the rows visible —
the unit of work hands that record to the notifiers the composition root
injected (the outbox consumers' wake-up).  A rolled-back transaction notifies
nobody.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from functools import cached_property
from types import TracebackType
from typing import TypeVar

import sqlalchemy as sa

from status.app.ports import DuplicateKey
from status.domain.errors import Unavailable
from status.infra import write_batch
from status.infra.db_errors import mysql_code
from status.infra.metrics import DB_GIVE_UPS, DB_POOL_WAIT_SECONDS, DB_RETRIES, DB_TRANSACTION_SECONDS
from status.infra.stores.access import SqlAccessStore
from status.infra.stores.corrections import SqlCorrectionStore
from status.infra.stores.definitions import SqlDefinitionStore, SqlDurationStore
from status.infra.stores.external_refs import SqlExternalRefStore
from status.infra.stores.grants import SqlGrantStore
from status.infra.stores.heartbeats import SqlHeartbeatStore
from status.infra.stores.notifications import SqlNotificationStore
from status.infra.stores.overdue import SqlOverdueStore
from status.infra.stores.reads import SqlReadStore
from status.infra.stores.runs import SqlRunStore
from status.infra.stores.tasks import SqlLogStore, SqlTaskStore
from status.infra.stores.workflows import SqlWorkflowStore

T = TypeVar("T")
# Called after a commit with the kinds of rows it wrote ("outbox", "feed"); must not block or raise.
Notifier = Callable[[frozenset[str]], None]

# MySQL/MariaDB: 1213 deadlock (on Galera also a certification conflict with another node's
# write), 1205 lock wait timeout, 2006/2013 connection lost (failover), 1047 a Galera node not
# ready (its connection is dropped: status.infra.db). SQLite: "database is locked".
_RETRYABLE_MYSQL = {1213, 1205, 2006, 2013, 1047}
# A statement ended by the server's time limit (MariaDB 1969, MySQL 3024), or a server that sent
# nothing within the driver's socket timeout: the same work again now would wait as long again.
# The caller is answered at once (UNAVAILABLE, retryable: later may help).
_TIMED_OUT_MYSQL = {1969, 3024}


def timed_out(exc: sa.exc.DBAPIError) -> bool:
    code = mysql_code(exc.orig)
    if code in _TIMED_OUT_MYSQL:
        return True
    return code == 2013 and "timed out" in str(exc.orig)


def _reason(exc: sa.exc.DBAPIError) -> str:
    return {
        1213: "deadlock",
        1205: "lock_wait_timeout",
        2006: "connection_lost",
        2013: "connection_lost",
        1047: "node_not_ready",
    }.get(mysql_code(exc.orig) or -1, "busy")


def is_retryable(exc: sa.exc.DBAPIError) -> bool:
    if mysql_code(exc.orig) in _RETRYABLE_MYSQL:
        return True
    return "database is locked" in str(exc.orig) or exc.connection_invalidated


def is_duplicate_key(exc: sa.exc.DBAPIError) -> bool:
    """A unique key taken (MySQL/MariaDB 1062; SQLite's UNIQUE/PRIMARY KEY constraint)."""
    if not isinstance(exc, sa.exc.IntegrityError):
        return False
    return mysql_code(exc.orig) == 1062 or "UNIQUE constraint failed" in str(exc.orig)


class SqlStores:
    """The stores over one connection (a transaction's, or a read's)."""

    def __init__(self, conn: sa.Connection) -> None:
        self.conn = conn
        self.written: set[str] = set()

    def wrote(self, kind: str) -> None:
        self.written.add(kind)

    @cached_property
    def tasks(self) -> SqlTaskStore:
        return SqlTaskStore(self.conn)

    @cached_property
    def log(self) -> SqlLogStore:
        return SqlLogStore(self.conn, self.wrote)

    @cached_property
    def access(self) -> SqlAccessStore:
        return SqlAccessStore(self.conn)

    @cached_property
    def corrections(self) -> SqlCorrectionStore:
        return SqlCorrectionStore(self.conn)

    @cached_property
    def definitions(self) -> SqlDefinitionStore:
        return SqlDefinitionStore(self.conn)

    @cached_property
    def durations(self) -> SqlDurationStore:
        return SqlDurationStore(self.conn)

    @cached_property
    def external_refs(self) -> SqlExternalRefStore:
        return SqlExternalRefStore(self.conn)

    @cached_property
    def grants(self) -> SqlGrantStore:
        return SqlGrantStore(self.conn)

    @cached_property
    def heartbeats(self) -> SqlHeartbeatStore:
        return SqlHeartbeatStore(self.conn)

    @cached_property
    def notifications(self) -> SqlNotificationStore:
        return SqlNotificationStore(self.conn)

    @cached_property
    def overdue(self) -> SqlOverdueStore:
        return SqlOverdueStore(self.conn)

    @cached_property
    def reads(self) -> SqlReadStore:
        return SqlReadStore(self.conn)

    @cached_property
    def runs(self) -> SqlRunStore:
        return SqlRunStore(self.conn)

    @cached_property
    def workflows(self) -> SqlWorkflowStore:
        return SqlWorkflowStore(self.conn)


class UnitOfWork(SqlStores):
    """``with UnitOfWork(engine) as uow: ...; uow.commit()`` — no commit, no change."""

    def __init__(self, engine: sa.Engine, notifiers: Sequence[Notifier] = ()) -> None:
        self._engine = engine
        self._notifiers = notifiers
        self._committed = False
        self.written = set()

    def __enter__(self) -> UnitOfWork:
        self._began = time.perf_counter()
        self.conn = self._engine.connect()
        DB_POOL_WAIT_SECONDS.observe(time.perf_counter() - self._began)
        self._tx = self.conn.begin()
        return self

    def commit(self) -> None:
        self._tx.commit()
        self._committed = True
        DB_TRANSACTION_SECONDS.labels(outcome="committed").observe(time.perf_counter() - self._began)
        if self.written:
            written = frozenset(self.written)
            for notify in self._notifiers:
                notify(written)

    def batched(self) -> AbstractContextManager[None]:
        return write_batch.batched(self.conn)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if not self._committed and self._tx.is_active:
                self._tx.rollback()
                outcome = "failed" if exc is not None else "rolled_back"
                DB_TRANSACTION_SECONDS.labels(outcome=outcome).observe(time.perf_counter() - self._began)
        finally:
            self.conn.close()


class SqlDatabase:
    """``status.app.ports.Database`` over a SQLAlchemy engine."""

    def __init__(self, engine: sa.Engine, notifiers: Sequence[Notifier] = ()) -> None:
        self.engine = engine
        self.notifiers: list[Notifier] = list(notifiers)

    def unit_of_work(self) -> UnitOfWork:
        return UnitOfWork(self.engine, self.notifiers)

    def run(self, work: Callable[[UnitOfWork], T], *, attempts: int = 6) -> T:
        """Run ``work`` in a fresh unit of work, retrying deadlocks, lock timeouts and lost connections.

        ``work`` must be a pure function of the database state (it is re-run from
        the start, with the same event ids, after a retryable failure).
        """
        for attempt in range(attempts):
            try:
                with self.unit_of_work() as uow:
                    return work(uow)
            except sa.exc.DBAPIError as exc:
                if timed_out(exc):
                    DB_GIVE_UPS.inc()
                    raise Unavailable("the database did not answer in time; retry with the same request") from exc
                if not is_retryable(exc) or attempt == attempts - 1:
                    if is_retryable(exc):
                        DB_GIVE_UPS.inc()
                        raise Unavailable("the database is busy; retry with the same request") from exc
                    if is_duplicate_key(exc):
                        raise DuplicateKey(str(exc.orig)) from exc
                    raise
                DB_RETRIES.labels(reason=_reason(exc)).inc()
                time.sleep(min(0.5, 0.005 * (2**attempt)) * random.uniform(0.5, 1.5))
        raise AssertionError("unreachable")

    def run_unique(self, work: Callable[[UnitOfWork], T]) -> T:
        """A transaction that inserts unique keys: a concurrent insert of the same key loses the race
        with a duplicate-key error, and the re-run then sees the winner."""
        try:
            return self.run(work)
        except DuplicateKey:
            return self.run(work)

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")

    @contextmanager
    def reading(self) -> Iterator[SqlStores]:
        with self.engine.connect() as conn:
            yield SqlStores(conn)
