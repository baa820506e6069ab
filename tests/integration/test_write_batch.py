"""A transaction's closing writes sent as one round trip: all of them or none, in order, errors
classified as before and free of the values they carried (status.infra.write_batch)."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
import sqlalchemy as sa

from status.app.ports import DuplicateKey
from status.app.records import DedupRecord
from status.infra import tables as t
from status.infra import write_batch
from status.infra.stores import sql
from status.infra.uow import SqlDatabase, UnitOfWork

NOW = datetime(2026, 12, 4, 12, 0, 0)


def _dedup(tenant: str, event_id: str, value: str = "v") -> DedupRecord:
    return DedupRecord(tenant, event_id, "tsk_x", "h" * 64, {"answer": value, "percent": "100%"}, NOW)


def _stored(engine: sa.Engine, tenant: str) -> list[tuple[str, Any]]:
    d = t.task_event_dedup
    with engine.connect() as conn:
        rows = conn.execute(sa.select(d.c.event_id, d.c.result).where(d.c.tenant_id == tenant).order_by(d.c.event_id))
        return [(r.event_id, r.result) for r in rows]


def _round_trips(uow: UnitOfWork) -> list[str]:
    """The queries this unit of work's PyMySQL connection sends from now on, one per round trip."""
    raw = uow.conn.connection.dbapi_connection
    if type(raw).__module__.split(".")[0] != "pymysql":
        pytest.skip("counted on PyMySQL's connection (its query method is Python)")
    sent: list[str] = []
    query: Callable[..., Any] = raw.query

    def counting(sql: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(sql.decode() if isinstance(sql, bytes) else sql)
        return query(sql, *args, **kwargs)

    raw.query = counting  # type: ignore[union-attr]
    return sent


def _restore(uow: UnitOfWork) -> None:
    vars(uow.conn.connection.dbapi_connection).pop("query", None)


def test_writes_in_a_batch_are_one_round_trip_and_all_commit(engine: sa.Engine) -> None:
    if engine.dialect.name != "mysql":
        pytest.skip("multi-statements are MySQL/MariaDB's")
    tenant = f"t_{secrets.token_hex(4)}"
    with UnitOfWork(engine) as uow:
        sent = _round_trips(uow)
        try:
            with uow.batched():
                sql.insert_dedups(uow.conn, [_dedup(tenant, "e1"), _dedup(tenant, "e2")])  # executemany
                uow.conn.execute(  # a Core statement, SQLAlchemy-compiled
                    sa.insert(t.task_event_dedup).values(**_dedup(tenant, "e3")._asdict() | {"result": {"n": 3}})
                )
                assert sent == []  # nothing has gone yet
            assert len(sent) == 1 and sent[0].count("INSERT INTO") == 2
        finally:
            _restore(uow)
        uow.commit()
    assert [e for e, _ in _stored(engine, tenant)] == ["e1", "e2", "e3"]
    assert _stored(engine, tenant)[0][1] == {"answer": "v", "percent": "100%"}  # a "%" is data, not a marker


def test_a_read_in_a_batch_sees_the_writes_before_it(engine: sa.Engine) -> None:
    tenant = f"t_{secrets.token_hex(4)}"
    d = t.task_event_dedup
    with UnitOfWork(engine) as uow:
        with uow.batched():
            sql.insert_dedups(uow.conn, [_dedup(tenant, "e1")])
            seen = uow.conn.execute(sa.select(sa.func.count()).select_from(d).where(d.c.tenant_id == tenant))
            assert seen.scalar_one() == 1
            sql.insert_dedups(uow.conn, [_dedup(tenant, "e2")])
        uow.commit()
    assert [e for e, _ in _stored(engine, tenant)] == ["e1", "e2"]


def test_a_failing_write_fails_the_batch_and_nothing_of_it_commits(engine: sa.Engine) -> None:
    tenant = f"t_{secrets.token_hex(4)}"
    secret = uuid.uuid4().hex
    with UnitOfWork(engine) as uow:
        sql.insert_dedups(uow.conn, [_dedup(tenant, "taken")])
        uow.commit()
    db = SqlDatabase(engine)

    def work(uow: UnitOfWork) -> None:
        with uow.batched():
            sql.insert_dedups(uow.conn, [_dedup(tenant, "fresh", secret)])
            sql.insert_dedups(uow.conn, [_dedup(tenant, "later", secret)])
            sql.insert_dedups(uow.conn, [_dedup(tenant, "taken", secret)])  # the key is stored
        uow.commit()

    # Classified as a statement's own error is: the duplicate key the unit of work reports.
    with pytest.raises(DuplicateKey) as refused:
        db.run(work)
    assert secret not in str(refused.value) and secret not in str(refused.value.__cause__)
    assert [e for e, _ in _stored(engine, tenant)] == ["taken"]
    # The connection that failed serves the next transaction as any other would.
    with UnitOfWork(engine) as uow:
        with uow.batched():
            sql.insert_dedups(uow.conn, [_dedup(tenant, "after")])
        uow.commit()
    assert [e for e, _ in _stored(engine, tenant)] == ["after", "taken"]


def test_a_batch_past_the_query_bound_goes_as_several_queries_and_all_commits(engine: sa.Engine) -> None:
    tenant = f"t_{secrets.token_hex(4)}"
    big = "x" * 10_000
    rows = [_dedup(tenant, f"e{i:03d}", big) for i in range(250)]  # ~2.5 MB: past one query's bound
    with UnitOfWork(engine) as uow:
        counted = engine.dialect.name == "mysql" and type(uow.conn.connection.dbapi_connection).__module__.startswith(
            "pymysql"
        )
        sent = _round_trips(uow) if counted else []
        try:
            with uow.batched():
                sql.insert_dedups(uow.conn, rows)
                sql.insert_dedups(uow.conn, [_dedup(tenant, "last")])
        finally:
            if counted:
                _restore(uow)
        uow.commit()
    stored = _stored(engine, tenant)
    assert [e for e, _ in stored] == [*(f"e{i:03d}" for i in range(250)), "last"]
    assert all(result["answer"] == big for e, result in stored if e != "last")
    if counted:
        assert len(sent) >= 3  # the rows in bounded parts, then the last one
        assert all(len(query) <= write_batch.MAX_QUERY_CHARS for query in sent)
