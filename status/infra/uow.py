"""Unit of work: one transaction, rolled back unless explicitly committed."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from types import TracebackType
from typing import TypeVar

import sqlalchemy as sa

from status.domain.errors import Unavailable
from status.infra import wakeup
from status.infra.metrics import DB_GIVE_UPS, DB_RETRIES

T = TypeVar("T")

# MySQL/MariaDB: 1213 deadlock, 1205 lock wait timeout, 2006/2013 connection lost
# (failover). SQLite: "database is locked".
_RETRYABLE_MYSQL = {1213, 1205, 2006, 2013}


def _reason(exc: sa.exc.DBAPIError) -> str:
    code = exc.orig.args[0] if exc.orig is not None and exc.orig.args else None
    return {1213: "deadlock", 1205: "lock_wait_timeout", 2006: "connection_lost", 2013: "connection_lost"}.get(
        code if isinstance(code, int) else -1, "busy"
    )


def is_retryable(exc: sa.exc.DBAPIError) -> bool:
    orig = exc.orig
    code = orig.args[0] if orig is not None and orig.args else None
    if isinstance(code, int) and code in _RETRYABLE_MYSQL:
        return True
    return "database is locked" in str(orig) or exc.connection_invalidated


class UnitOfWork:
    """``with UnitOfWork(engine) as uow: ...; uow.commit()`` — no commit, no change."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine
        self._committed = False

    def __enter__(self) -> UnitOfWork:
        self.conn = self._engine.connect()
        self._tx = self.conn.begin()
        return self

    def commit(self) -> None:
        self._tx.commit()
        self._committed = True
        if wakeup.take_mark(self.conn):
            # Only now are the rows visible: waking a consumer earlier would find nothing.
            wakeup.signal_for(self._engine).notify()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if not self._committed and self._tx.is_active:
                self._tx.rollback()
        finally:
            wakeup.take_mark(self.conn)  # a rolled-back write wakes nobody, now or at the next checkout
            self.conn.close()


def run_in_transaction(engine: sa.Engine, work: Callable[[UnitOfWork], T], attempts: int = 6) -> T:
    """Run ``work`` in a fresh unit of work, retrying deadlocks and lock timeouts.

    ``work`` must be a pure function of the database state (it is re-run from
    the start, with the same event ids, after a retryable failure).
    """
    for attempt in range(attempts):
        try:
            with UnitOfWork(engine) as uow:
                return work(uow)
        except sa.exc.DBAPIError as exc:
            if not is_retryable(exc) or attempt == attempts - 1:
                if is_retryable(exc):
                    DB_GIVE_UPS.inc()
                    raise Unavailable("the database is busy; retry with the same request") from exc
                raise
            DB_RETRIES.labels(reason=_reason(exc)).inc()
            time.sleep(min(0.5, 0.005 * (2**attempt)) * random.uniform(0.5, 1.5))
    raise AssertionError("unreachable")
