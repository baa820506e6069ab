"""mysqlclient connections as ``status.infra.db`` sets them up: the driver's literals, faster.

The property test holds the two equal on any value a row may hold, on a live connection in the
server's default mode and with NO_BACKSLASH_ESCAPES (text is escaped by the driver's C code,
which reads that mode); the round trip shows MariaDB reads back exactly what was written.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from status.domain.lifecycle import Lifecycle
from status.infra.db import LONG_TEXT, create_engine, use_fast_literals
from tests.integration.test_pymysql_connections import HOSTILE

pytestmark = pytest.mark.mariadb

_TEXT = st.text(alphabet=st.sampled_from("ab\0\n\r\x1a\"'\\é𝄞 ")) | st.text()
_VALUES = (
    _TEXT
    | st.tuples(_TEXT, _TEXT).map(lambda parts: (parts[0] or "'") * LONG_TEXT + parts[1])  # escaped in Python
    | st.integers()
    | st.none()
    | st.booleans()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.datetimes(min_value=datetime(1, 1, 1), timezones=st.none() | st.timezones())
    | st.binary(max_size=20)
    | st.sampled_from(list(Lifecycle))
    | st.decimals(allow_nan=False, allow_infinity=False)
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
            conn.exec_driver_sql("CREATE TEMPORARY TABLE texts (id INT PRIMARY KEY, body LONGTEXT NOT NULL)")
            table = sa.table("texts", sa.column("id"), sa.column("body"))
            conn.execute(sa.insert(table), [{"id": i, "body": text} for i, text in enumerate(HOSTILE)])
            back = dict(conn.execute(sa.select(table.c.id, table.c.body)).all())  # type: ignore[arg-type]
            moments = [datetime(2026, 12, 1, 16, 59, 3, 120000), datetime(2026, 12, 1, 17, 0, 0)]
            conn.exec_driver_sql("CREATE TEMPORARY TABLE moments (id INT PRIMARY KEY, at DATETIME(6) NOT NULL)")
            stamps = sa.table("moments", sa.column("id"), sa.column("at"))
            conn.execute(sa.insert(stamps), [{"id": i, "at": m} for i, m in enumerate(moments)])
            read = list(conn.scalars(sa.select(stamps.c.at).order_by(stamps.c.id)))
        assert back == dict(enumerate(HOSTILE))
        assert read == moments
    finally:
        engine.dispose()
