"""Multi-row INSERTs into one table, the hot path's way (issue 30 item 2)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa


class Inserter:
    """Multi-row INSERTs into one table.

    SQLAlchemy's ``insert`` with a list of rows compiles through its cache and assembles every
    row's parameters in Python before the driver sees them. Here the statement's text is rendered
    once per dialect and column set, and the rows go to the DB-API's ``executemany`` as tuples
    (PyMySQL and mysqlclient send them as one multi-row INSERT), each value through its column
    type's own bind processor, as SQLAlchemy would. A JSON value shared by several rows — one
    summary for every viewer's channel — is encoded once.

    ``keep_existing``: a row whose primary key is already stored is skipped, the stored row kept
    (MySQL: ``ON DUPLICATE KEY UPDATE`` of the key to itself — not ``INSERT IGNORE``, which would
    also turn a truncated or invalid value into a warning; SQLite: ``ON CONFLICT DO NOTHING``).
    """

    def __init__(self, table: sa.Table, *, keep_existing: bool = False) -> None:
        self.table = table
        self.keep_existing = keep_existing
        self._prepared: dict[tuple[str, tuple[str, ...]], tuple[str, list[Any], list[bool]]] = {}

    def __call__(self, conn: sa.Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        by_columns: dict[tuple[str, ...], list[Mapping[str, Any]]] = {}
        for row in rows:
            by_columns.setdefault(tuple(row), []).append(row)
        encoded: dict[int, Any] = {}  # id of a JSON value -> its text, for this call's rows
        for columns, same in by_columns.items():
            sql, processors, is_json = self._prepare(conn.dialect, columns)
            params = []
            for row in same:
                values = []
                for column, process, json_column in zip(columns, processors, is_json, strict=True):
                    raw = row[column]
                    if raw is None or process is None:
                        values.append(raw)
                    elif json_column:
                        text = encoded.get(id(raw))
                        if text is None:
                            text = encoded[id(raw)] = process(raw)
                        values.append(text)
                    else:
                        values.append(process(raw))
                params.append(tuple(values))
            conn.exec_driver_sql(sql, params)

    def _prepare(self, dialect: sa.Dialect, columns: tuple[str, ...]) -> tuple[str, list[Any], list[bool]]:
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
            prepared = (sql, [t.bind_processor(dialect) for t in types], [isinstance(t, sa.JSON) for t in types])
            self._prepared[key] = prepared
        return prepared
