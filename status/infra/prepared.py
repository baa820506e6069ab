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

_Processor = Callable[[Any], Any] | None


class PreparedRead:
    """A SELECT built by ``build(n)`` — ``n`` the length of its one ``IN`` list, named ``_in0`` …
    ``_in{n-1}`` (0 without one) — and its other bound parameters by name."""

    def __init__(self, build: Callable[[int], sa.Select[Any]]) -> None:
        self._build = build
        self._compiled: dict[tuple[str, str, int], tuple[str, tuple[str, ...], bool, list[_Processor]]] = {}

    def rows(self, conn: sa.Connection, params: dict[str, Any], listed: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        dialect = conn.dialect
        size = _padded(len(listed))
        key = (dialect.name, dialect.driver, size)
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compiled[key] = self._compile(dialect, size)
        text, order, positional, processors = compiled
        values = {**params, **{f"_in{i}": value for i, value in enumerate(listed)}}
        values.update((f"_in{i}", listed[-1]) for i in range(len(listed), size))
        bound: Any = tuple(values[name] for name in order) if positional else values
        rows = conn.exec_driver_sql(text, bound).fetchall()
        if not any(processors):
            return [tuple(row) for row in rows]
        return [
            tuple(
                value if process is None or value is None else process(value)
                for process, value in zip(processors, row, strict=True)
            )
            for row in rows
        ]

    def _compile(self, dialect: sa.Dialect, n: int) -> tuple[str, tuple[str, ...], bool, list[_Processor]]:
        statement = self._build(n)
        compiled = statement.compile(dialect=dialect)
        order = tuple(compiled.positiontup or ())
        processors: list[_Processor] = [
            dialect.type_descriptor(column.type).result_processor(dialect, None)
            for column in statement.selected_columns
        ]
        return compiled.string, order, dialect.positional, processors


def _padded(n: int) -> int:
    return 0 if n == 0 else 1 << (n - 1).bit_length()


def listed(column: sa.ColumnElement[Any], n: int) -> sa.ColumnElement[bool]:
    """``column IN (:_in0, …)`` for a ``PreparedRead`` of ``n`` values (none: false, as ``IN ()`` is)."""
    if n == 0:
        return sa.false()
    return column.in_([sa.bindparam(f"_in{i}") for i in range(n)])
