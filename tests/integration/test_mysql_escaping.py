"""PyMySQL connections escape strings with ``status.infra.db.escape_string``: the library's escapes, faster.

The property test holds the two equal on any text; the round trips show MariaDB reads back exactly
what was written, in the server's default mode and with NO_BACKSLASH_ESCAPES.
"""

from __future__ import annotations

import pymysql.converters
import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from status.infra.db import create_engine, escape_string

HOSTILE = [
    "",
    "plain",
    'it\'s "quoted"',
    "back\\slash \\' \\\" \\\\",
    "nul\0 newline\n return\r ctrl-z\x1a",
    "'); DROP TABLE t; --",
    '{"title": "Contract \\"A\\"\\n", "note": "l\'avis"}',
    "ünïcødé ✓ 𝄞 \u2028",
]


@given(st.text(alphabet=st.sampled_from("ab\0\n\r\x1a\"'\\é𝄞 ")) | st.text())
def test_the_escapes_are_pymysqls(value: str) -> None:
    assert escape_string(value) == pymysql.converters.escape_string(value)


@pytest.mark.mariadb
@pytest.mark.parametrize("sql_mode", ["", "NO_BACKSLASH_ESCAPES"])
def test_mariadb_reads_back_exactly_what_was_written(scratch_mariadb_url: str, sql_mode: str) -> None:
    engine = create_engine(scratch_mariadb_url)
    try:
        with engine.begin() as conn:
            dbapi = conn.connection.dbapi_connection
            assert dbapi is not None and "_escape_string" in vars(dbapi)  # the faster escape is the one in use
            if sql_mode:
                conn.exec_driver_sql(f"SET SESSION sql_mode = '{sql_mode}'")
            conn.exec_driver_sql("CREATE TABLE texts (id INT PRIMARY KEY, body LONGTEXT NOT NULL)")
            table = sa.table("texts", sa.column("id"), sa.column("body"))
            conn.execute(sa.insert(table), [{"id": i, "body": text} for i, text in enumerate(HOSTILE)])
            conn.execute(sa.insert(table).values(id=len(HOSTILE), body=HOSTILE[4] + HOSTILE[3]))  # one-row form
            back = dict(conn.execute(sa.select(table.c.id, table.c.body)).all())  # type: ignore[arg-type]
        assert back == {**dict(enumerate(HOSTILE)), len(HOSTILE): HOSTILE[4] + HOSTILE[3]}
    finally:
        engine.dispose()
