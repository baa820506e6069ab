"""mysqlclient connections as ``status.infra.db`` sets them up: the driver's literals, faster.

The property test holds the two equal on any value a row may hold, on a live connection in the
server's default mode and with NO_BACKSLASH_ESCAPES (text is escaped by the driver's C code,
which reads that mode); the round trip shows MariaDB reads back exactly what was written.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from status.infra.db import LONG_TEXT, create_engine, use_fast_literals
from tests.integration.test_pymysql_connections import ROW_VALUES, write_and_read_back

pytestmark = pytest.mark.mariadb

_TEXT = st.text(alphabet=st.sampled_from("ab\0\n\r\x1a\"'\\é𝄞 ")) | st.text()
_VALUES = (
    ROW_VALUES
    | _TEXT
    | st.tuples(_TEXT, _TEXT).map(lambda parts: (parts[0] or "'") * LONG_TEXT + parts[1])  # escaped in Python
    | st.tuples(st.integers(), st.text())
)


@pytest.fixture(scope="module", params=["", "NO_BACKSLASH_ESCAPES"])
def connections(mariadb_c_url: str, request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any, str]]:
    """Two live connections in one SQL mode: the driver's own, and one given ``fast_literal``."""
    import MySQLdb

    url = sa.make_url(mariadb_c_url)
    pair = [
        MySQLdb.connect(host=url.host, port=url.port, user=url.username, password=url.password, charset="utf8mb4")
        for _ in range(2)
    ]
    for connection in pair:
        cursor = connection.cursor()
        cursor.execute(f"SET SESSION sql_mode = '{request.param}'")
        cursor.close()
    plain, fast = pair
    assert use_fast_literals(fast)
    assert "literal" in vars(fast)  # the connection's own, not the class's
    yield plain, fast, request.param
    for connection in pair:
        connection.close()


@given(values=st.lists(_VALUES, max_size=12))
def test_a_rows_values_are_rendered_as_mysqlclient_renders_them(
    connections: tuple[Any, Any, str], values: list[Any]
) -> None:
    plain, fast, _ = connections
    for value in values:
        assert fast.literal(value) == plain.literal(value)
    assert fast.literal(tuple(values)) == plain.literal(tuple(values))  # a row's tuple goes value by value


def test_text_is_escaped_for_the_connections_sql_mode(connections: tuple[Any, Any, str]) -> None:
    _, fast, sql_mode = connections
    for text in ("it's", "it's \\" * LONG_TEXT):  # short and long text take different paths
        escaped = text.replace("'", "''") if sql_mode else text.replace("\\", "\\\\").replace("'", "\\'")
        assert fast.literal(text) == f"'{escaped}'".encode()


def test_mariadb_reads_back_exactly_what_was_written(mariadb_c_url: str) -> None:
    engine = create_engine(mariadb_c_url)
    try:
        with engine.begin() as conn:
            dbapi = conn.connection.dbapi_connection
            assert dbapi is not None and "literal" in vars(dbapi)  # the faster literal is the one in use
            write_and_read_back(conn)
    finally:
        engine.dispose()
