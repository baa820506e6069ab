"""Multi-row INSERTs into one table, the hot path's way."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple, Protocol

import sqlalchemy as sa


class Record(Protocol):
    """A row as a named tuple: its fields are the table's columns (``status.app.records``)."""

    @property
    def _fields(self) -> tuple[str, ...]: ...

    def __iter__(self) -> Iterator[Any]: ...


class _Prepared(NamedTuple):
    sql: str
    # (position, bind processor, is a JSON column) of the columns whose values need converting
    converted: tuple[tuple[int, Any, bool], ...]


class Inserter:
    """Multi-row INSERTs into one table.

    SQLAlchemy's ``insert`` with a list of rows compiles through its cache and assembles every
    row's parameters in Python before the driver sees them. Here the statement's text is rendered
    once per dialect and record type, and the records — named tuples whose fields are the
    table's columns — go to the DB-API's ``executemany`` as they are (PyMySQL and mysqlclient send
    them as one multi-row INSERT), only the values whose column type converts them passed through
    that type's own bind processor, as SQLAlchemy would. A JSON value shared by several rows — one
    summary for every viewer's channel — is encoded once.

    ``keep_existing``: a row whose primary key is already stored is skipped, the stored row kept
    (MySQL: ``ON DUPLICATE KEY UPDATE`` of the key to itself — not ``INSERT IGNORE``, which would
    also turn a truncated or invalid value into a warning; SQLite: ``ON CONFLICT DO NOTHING``).
    """

    def __init__(self, table: sa.Table, *, keep_existing: bool = False) -> None:
        self.table = table
        self.keep_existing = keep_existing
        self._prepared: dict[tuple[str, tuple[str, ...]], _Prepared] = {}

    def __call__(self, conn: sa.Connection, rows: Sequence[Record]) -> None:
        by_columns: dict[tuple[str, ...], list[Record]] = {}
        for row in rows:
            by_columns.setdefault(row._fields, []).append(row)
        encoded: dict[int, Any] = {}  # id of a JSON value -> its text, for this call's rows
        for columns, same in by_columns.items():
            sql, converted = self._prepare(conn.dialect, columns)
            if not converted:
                conn.exec_driver_sql(sql, [tuple(row) for row in same])
                continue
            params = []
            for row in same:
                values = list(row)
                for at, process, json_column in converted:
                    raw = values[at]
                    if raw is None:
                        continue
                    if json_column:
                        text = encoded.get(id(raw))
                        if text is None:
                            text = encoded[id(raw)] = process(raw)
                        values[at] = text
                    else:
                        values[at] = process(raw)
                params.append(tuple(values))
            conn.exec_driver_sql(sql, params)

    def _prepare(self, dialect: sa.Dialect, columns: tuple[str, ...]) -> _Prepared:
        key = (dialect.name, columns)
        prepared = self._prepared.get(key)
        if prepared is None:
            mark = "%s" if dialect.paramstyle in ("format", "pyformat") else "?"
            quote = dialect.identifier_preparer.quote
            sql = (
                f"INSERT INTO {quote(self.table.name)} ({', '.join(quote(c) for c in columns)})"
                f" VALUES ({', '.join([mark] * len(columns))})"
            )
            if self.keep_existing:
                pk = quote(self.table.primary_key.columns.values()[0].name)
                mysql = dialect.name == "mysql"
                sql += f" ON DUPLICATE KEY UPDATE {pk} = {pk}" if mysql else " ON CONFLICT DO NOTHING"
            types = [self.table.c[c].type.dialect_impl(dialect) for c in columns]
            converted = tuple(
                (at, process, isinstance(kind, sa.JSON))
                for at, kind in enumerate(types)
                if (process := kind.bind_processor(dialect)) is not None
            )
            prepared = self._prepared[key] = _Prepared(sql, converted)
        return prepared
