"""Reads of the write path compiled once per dialect and run through the driver.

``Connection.execute`` looks a Core statement up in SQLAlchemy's compiled cache on every call —
a walk of the statement for its cache key, an expanding ``IN`` rendered again for its values,
parameters and rows passed through processors — which cost a tenth of the API's CPU per
reported event (docs/benchmarks.md, 2026-12-06). These reads run once or twice per group of
events with a few parameters, so their SQL text is rendered once per dialect (and per length of
their ``IN`` list) and handed to the driver as it is; the rows come back as tuples with the
columns' result processing applied (SQLite's timestamps are text, JSON columns are text
everywhere), so callers get what ``Connection.execute`` would have given them.

An ``IN`` list is padded to the next power of two with its last value (the same rows: ``IN``
is a set), so a read has a handful of renderings, not one per group size: groups come in every
size up to the committer's maximum, and rendering one anew cost more than running it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa

from status.infra.write_batch import multi_statements, next_result, send_kept

_Processor = Callable[[Any], Any] | None
# What an error of reads sent together names instead of their text (status.infra.write_batch).
_DESCRIPTION = "reads sent as one multi-statement query"


class PreparedRead:
    """A SELECT built by ``build(n)`` — ``n`` the length of its one ``IN`` list, named ``_in0`` …
    ``_in{n-1}`` (0 without one) — and its other bound parameters by name."""

    def __init__(self, build: Callable[[int], sa.Select[Any]]) -> None:
        self._build = build
        self._compiled: dict[tuple[str, str, int], tuple[str, tuple[str, ...], bool, list[_Processor]]] = {}

    def rows(self, conn: sa.Connection, params: dict[str, Any], listed: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        text, bound, processors = self.bound(conn.dialect, params, listed)
        return processed(conn.exec_driver_sql(text, bound).fetchall(), processors)

    def bound(
        self, dialect: sa.Dialect, params: dict[str, Any], listed: Sequence[Any] = ()
    ) -> tuple[str, Any, list[_Processor]]:
        """The read's SQL text for these values, its parameters as the driver takes them, and the
        processing of its columns' results."""
        size = _padded(len(listed))
        key = (dialect.name, dialect.driver, size)
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compiled[key] = self._compile(dialect, size)
        text, order, positional, processors = compiled
        values = {**params, **{f"_in{i}": value for i, value in enumerate(listed)}}
        values.update((f"_in{i}", listed[-1]) for i in range(len(listed), size))
        bound: Any = tuple(values[name] for name in order) if positional else values
        return text, bound, processors

    def _compile(self, dialect: sa.Dialect, n: int) -> tuple[str, tuple[str, ...], bool, list[_Processor]]:
        statement = self._build(n)
        compiled = statement.compile(dialect=dialect)
        order = tuple(compiled.positiontup or ())
        processors: list[_Processor] = [
            dialect.type_descriptor(column.type).result_processor(dialect, None)
            for column in statement.selected_columns
        ]
        return compiled.string, order, dialect.positional, processors


def processed(rows: Sequence[Any], processors: list[_Processor]) -> list[tuple[Any, ...]]:
    """Rows as tuples, each column through its result processor (if it has one)."""
    if not any(processors):
        return [tuple(row) for row in rows]
    return [
        tuple(
            value if process is None or value is None else process(value)
            for process, value in zip(processors, row, strict=True)
        )
        for row in rows
    ]


def rows_together(
    conn: sa.Connection, reads: Sequence[tuple[PreparedRead, dict[str, Any], Sequence[Any]]]
) -> list[list[tuple[Any, ...]]]:
    """The rows of each read, all sent as one query where the connection takes several statements
    in one (MySQL/MariaDB: ``status.infra.write_batch.install``), one read after the other elsewhere.

    The server runs them in order in the transaction, so a read after a locking one sees the rows
    as that one locked them (READ COMMITTED: each statement reads what is committed when it runs).
    """
    if len(reads) < 2 or not multi_statements(conn):
        return [read.rows(conn, params, listed) for read, params, listed in reads]
    send_kept(conn)  # writes kept for the transaction's end go first, as any read sends them
    raw = conn.connection.dbapi_connection
    assert raw is not None  # the transaction's connection, checked out
    render = raw.cursor()
    texts: list[str] = []
    processors: list[list[_Processor]] = []
    try:
        for read, params, listed in reads:
            text, bound, processing = read.bound(conn.dialect, params, listed)
            texts.append(render.mogrify(text, bound))  # the driver's own escaping, as it would send it
            processors.append(processing)
    finally:
        render.close()
    try:
        result = conn.exec_driver_sql(";\n".join(texts))  # no parameters: the text is final
    except sa.exc.StatementError as exc:
        exc.statement = _DESCRIPTION  # the text holds the values it read by, which errors must not
        raise
    # The driver's cursor holds one result per read: read each from it before the result is
    # closed (closing it discards what was not read).
    cursor = result.cursor
    try:
        found = [processed(cursor.fetchall(), processors[0])]
        for processing in processors[1:]:
            next_result(conn, cursor)
            found.append(processed(cursor.fetchall(), processing))
        return found
    finally:
        result.close()


def _padded(n: int) -> int:
    return 0 if n == 0 else 1 << (n - 1).bit_length()


def listed(column: sa.ColumnElement[Any], n: int) -> sa.ColumnElement[bool]:
    """``column IN (:_in0, …)`` for a ``PreparedRead`` of ``n`` values (none: false, as ``IN ()`` is)."""
    if n == 0:
        return sa.false()
    return column.in_([sa.bindparam(f"_in{i}") for i in range(n)])
