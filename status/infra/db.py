"""Engine construction for MySQL/MariaDB and SQLite."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import datetime
from typing import Any

import orjson
import sqlalchemy as sa

from status.infra import write_batch
from status.infra.db_errors import NODE_NOT_READY, mysql_code
from status.infra.metrics import POOLS


def create_engine(database_url: str, *, statement_timeout: float = 0.0, **kwargs: Any) -> sa.Engine:  # noqa: C901
    """An engine with the settings the status service relies on.

    * MySQL/MariaDB: READ COMMITTED (row locks are taken explicitly with
      ``FOR UPDATE``; gap locks from REPEATABLE READ only add deadlocks), a
      pre-ping so failovers surface as retryable errors, utf8mb4.
    * SQLite: one writer at a time; transactions start with ``BEGIN IMMEDIATE``
      so a read-then-write never upgrades a lock mid-transaction.

    ``statement_timeout`` (seconds, 0: none; design D13) bounds what one statement may take, so a
    stuck database cannot hold a request, a connection and a thread for good: the server ends a
    statement past it (MariaDB ``max_statement_time``; MySQL ``MAX_EXECUTION_TIME``, reads only),
    a lock wait at half of it (``innodb_lock_wait_timeout``, whole seconds; retried), and the
    driver gives up on a server that sends nothing for five seconds more (socket read/write
    timeouts: a hung or partitioned server).
    SQLite waits for the write lock at most that long.
    """
    url = sa.make_url(database_url)
    # Errors are logged: their text must not carry bound values (tokens, payloads, user data).
    kwargs.setdefault("hide_parameters", True)
    kwargs.setdefault("json_serializer", json_text)
    if url.get_backend_name() == "sqlite":
        engine = sa.create_engine(url, connect_args={"timeout": 30, "check_same_thread": False}, **kwargs)

        @sa.event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            busy = int(statement_timeout * 1000) if statement_timeout > 0 else 30000
            cursor.execute(f"PRAGMA busy_timeout={busy}")
            cursor.close()

        @sa.event.listens_for(engine, "begin")
        def _begin_immediate(conn: sa.Connection) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    kwargs.setdefault("pool_pre_ping", True)
    # Every unit of work ends its transaction (commit, or rollback on close), so the
    # pool's own rollback on check-in would only add a round trip per transaction.
    kwargs.setdefault("pool_reset_on_return", None)
    kwargs.setdefault("pool_size", 20)
    kwargs.setdefault("max_overflow", 20)
    kwargs.setdefault("isolation_level", "READ COMMITTED")
    socket_limits: dict[str, Any] = {}
    if statement_timeout > 0 and url.get_driver_name() in ("pymysql", "mysqldb"):
        socket_limits = {
            "read_timeout": math.ceil(statement_timeout) + 5,
            "write_timeout": math.ceil(statement_timeout) + 5,
        }
    kwargs["connect_args"] = {**tls_args(url), **socket_limits, **kwargs.get("connect_args", {})}
    engine = sa.create_engine(url, **kwargs)
    POOLS.watch(engine)  # db_pool_connections on /metrics

    @sa.event.listens_for(engine, "handle_error")
    def _node_gone(context: sa.engine.ExceptionContext) -> None:
        # A Galera node outside the primary component (or still joining) refuses every statement
        # with 1047 while its connection stays open: the connection is dropped like a lost one,
        # so the retry opens a new one, which the balancer sends to a node that takes writes.
        if mysql_code(context.original_exception) in NODE_NOT_READY:
            context.is_disconnect = True

    write_batch.install(engine)  # a transaction's closing writes may go as one round trip (uow.batched)

    if url.get_driver_name() == "pymysql":

        @sa.event.listens_for(engine, "connect")
        def _faster_escaping(dbapi_connection: Any, _record: Any) -> None:
            use_fast_escaping(dbapi_connection)

    elif url.get_driver_name() == "mysqldb":

        @sa.event.listens_for(engine, "connect")
        def _faster_literals(dbapi_connection: Any, _record: Any) -> None:
            use_fast_literals(dbapi_connection)

    if statement_timeout > 0:

        @sa.event.listens_for(engine, "connect")
        def _statement_limits(dbapi_connection: Any, _record: Any) -> None:
            for statement in session_limits(dbapi_connection, statement_timeout):
                cursor = dbapi_connection.cursor()
                cursor.execute(statement)
                cursor.close()

    return engine


def session_limits(dbapi_connection: Any, seconds: float) -> list[str]:
    """The session settings that bound one statement and one lock wait, for this server's flavour."""
    info = getattr(dbapi_connection, "get_server_info", lambda: "")() or ""
    # A lock wait ends at half the limit: it is retried (contention is usually brief), and the
    # statement limit is left for the work itself.
    lock_wait = max(1, math.ceil(seconds / 2))
    if "mariadb" in str(info).lower():
        return [f"SET SESSION max_statement_time = {seconds:g}", f"SET SESSION innodb_lock_wait_timeout = {lock_wait}"]
    return [
        f"SET SESSION MAX_EXECUTION_TIME = {int(seconds * 1000)}",
        f"SET SESSION innodb_lock_wait_timeout = {lock_wait}",
    ]


def tls_args(url: sa.URL) -> dict[str, Any]:
    """PyMySQL tries TLS on every connection unless told otherwise, building a TLS context with the
    system's certificates each time (20 ms of CPU a connection, forty times a plain one); over the
    loopback interface TLS protects nothing, so there it is off. Anywhere else, and wherever the
    URL says anything about TLS, the driver's own choice stands."""
    loopback = url.host in ("127.0.0.1", "localhost", "::1") or "unix_socket" in url.query
    if url.get_driver_name() == "pymysql" and loopback and not any(k.startswith("ssl") for k in url.query):
        return {"ssl_disabled": True}
    return {}


def json_text(value: Any) -> str:
    """JSON columns' text (every outbox payload is one): orjson, an order of magnitude faster than
    ``json.dumps`` and compact; the standard encoder for what orjson refuses and it takes (integers
    past 64 bits, lone surrogates in client text), so nothing a client may send fails here."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:  # orjson.JSONEncodeError is one
        return json.dumps(value)


def json_bytes(value: Any) -> bytes:
    """An HTTP answer's JSON as Starlette writes it (compact, UTF-8, no NaN), by orjson where it can."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


# PyMySQL escapes every string it binds in Python, with ``str.translate`` over a table, one
# character at a time; the outbox's payloads (every message carries its projection's full state)
# made that a fifth of the API's CPU. The same escapes as one ``str.replace`` pass per character
# that needs one run in C, about six times faster on a payload.
_ESCAPES = (("\0", "\\0"), ("\n", "\\n"), ("\r", "\\r"), ("\032", "\\Z"), ('"', '\\"'), ("'", "\\'"))


def escape_string(value: str) -> str:
    """What ``pymysql.converters.escape_string`` returns (a property test holds them equal), faster."""
    value = value.replace("\\", "\\\\")  # first: each escape below adds a backslash of its own
    for char, escaped in _ESCAPES:
        if char in value:
            value = value.replace(char, escaped)
    return value


def use_fast_escaping(connection: Any) -> bool:
    """Give a PyMySQL connection ``escape_string`` and ``fast_escape``; False (and left as it was)
    where its version has no per-connection escape to replace."""
    if not callable(getattr(type(connection), "_escape_string", None)):
        return False
    from pymysql.constants.SERVER_STATUS import SERVER_STATUS_NO_BACKSLASH_ESCAPES

    def escape_text(value: str) -> str:
        if connection.server_status & SERVER_STATUS_NO_BACKSLASH_ESCAPES:  # as PyMySQL does in that mode
            return value.replace("'", "''")
        return escape_string(value)

    connection._escape_string = escape_text
    connection.encoders[datetime] = escape_datetime  # the connection's own copy of the table
    connection.escape = fast_escape(connection.escape, escape_text)
    return True


def fast_escape(escape: Callable[..., str], escape_text: Callable[[str], str]) -> Callable[..., str]:
    """A connection's ``escape`` (what PyMySQL binds every value with) that renders the types a
    row is made of — text, whole numbers, NULL, instants — without the driver's dispatch: three
    calls and a table lookup a value, and a group writes a few hundred values per activity. The
    same text as ``escape`` (a property test holds them equal); any other type, a subclass (an
    enumeration's member) or an explicit table goes to ``escape`` itself."""

    def escape_value(value: Any, mapping: Any = None) -> str:
        kind = type(value)
        if mapping is None:
            if kind is str:
                return f"'{escape_text(value)}'"
            if kind is int:
                return str(value)
            if value is None:
                return "NULL"
            if kind is datetime:
                return escape_datetime(value)
        return escape(value, mapping)

    return escape_value


def use_fast_literals(connection: Any) -> bool:
    """Give a mysqlclient connection ``fast_literal``; False (and left as it was) where its
    version has no Python ``literal`` to replace."""
    if not callable(getattr(connection, "literal", None)) or not callable(getattr(connection, "string_literal", None)):
        return False
    connection.literal = fast_literal(connection.literal, connection.string_literal, connection.encoding)
    return True


# Text at least this long is escaped in Python (``str.replace`` passes, as ``escape_string``)
# rather than by the driver's C escape, which walks it a byte at a time with the character
# set's rules: a change's outbox payload (7 KB of JSON for a 10-step task) took 22 us there,
# 2 us here. Below it the C escape is the cheaper of the two.
LONG_TEXT = 256
# What the C escape makes of a quote in a session whose SQL mode has NO_BACKSLASH_ESCAPES.
_QUOTE_DOUBLED = b"''''"


def fast_literal(
    literal: Callable[[Any], bytes], string_literal: Callable[[bytes], bytes], encoding: str
) -> Callable[[Any], bytes]:
    """A mysqlclient connection's ``literal`` (what it binds every value with) that renders the
    types a row is made of — text, whole numbers, NULL, instants — without the driver's dispatch
    through its conversion table and Python converters: a third of the time a value. The same
    bytes as ``literal`` (a property test holds them equal, in both SQL modes); any other type
    or a subclass (an enumeration's member, a bool) goes to ``literal`` itself.

    The trap: how text is escaped depends on the session's SQL mode (NO_BACKSLASH_ESCAPES: only
    quotes doubled), which the server reports with every answer and the C escape reads; this
    driver does not expose it. So long text asks the C escape how it escapes a quote, each
    time, and escapes the same way; short text goes to the C escape itself. Neither escape
    depends on the character set: in UTF-8 no byte of a multi-byte character is an ASCII one."""

    def literal_value(value: Any) -> bytes:
        kind = type(value)
        if kind is str:
            if len(value) < LONG_TEXT:
                return string_literal(value.encode(encoding))
            doubled = string_literal(b"'") == _QUOTE_DOUBLED
            text = value.replace("'", "''") if doubled else escape_string(value)
            return ("'" + text + "'").encode(encoding)
        if kind is int:
            return b"%d" % value
        if value is None:
            return b"NULL"
        if kind is datetime:
            return escape_datetime(value).encode()
        return literal(value)

    return literal_value


def escape_datetime(value: datetime, mapping: Any = None) -> str:
    """What ``pymysql.converters.escape_datetime`` returns (a property test holds them equal): the
    wall time, microseconds only when there are some; ``isoformat`` is the same text, cheaper."""
    # The wall time whatever the zone, as PyMySQL writes it; stored instants are naive already.
    return f"'{(value if value.tzinfo is None else value.replace(tzinfo=None)).isoformat(' ')}'"
