"""A transaction's closing writes sent as one round trip (MySQL/MariaDB multi-statements).

A group of events ends with one statement per table — steps, tasks, events, dedup results, the
projector's feed, the outbox, handles — each through SQLAlchemy and the driver on its own: a
round trip, a result to set up and an OK packet to parse, per statement. That fixed cost was
most of what a small group costs (docs/benchmarks.md). Inside ``batched(conn)`` those writes
are rendered by the driver itself, as it would send them (its own escaping, its own multi-row
INSERT), kept, and sent together at the block's end; the server runs them in order in the same
transaction, so what commits is exactly what separate statements would have committed.

The trap: a deferred statement has not run when its ``execute`` returns. Nothing inside the
block may read a row it writes, nor its row count or inserted id (they are not there yet); a
read, or anything that is not a plain write, sends what is kept first and then runs as usual.
A failing statement stops the ones after it; its error surfaces at the block's end as the
driver's error wrapped as SQLAlchemy wraps it (``sqlalchemy.exc.DBAPIError``, its code intact,
no values in its text), and the transaction is rolled back by its unit of work as ever.

SQLite, and a MySQL driver whose cursor cannot render a statement (``mogrify``), run each
statement at once, as outside the block.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from weakref import WeakSet

import sqlalchemy as sa
from pymysql.constants import CLIENT
from pymysql.cursors import RE_INSERT_VALUES

from status.infra.db_errors import NODE_NOT_READY, mysql_code

# The open batches, by the id of their connection (``sqlalchemy.Connection``): each is removed
# when its block ends, so an id is never looked up after its connection is gone.
_OPEN: dict[int, list[str]] = {}
_INSTALLED: WeakSet[sa.Engine] = WeakSet()  # engines whose connections take several statements a query
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")
# Stands in for the SQL in an error's text: the rendered statements carry the values bound into
# them (payloads, user data), which errors must not (status.infra.db: hide_parameters).
_DESCRIPTION = "the transaction's closing writes, sent as one multi-statement round trip"
# What one query may hold before it is sent: the driver's own bound on a multi-row INSERT
# (PyMySQL's ``Cursor.max_stmt_length``), far below the server's ``max_allowed_packet`` (16 MiB
# by default) even at four bytes a character. A group of many large payloads goes as several
# queries, each still in its transaction and in order.
MAX_QUERY_CHARS = 1_024_000


@contextmanager
def batched(conn: sa.Connection) -> Iterator[None]:
    """Writes issued on ``conn`` inside the block go to the server together at its end."""
    if conn.dialect.name != "mysql" or id(conn) in _OPEN:  # an enclosing block sends them
        yield
        return
    kept: list[str] = []
    _OPEN[id(conn)] = kept
    try:
        yield
        _send(conn, kept)
    finally:
        _OPEN.pop(id(conn), None)


def install(engine: sa.Engine) -> None:
    """Let ``batched`` defer the writes of this MySQL/MariaDB engine's connections, which may then
    send several statements in one query (``CLIENT.MULTI_STATEMENTS``). Every statement the
    service sends binds its values through the driver, so no text of a client's can end one
    statement and start another."""

    _INSTALLED.add(engine)

    @sa.event.listens_for(engine, "do_connect")
    def _multi_statements(dialect: Any, record: Any, cargs: Any, cparams: dict[str, Any]) -> None:
        cparams["client_flag"] = cparams.get("client_flag", 0) | CLIENT.MULTI_STATEMENTS

    sa.event.listen(engine, "do_execute", _deferred_execute)
    sa.event.listen(engine, "do_executemany", _deferred_executemany)


def multi_statements(conn: sa.Connection) -> bool:
    """Whether ``conn`` may send several statements in one query (its engine went through ``install``)."""
    return conn.engine in _INSTALLED


def send_kept(conn: sa.Connection) -> None:
    """Send what an open batch on ``conn`` kept (a statement about to bypass the deferral reads
    after them)."""
    kept = _OPEN.get(id(conn))
    if kept:
        _send(conn, kept)


def next_result(conn: sa.Connection, cursor: Any) -> None:
    """Move the driver's ``cursor`` to the next statement's result of a multi-statement query; the
    statement's error is raised as SQLAlchemy raises a statement's (see ``_wrapped``)."""
    try:
        cursor.nextset()
    except conn.dialect.loaded_dbapi.Error as exc:
        raise _wrapped(conn, cursor, exc, "reads sent as one multi-statement query") from exc


def _deferred_execute(cursor: Any, statement: str, parameters: Any, context: Any) -> bool:
    kept = _open_batch(cursor, statement, context)
    if kept is None:
        return False
    _keep(context.root_connection, kept, cursor.mogrify(statement, parameters))
    return True  # SQLAlchemy: executed here, the driver is not called


def _deferred_executemany(cursor: Any, statement: str, parameters: Any, context: Any) -> bool:
    kept = _open_batch(cursor, statement, context)
    if kept is None:
        return False
    insert = RE_INSERT_VALUES.match(statement)
    if insert is None:  # an UPDATE per row: the driver runs it row by row, after what is kept
        _send(context.root_connection, kept)
        return False
    # Multi-row INSERTs as the driver's own executemany builds them: rows joined up to its bound.
    prefix, values, postfix = insert.group(1) % (), insert.group(2).rstrip(), (insert.group(3) or "") % ()
    rows: list[str] = []
    size = len(prefix) + len(postfix)
    for row in parameters:
        rendered = cursor.mogrify(values, row)
        if rows and size + len(rendered) + 1 > MAX_QUERY_CHARS:
            _keep(context.root_connection, kept, prefix + ",".join(rows) + postfix)
            rows, size = [], len(prefix) + len(postfix)
        rows.append(rendered)
        size += len(rendered) + 1
    _keep(context.root_connection, kept, prefix + ",".join(rows) + postfix)
    return True


def _keep(conn: sa.Connection, kept: list[str], statement: str) -> None:
    """Keep a rendered statement; what is kept goes first when this one would take the query past
    its bound (one statement past it on its own goes alone, as the driver would send it)."""
    if kept and sum(map(len, kept)) + len(statement) + 2 > MAX_QUERY_CHARS:
        _send(conn, kept)
    kept.append(statement)


def _open_batch(cursor: Any, statement: str, context: Any) -> list[str] | None:
    """The batch this statement joins, or None: no batch, or one it must not join (then what the
    batch kept is sent first, so statements reach the server in the order they were issued)."""
    kept = _OPEN.get(id(context.root_connection)) if _OPEN else None
    if kept is None:
        return None
    if not hasattr(cursor, "mogrify") or not statement.lstrip()[:7].upper().startswith(_WRITES):
        _send(context.root_connection, kept)
        return None
    return kept


def _send(conn: sa.Connection, kept: list[str]) -> None:
    """What the batch kept, as one round trip, every result read (an error stops the rest)."""
    if not kept:
        return
    sql = ";\n".join(kept)
    kept.clear()
    dbapi = conn.dialect.loaded_dbapi
    raw = conn.connection.dbapi_connection
    assert raw is not None  # the transaction's connection, checked out
    cursor = raw.cursor()
    try:
        cursor.execute(sql)  # no parameters: the text is final, a "%" in it is data
        while cursor.nextset():
            pass
    except dbapi.Error as exc:
        raise _wrapped(conn, cursor, exc) from exc
    finally:
        cursor.close()


def _wrapped(conn: sa.Connection, cursor: Any, exc: Any, description: str = _DESCRIPTION) -> sa.exc.StatementError:
    """A driver's error as SQLAlchemy wraps a statement's: a lost connection (or a Galera node that
    left the cluster, see status.infra.db_errors) is invalidated, so a retry gets a fresh one."""
    raw = conn.connection.dbapi_connection
    lost = conn.dialect.is_disconnect(exc, raw, cursor) or mysql_code(exc) in NODE_NOT_READY
    if lost:
        conn.invalidate(exc)
    wrapped: sa.exc.StatementError = sa.exc.DBAPIError.instance(
        description,
        None,
        exc,
        conn.dialect.loaded_dbapi.Error,
        hide_parameters=True,
        connection_invalidated=lost,
        dialect=conn.dialect,
    )
    return wrapped
