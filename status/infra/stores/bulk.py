"""Multi-row UPDATE: many rows of one table, each with its own changed columns, in one statement.

A group of events ends with the final state of every task and step row it touched. Writing
them one UPDATE per row makes a group cost statements in proportion to its size; here the
rows travel as a derived table joined to the target, and each column is assigned only in the
rows whose events changed it (a per-row flag), so a column an event did not touch keeps what
the database holds (heartbeat columns move outside events, without a version).

A column every row of the statement changes needs no flag: it is assigned outright, so a group
whose events changed the same columns (the usual case: a batch of progress reports) binds only
the keys and the values.

MySQL/MariaDB: ``UPDATE t JOIN (SELECT … UNION ALL SELECT …) AS v ON … SET t.c = IF(v.f, v.c, t.c)``.
SQLite ≥ 3.33: ``UPDATE t SET c = CASE WHEN v.f THEN v.c ELSE c END FROM (…) AS v WHERE …``;
older SQLite (dev only): one UPDATE per row.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

# Rows per statement: bounds the statement's size and its bound parameters (SQLite allows
# 32,766); a group of events is far smaller, so it costs one statement per table.
ROWS_PER_STATEMENT = 200
_SQLITE_UPDATE_FROM = sqlite3.sqlite_version_info >= (3, 33, 0)


def changed_columns(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> dict[str, Any]:
    """The columns of ``after`` that differ from ``before`` (all of them without a ``before``)."""
    if before is None:
        return dict(after)
    return {k: v for k, v in after.items() if before.get(k) != v}


def update_rows(
    conn: sa.Connection, table: sa.Table, key: Sequence[str], rows: Sequence[tuple[Mapping[str, Any], dict[str, Any]]]
) -> int:
    """Write ``rows`` — (key values, changed columns) — of ``table``; returns the statements issued."""
    rows = [(k, changed) for k, changed in rows if changed]
    if not rows:
        return 0
    dialect = conn.dialect
    if dialect.name == "sqlite" and not _SQLITE_UPDATE_FROM:
        for keys, changed in rows:
            conn.execute(sa.update(table).where(*[table.c[k] == keys[k] for k in key]).values(changed))
        return len(rows)
    columns = sorted({c for _, changed in rows for c in changed})
    process = {c: table.c[c].type.bind_processor(dialect) for c in [*key, *columns]}

    def value(column: str, raw: Any) -> Any:
        processor = process[column]
        return processor(raw) if processor is not None and raw is not None else raw

    statements = 0
    for start in range(0, len(rows), ROWS_PER_STATEMENT):
        part = rows[start : start + ROWS_PER_STATEMENT]
        everywhere = [all(column in changed for _, changed in part) for column in columns]
        params: list[Any] = []
        for keys, changed in part:
            params += [value(k, keys[k]) for k in key]
            for column, always in zip(columns, everywhere, strict=True):
                if always:
                    params.append(value(column, changed[column]))
                elif column in changed:
                    params += [value(column, changed[column]), 1]
                else:
                    params += [None, 0]
        sql = _statement(dialect, table.name, key, list(zip(columns, everywhere, strict=True)), len(part))
        conn.exec_driver_sql(sql, tuple(params))
        statements += 1
    return statements


def _statement(dialect: sa.Dialect, table: str, key: Sequence[str], columns: list[tuple[str, bool]], rows: int) -> str:
    """The UPDATE of ``rows`` rows: their keys, then per column its value, and its flag unless
    every row changes it (``columns``: (name, changed by every row))."""
    mark = "%s" if dialect.paramstyle in ("format", "pyformat") else "?"
    names = [f"k{i}" for i in range(len(key))]
    for i, (_, always) in enumerate(columns):
        names += [f"c{i}"] if always else [f"c{i}", f"f{i}"]
    first = "SELECT " + ", ".join(f"{mark} AS {n}" for n in names)
    derived = first + (" UNION ALL SELECT " + ", ".join([mark] * len(names))) * (rows - 1)
    if dialect.name == "sqlite":
        sets = ", ".join(
            f"{c} = v.c{i}" if always else f"{c} = CASE WHEN v.f{i} THEN v.c{i} ELSE {table}.{c} END"
            for i, (c, always) in enumerate(columns)
        )
        on = " AND ".join(f"{table}.{k} = v.k{i}" for i, k in enumerate(key))
        return f"UPDATE {table} SET {sets} FROM ({derived}) AS v WHERE {on}"
    sets = ", ".join(
        f"t.{c} = v.c{i}" if always else f"t.{c} = IF(v.f{i}, v.c{i}, t.{c})" for i, (c, always) in enumerate(columns)
    )
    on = " AND ".join(f"t.{k} = v.k{i}" for i, k in enumerate(key))
    return f"UPDATE {table} AS t JOIN ({derived}) AS v ON {on} SET {sets}"
