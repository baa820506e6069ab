"""Reads compiled once and run through the driver (status/infra/prepared.py) give, on every engine,
the rows ``Connection.execute`` gives: timestamps as datetimes, JSON as values, NULLs kept, the
``IN`` list of every length."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
import sqlalchemy as sa

from status.app.service import StatusService
from status.infra import tables as t
from status.infra.prepared import PreparedRead, listed, rows_together
from status.infra.stores import sql
from status.infra.stores.tasks import SqlTaskStore
from status.infra.tables import Timestamp
from tests.integration.conftest import Http
from tests.support.flows import activate, create_workflow, report
from tests.support.shards import engine_for

AT = datetime(2026, 12, 6, 1, 2, 3, 456000)


@pytest.fixture
def probe(engine: sa.Engine) -> Iterator[sa.Table]:
    table = sa.Table(
        f"prepared_probe_{uuid.uuid4().hex[:8]}",
        sa.MetaData(),
        sa.Column("id", sa.String(16), primary_key=True),
        sa.Column("tenant", sa.String(16), nullable=False),
        sa.Column("at", Timestamp, nullable=True),
        sa.Column("doc", sa.JSON, nullable=True),
        sa.Column("n", sa.Integer, nullable=False),
    )
    table.create(engine)
    with engine.begin() as conn:
        conn.execute(
            sa.insert(table),
            [
                {
                    "id": f"r{i}",
                    "tenant": "t1" if i % 2 else "t2",
                    "at": AT if i % 3 else None,
                    "doc": {"i": i, "tags": ["a", "100%"]} if i % 4 else None,
                    "n": i,
                }
                for i in range(7)
            ],
        )
    yield table
    table.drop(engine)


@pytest.mark.parametrize("wanted", [[], ["r1"], ["r0", "r3", "r6"], [f"r{i}" for i in range(7)], ["r2", "nope"]])
def test_a_prepared_read_gives_what_execute_gives(engine: sa.Engine, probe: sa.Table, wanted: list[str]) -> None:
    def build(n: int) -> sa.Select[Any]:
        query = sa.select(probe.c.id, probe.c.at, probe.c.doc, probe.c.n).where(probe.c.tenant == sa.bindparam("_t"))
        return query.where(listed(probe.c.id, n)).order_by(probe.c.id)

    prepared = PreparedRead(build)
    with engine.connect() as conn:
        for tenant in ("t1", "t2"):
            expected = [tuple(row) for row in conn.execute(build(len(wanted)), {"_t": tenant, **_in(wanted)})]
            got = prepared.rows(conn, {"_t": tenant}, wanted)
            assert got == expected
            assert got == prepared.rows(conn, {"_t": tenant}, wanted)  # compiled once, the same again
    assert all(isinstance(row[1], datetime) for row in got if row[1] is not None)


def test_reads_sent_together_give_what_each_gives_alone_and_a_failing_one_raises_as_execute_does(
    engine: sa.Engine, probe: sa.Table
) -> None:
    """Several reads in one query (MySQL/MariaDB; one after the other elsewhere): each its own rows,
    values and percent signs as they are; an error in a later statement is the driver's error
    wrapped as SQLAlchemy wraps a statement's, so the unit of work classifies it as ever."""

    def build(n: int) -> sa.Select[Any]:
        query = sa.select(probe.c.id, probe.c.at, probe.c.doc).where(probe.c.tenant == sa.bindparam("_t"))
        return query.where(listed(probe.c.id, n)).order_by(probe.c.id)

    prepared = PreparedRead(build)
    wanted = [("t1", ["r1", "r3", "nope"]), ("t2", [f"r{i}" for i in range(7)]), ("t1", [])]
    with engine.connect() as conn:
        alone = [prepared.rows(conn, {"_t": tenant}, ids) for tenant, ids in wanted]
        queries: list[str] = []

        def sent(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            queries.append(statement)

        sa.event.listen(engine, "before_cursor_execute", sent)
        together = rows_together(conn, [(prepared, {"_t": tenant}, ids) for tenant, ids in wanted])
        sa.event.remove(engine, "before_cursor_execute", sent)
        assert len(queries) == (1 if engine.dialect.name == "mysql" else len(wanted)), queries
        assert together == alone and any(row[2] == {"i": 1, "tags": ["a", "100%"]} for row in together[0])
        broken = PreparedRead(lambda n: sa.select(sa.column("missing")).select_from(probe))
        with pytest.raises(sa.exc.DBAPIError) as raised:
            rows_together(conn, [(prepared, {"_t": "t1"}, ["r1"]), (broken, {}, [])])
        assert "missing" in str(raised.value.orig)
        with pytest.raises(sa.exc.DBAPIError) as first:
            rows_together(conn, [(broken, {}, []), (prepared, {"_t": "t1"}, ["secret-id"])])
        assert "missing" in str(first.value.orig) and "secret-id" not in str(first.value)
        assert rows_together(conn, [(prepared, {"_t": "t1"}, ["r1"])]) == [alone[0][:1]]  # the connection still serves


def _in(values: list[str]) -> dict[str, str]:
    return {f"_in{i}": value for i, value in enumerate(values)}


def test_the_reads_of_a_groups_tasks_not_cached_give_what_execute_gives(http: Http, service: StatusService) -> None:
    """A group's tasks the view cache misses are read through prepared reads: the same states,
    steps and unrevoked grants as Core's statements read from the same rows."""
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    ctx = activate(http, task_id)
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    assert report(http, ctx, "STEP_PROGRESS", 2, progress={"current": 1, "total": 4}).status_code == 200
    for user in ("user-2", "user-3"):
        assert http.client.put(
            f"/internal/v1/tasks/{task_id}/acl/USER/{user}", json={}, headers=http.coordinator
        ).is_success
    assert http.client.delete(f"/internal/v1/tasks/{task_id}/acl/USER/user-3", headers=http.coordinator).is_success
    wanted = [task_id, "tsk_not_there"]
    acl = t.task_acl
    with engine_for(service, task_id).connect() as conn:
        tasks = conn.execute(sa.select(t.task).where(t.task.c.id.in_(wanted))).mappings()
        steps = conn.execute(sa.select(t.task_step).where(t.task_step.c.task_id.in_(wanted))).mappings()
        grants = conn.execute(
            sa.select(acl.c.principal_type, acl.c.principal_id).where(
                acl.c.task_id == task_id, acl.c.revoked_at.is_(None)
            )
        )
        expected_steps = sorted((sql.step_from_row(row) for row in steps), key=lambda s: s.step_id)
        store = SqlTaskStore(conn)
        assert store.load_many(wanted) == {row["id"]: sql.task_from_row(row) for row in tasks}
        got = sql.steps_of_tasks(conn, wanted)
        assert sorted(got[task_id], key=lambda s: s.step_id) == expected_steps and got["tsk_not_there"] == []
        assert len(expected_steps) == 3 and any(s.progress is not None for s in expected_steps)
        assert sorted(store.acl_grants_of(wanted)[task_id]) == sorted(tuple(row) for row in grants)
        assert ("USER", "user-2") in store.acl_grants_of([task_id])[task_id]
