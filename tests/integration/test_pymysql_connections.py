"""PyMySQL connections as ``status.infra.db`` sets them up: the library's escapes, faster; no TLS on loopback.

The property test holds the two equal on any text; the round trips show MariaDB reads back exactly
what was written, in the server's default mode and with NO_BACKSLASH_ESCAPES.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pymysql.connections
import pymysql.converters
import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st
from pymysql.constants.SERVER_STATUS import SERVER_STATUS_NO_BACKSLASH_ESCAPES

from status.domain.lifecycle import Lifecycle
from status.infra.db import create_engine, escape_datetime, escape_string, tls_args, use_fast_escaping

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


@given(st.datetimes(min_value=datetime(1, 1, 1), timezones=st.none() | st.timezones()))
def test_the_timestamps_are_pymysqls(value: datetime) -> None:
    assert escape_datetime(value) == pymysql.converters.escape_datetime(value)


class _Connection(pymysql.connections.Connection):
    """A connection's escaping without a server: the state its escapes read (charset, encoders,
    server status), as a connected one holds it."""

    def __init__(self, no_backslash_escapes: bool) -> None:  # no super().__init__: it connects
        self.encoding = "utf8"
        self.encoders = dict(pymysql.converters.encoders)
        self.server_status = SERVER_STATUS_NO_BACKSLASH_ESCAPES if no_backslash_escapes else 0


# What a row's values may be: shared with the mysqlclient connections' test.
ROW_VALUES = (
    st.text()
    | st.integers()
    | st.none()
    | st.booleans()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.datetimes(min_value=datetime(1, 1, 1), timezones=st.none() | st.timezones())
    | st.binary(max_size=20)
    | st.sampled_from(list(Lifecycle))
    | st.decimals(allow_nan=False, allow_infinity=False)
)


@given(values=st.lists(ROW_VALUES, max_size=12), no_backslash_escapes=st.booleans())
def test_a_rows_values_are_rendered_as_pymysql_renders_them(values: list[Any], no_backslash_escapes: bool) -> None:
    plain, fast = _Connection(no_backslash_escapes), _Connection(no_backslash_escapes)
    plain.encoders[datetime] = escape_datetime  # what the connection's own table holds
    assert use_fast_escaping(fast)
    assert "escape" in vars(fast)  # the connection's own, not the class's
    for value in values:
        assert fast.escape(value) == plain.escape(value)
    with pytest.raises(TypeError):  # a type nobody encodes is refused as the driver refuses it
        fast.escape(object(), {})


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
            write_and_read_back(conn)
    finally:
        engine.dispose()


@pytest.mark.mariadb
def test_a_loopback_connection_skips_tls_and_others_keep_pymysqls_choice(scratch_mariadb_url: str) -> None:
    engine = create_engine(scratch_mariadb_url)
    try:
        with engine.connect() as conn:
            dbapi = conn.connection.dbapi_connection
            assert dbapi is not None and dbapi.ssl is False  # no TLS context built for 127.0.0.1
    finally:
        engine.dispose()
    local = sa.make_url(scratch_mariadb_url)
    assert tls_args(local) == {"ssl_disabled": True}
    assert tls_args(local.set(host="db.internal.example")) == {}  # a remote server: PyMySQL's choice
    assert tls_args(local.update_query_dict({"ssl_ca": "/etc/ca.pem"})) == {}  # TLS asked for
    assert tls_args(local.set(drivername="mysql+mysqldb")) == {}  # another driver


def write_and_read_back(conn: sa.Connection) -> None:
    """Hostile texts (and one long enough for any long-text path) and two instants, written through
    bound values in the multi-row and the one-row form, read back exactly as written."""
    texts = [*HOSTILE, "".join(HOSTILE) * 20]
    conn.exec_driver_sql("CREATE TEMPORARY TABLE texts (id INT PRIMARY KEY, body LONGTEXT NOT NULL)")
    table = sa.table("texts", sa.column("id"), sa.column("body"))
    conn.execute(sa.insert(table), [{"id": i, "body": text} for i, text in enumerate(texts)])
    conn.execute(sa.insert(table).values(id=len(texts), body=HOSTILE[4] + HOSTILE[3]))  # one-row form
    back = dict(conn.execute(sa.select(table.c.id, table.c.body)).all())
    assert back == {**dict(enumerate(texts)), len(texts): HOSTILE[4] + HOSTILE[3]}
    moments = [datetime(2026, 12, 1, 16, 59, 3, 120000), datetime(2026, 12, 1, 17, 0, 0)]
    conn.exec_driver_sql("CREATE TEMPORARY TABLE moments (id INT PRIMARY KEY, at DATETIME(6) NOT NULL)")
    stamps = sa.table("moments", sa.column("id"), sa.column("at"))
    conn.execute(sa.insert(stamps), [{"id": i, "at": m} for i, m in enumerate(moments)])
    assert list(conn.scalars(sa.select(stamps.c.at).order_by(stamps.c.id))) == moments
