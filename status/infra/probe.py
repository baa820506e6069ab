"""A cheap "is there any work?" look before a claiming transaction.

Idle observer loops otherwise spend most of their CPU on empty claim
transactions (pool checkout, BEGIN, a locking SELECT, COMMIT) many times a
second. A probe is one indexed lookup on a raw connection the loop keeps.
"""

from __future__ import annotations

import contextlib
from typing import Any

import sqlalchemy as sa


class RowProbe:
    """Answers whether ``sql`` (a literal ``SELECT 1 … LIMIT 1``) finds a row.

    Any error answers "yes", so that the real claim runs and reports it; the
    connection is then dropped and opened again on the next call.
    """

    def __init__(self, engine: sa.Engine, sql: str) -> None:
        self.engine = engine
        self.sql = sql
        self._connection: Any = None

    def __call__(self) -> bool:
        try:
            if self._connection is None:
                self._connection = self.engine.raw_connection()
            cursor = self._connection.cursor()
            try:
                cursor.execute(self.sql)
                found = cursor.fetchone() is not None
            finally:
                cursor.close()
            self._connection.rollback()  # never keep a snapshot or a transaction open
            return found
        except Exception:
            self.close()
            return True

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                connection.close()
