"""Group commit and the one-pass event path (design D8.1, P1, P2, P11, P15, P17; D16 cost growth)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa

from status.app import commands as c
from status.app.group_commit import GroupCommitter
from status.app.service import StatusService
from status.domain.auth import ExecutionClaims, ServicePrincipal
from status.domain.errors import DomainError, ErrorCode
from status.domain.model import Progress
from status.infra import tables as t
from status.infra.schemas import JsonSchemaValidator
from status.infra.stores import sql
from status.infra.stores.tasks import SqlTaskStore
from tests.support.factories import activate, event, follow_detail, wide_task
from tests.support.outbox import publications
from tests.support.shards import engine_for, fence_reads


def _claims(service: StatusService, coordinator: ServicePrincipal, task_id: str, step: str) -> ExecutionClaims:
    ctx = activate(service, coordinator, task_id, step, producer=f"producer-{step}")
    return service._tokens.verify(ctx.execution_token, service.now())


def _counts(engine: sa.Engine, task_id: str) -> tuple[int, int, int, int]:
    with engine.connect() as conn:

        def count(table: sa.Table, column: sa.Column[Any]) -> int:
            return int(
                conn.execute(sa.select(sa.func.count()).select_from(table).where(column == task_id)).scalar_one()
            )

        version = int(conn.execute(sa.select(t.task.c.version).where(t.task.c.id == task_id)).scalar_one())
        return (
            version,
            count(t.task_event_log, t.task_event_log.c.task_id),
            count(t.task_event_dedup, t.task_event_dedup.c.task_id),
            count(t.task_outbox, t.task_outbox.c.aggregate_id),
        )


def test_a_bad_event_among_good_ones_fails_alone(service: StatusService, coordinator: ServicePrincipal) -> None:
    task_id = wide_task(service, coordinator, 2)
    follow_detail(service, task_id)
    a, b = (_claims(service, coordinator, task_id, s) for s in ("s0", "s1"))
    before = _counts(engine_for(service, task_id), task_id)
    outcomes = service.report_group(
        [
            (a, event("STEP_STARTED", 1)),
            (b, event("STEP_PROGRESS", 1, progress=Progress(2, 10))),  # not started yet: decided under lock
            (b, event("STEP_STARTED", 0)),  # sourceSeq must be >= 1
            (b, event("STEP_STARTED", 2)),
        ]
    )
    assert isinstance(outcomes[1], DomainError) and outcomes[1].code is ErrorCode.INVALID_TRANSITION
    assert isinstance(outcomes[2], DomainError) and outcomes[2].code is ErrorCode.VALIDATION_FAILED
    good = [o for o in outcomes if isinstance(o, dict)]
    assert len(good) == 2 and all(o["accepted"] for o in good)
    # Gap-free: the two good events took exactly the next two versions, and nothing else was written.
    assert sorted(int(o["taskVersion"]) for o in good) == [before[0] + 1, before[0] + 2]
    version, events, dedups, outbox = _counts(engine_for(service, task_id), task_id)
    assert (version, events - before[1], dedups - before[2]) == (before[0] + 2, 2, 2)
    assert outbox - before[3] == 2  # one row per good event (its summary and its detail)


def test_the_same_event_id_twice_in_one_group(service: StatusService, coordinator: ServicePrincipal) -> None:
    task_id = wide_task(service, coordinator, 1)
    claims = _claims(service, coordinator, task_id, "s0")
    started = event("STEP_STARTED", 1)
    reused = c.ReportEvent(**{**started.__dict__, "source_seq": 2})  # same id, other content
    first, again, conflict = service.report_group([(claims, started), (claims, started), (claims, reused)])
    assert isinstance(first, dict) and isinstance(again, dict)
    assert first["duplicate"] is False and again["duplicate"] is True
    assert {k: v for k, v in again.items() if k != "duplicate"} == {k: v for k, v in first.items() if k != "duplicate"}
    assert isinstance(conflict, DomainError) and conflict.code is ErrorCode.EVENT_ID_CONFLICT
    # Outside the group, the retry gets the same first result (design P1).
    assert service.report_event(claims, started)["taskVersion"] == first["taskVersion"]


def _crash(monkeypatch: pytest.MonkeyPatch, name: str, when: Any = lambda *a, **k: True) -> None:
    """Fail right after a write of the group (the group's task and step rows are written by the
    task store in one statement each; the inserts by status.infra.stores.sql)."""
    target: Any = SqlTaskStore if hasattr(SqlTaskStore, name) else sql
    original = getattr(target, name)

    def crashing(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        if when(*args, **kwargs):
            raise RuntimeError(f"injected crash after {name}")
        return result

    monkeypatch.setattr(target, name, crashing)


@pytest.mark.parametrize("point", ["write_tasks", "insert_events", "insert_outbox"])
def test_a_crash_mid_group_leaves_nothing(
    service: StatusService, coordinator: ServicePrincipal, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    task_id = wide_task(service, coordinator, 3)
    claims = [_claims(service, coordinator, task_id, f"s{i}") for i in range(3)]
    before = _counts(engine_for(service, task_id), task_id)
    items = [(cl, event("STEP_STARTED", 1)) for cl in claims]
    _crash(monkeypatch, point)
    outcomes = service.report_group(items)
    assert all(isinstance(o, RuntimeError) for o in outcomes)
    assert _counts(engine_for(service, task_id), task_id) == before
    monkeypatch.undo()
    # The producers' retries with the same eventIds then land exactly once each.
    retried = service.report_group(items)
    assert all(isinstance(o, dict) and not o["duplicate"] for o in retried)
    assert _counts(engine_for(service, task_id), task_id)[0] == before[0] + 3


def test_a_poison_item_does_not_take_its_neighbours_down(
    service: StatusService, coordinator: ServicePrincipal, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_id = wide_task(service, coordinator, 3)
    claims = [_claims(service, coordinator, task_id, f"s{i}") for i in range(3)]
    before = _counts(engine_for(service, task_id), task_id)
    # A failure that is not a rejection, for one step only: the group rolls back, then each event runs alone.
    _crash(monkeypatch, "write_steps", lambda store, rows: any(after.step_id == "s1" for _, after in rows))
    outcomes = service.report_group([(cl, event("STEP_STARTED", 1)) for cl in claims])
    assert isinstance(outcomes[1], RuntimeError)
    assert isinstance(outcomes[0], dict) and isinstance(outcomes[2], dict)
    assert _counts(engine_for(service, task_id), task_id)[0] == before[0] + 2


def test_concurrent_producers_through_group_commit_keep_gap_free_versions(
    service: StatusService, coordinator: ServicePrincipal
) -> None:
    producers, per_producer = 6, 8
    task_id = wide_task(service, coordinator, producers)
    claims = [_claims(service, coordinator, task_id, f"s{i}") for i in range(producers)]
    start = _counts(engine_for(service, task_id), task_id)[0]
    sizes: list[int] = []
    last_of_group: set[int] = set()  # each transaction's newest version of the task

    def run_group(items: Any, writing: Any) -> Any:
        sizes.append(len(items))
        outcomes = service.report_group(items, writing)
        last_of_group.add(max(int(o["taskVersion"]) for o in outcomes if isinstance(o, dict)))
        return outcomes

    async def main() -> list[dict[str, Any]]:
        committer = GroupCommitter(run_group, max_group=16, max_in_flight=2)

        async def producer(cl: ExecutionClaims) -> list[dict[str, Any]]:
            kinds = ["STEP_STARTED"] + ["STEP_PROGRESS"] * (per_producer - 1)
            return [await committer.submit(cl, event(kind, seq)) for seq, kind in enumerate(kinds, start=1)]

        results = await asyncio.gather(*(producer(cl) for cl in claims))
        return [r for rs in results for r in rs]

    results = asyncio.run(main())
    versions = sorted(int(r["taskVersion"]) for r in results)
    assert versions == list(range(start + 1, start + 1 + producers * per_producer))
    assert max(sizes) > 1, "no two events ever shared a transaction"
    with engine_for(service, task_id).connect() as conn:
        logged = sorted(
            conn.scalars(sa.select(t.task_event_log.c.task_version).where(t.task_event_log.c.task_id == task_id))
        )
        outboxed = set(
            conn.scalars(sa.select(t.task_outbox.c.aggregate_version).where(t.task_outbox.c.aggregate_id == task_id))
        )
    # Every version is logged; a transaction's progress messages are covered by its newest state of
    # the task (full states, one commit): only that one is published, with every version before.
    assert logged == list(range(1, versions[-1] + 1))
    assert outboxed == set(range(1, start + 1)) | last_of_group


def test_group_commit_hands_each_caller_its_own_rejection(
    service: StatusService, coordinator: ServicePrincipal
) -> None:
    task_id = wide_task(service, coordinator, 1)
    claims = _claims(service, coordinator, task_id, "s0")

    async def main() -> tuple[Any, Any]:
        committer = GroupCommitter(service.report_group, max_group=8, max_in_flight=1)
        return await asyncio.gather(
            committer.submit(claims, event("STEP_STARTED", 1)),
            committer.submit(claims, event("STEP_STARTED", 0)),
            return_exceptions=True,
        )

    good, bad = asyncio.run(main())
    assert isinstance(good, dict) and good["accepted"]
    assert isinstance(bad, DomainError) and bad.code is ErrorCode.VALIDATION_FAILED


@contextmanager
def _statements(engine: sa.Engine) -> Iterator[list[str]]:
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement.split()[0].upper())

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


def _progress_cost(service: StatusService, coordinator: ServicePrincipal, steps: int) -> tuple[list[str], list[str]]:
    """Statements of one progress event: on a warm cache, then in a fresh process (cold cache)."""
    task_id = wide_task(service, coordinator, steps)
    claims = _claims(service, coordinator, task_id, "s0")
    service.report_event(claims, event("STEP_STARTED", 1))
    with _statements(engine_for(service, task_id)) as warm:
        service.report_event(claims, event("STEP_PROGRESS", 2, progress=Progress(1, 10)))
    cold_service = StatusService(
        service.db, execution_tokens=service._tokens, validator=JsonSchemaValidator(), shards=service.ctx.shards
    )
    cold_service.definitions = service.definitions  # definitions are loaded once a few seconds, not per event
    cold_service.ctx.definitions = service.definitions
    # ETA history is per operation and refreshed once a minute, like definitions: not per event.
    cold_service.ctx.durations = service.ctx.durations
    with _statements(engine_for(service, task_id)) as cold:
        cold_service.report_event(claims, event("STEP_PROGRESS", 3, progress=Progress(2, 10)))
    return warm, cold


def test_a_task_with_1000_steps_costs_the_same_statements_per_event_as_one_with_10(
    service: StatusService, coordinator: ServicePrincipal
) -> None:
    warm_small, cold_small = _progress_cost(service, coordinator, 10)
    warm_large, cold_large = _progress_cost(service, coordinator, 1000)
    assert warm_small == warm_large and cold_small == cold_large
    # One pass: on a warm cache the only read locks the task and looks up the eventId, in one statement
    # (on a shard, after the read of its write fence).
    assert warm_small.count("SELECT") == 1 + fence_reads(service), warm_small
    # A cold cache reads the task row, steps and viewers once: one query where the database takes
    # several statements in one (MySQL/MariaDB), three elsewhere.
    assert len(cold_small) == len(warm_small) + (1 if _multi_statements(service) else 3)


def test_the_cache_never_serves_a_step_another_process_changed(
    service: StatusService, coordinator: ServicePrincipal
) -> None:
    """Two API processes write the same task; each detail message still shows every step's latest state."""
    task_id = wide_task(service, coordinator, 2)
    follow_detail(service, task_id)
    a, b = (_claims(service, coordinator, task_id, s) for s in ("s0", "s1"))
    other = StatusService(
        service.db, execution_tokens=service._tokens, validator=JsonSchemaValidator(), shards=service.ctx.shards
    )
    service.report_event(a, event("STEP_STARTED", 1))
    other.report_event(b, event("STEP_STARTED", 1))
    other.report_event(b, event("STEP_PROGRESS", 2, progress=Progress(7, 10)))
    last = service.report_event(a, event("STEP_PROGRESS", 2, progress=Progress(1, 10)))
    with engine_for(service, task_id).connect() as conn:
        (detail,) = publications(conn, task_id, projection="TASK_DETAIL", version=int(last["taskVersion"]))
    payload = detail.payload
    steps = {s["stepId"]: s for s in payload["state"]["steps"]}
    assert steps["s1"]["progress"]["current"] == 7 and steps["s1"]["lifecycleStatus"] == "RUNNING"
    assert steps["s0"]["progress"]["current"] == 1


def test_events_from_a_cached_state_never_write_back_older_heartbeat_columns(
    service: StatusService, coordinator: ServicePrincipal, worker: ServicePrincipal
) -> None:
    """Plain heartbeats move step rows without a version; an event applied to the cached state keeps them."""
    task_id = wide_task(service, coordinator, 2)
    ctx = activate(service, coordinator, task_id, "s0", producer=worker.producer_id)
    claims = service._tokens.verify(ctx.execution_token, service.now())
    service.report_event(claims, event("STEP_STARTED", 1))  # the cache now holds this version
    beats = service.record_heartbeats(worker, [c.Heartbeat(5, execution_handle=ctx.execution_handle)])
    assert beats["results"][0]["accepted"] is True
    service.report_event(claims, event("STEP_PROGRESS", 2, progress=Progress(1, 2)))
    activate(service, coordinator, task_id, "s1", producer=worker.producer_id)  # another writer of the task
    service.report_event(claims, event("STEP_COMPLETED", 3))
    with engine_for(service, task_id).connect() as conn:
        row = conn.execute(
            sa.select(t.task_step.c.last_heartbeat_seq, t.task_step.c.lifecycle_status).where(
                t.task_step.c.task_id == task_id, t.task_step.c.step_id == "s0"
            )
        ).one()
    assert (row.last_heartbeat_seq, row.lifecycle_status) == (5, "SUCCEEDED")


def _group_statements(service: StatusService, claims: list[ExecutionClaims], seq: int) -> list[str]:
    items = [(cl, event("STEP_PROGRESS", seq, progress=Progress(seq, 100))) for cl in claims]
    with _statements(engine_for(service, claims[0].task_id)) as seen:  # one owner's tasks: one shard
        outcomes = service.report_group(items)
    assert all(isinstance(o, dict) and o["accepted"] and not o["duplicate"] for o in outcomes), outcomes
    return seen


def test_a_group_costs_the_same_statements_for_1_or_64_events_over_1_or_64_tasks(
    service: StatusService, coordinator: ServicePrincipal
) -> None:
    """A group is a set: one lock, one dedup probe, one write per table — not one round of them per event."""
    one_task = wide_task(service, coordinator, 64)
    same_task = [_claims(service, coordinator, one_task, f"s{i}") for i in range(64)]
    own_tasks = [_claims(service, coordinator, wide_task(service, coordinator, 1), "s0") for _ in range(64)]
    for claims in (same_task, own_tasks):  # started, and every task's state in the cache (as in steady state)
        service.report_group([(cl, event("STEP_STARTED", 1)) for cl in claims])
    shapes = {
        "8 events, 1 task": _group_statements(service, same_task[:8], 2),
        "64 events, 1 task": _group_statements(service, same_task, 3),
        "8 events, 8 tasks": _group_statements(service, own_tasks[:8], 2),
        "64 events, 64 tasks": _group_statements(service, own_tasks, 3),
    }
    assert len({tuple(seen) for seen in shapes.values()}) == 1, shapes
    seen = shapes["64 events, 64 tasks"]
    # lock the tasks and probe the eventIds (one query on MySQL/MariaDB, two elsewhere); write steps,
    # tasks; insert events, dedups, feed, outbox; commit (on a shard, the read of its write fence first).
    reads = 1 if _multi_statements(service) else 2
    assert seen.count("SELECT") == reads + fence_reads(service) and seen.count("UPDATE") == 2, seen
    assert len(seen) <= 6 + reads + fence_reads(service), seen
    # One event alone: the lock carries the dedup probe (one statement).
    single = _group_statements(service, own_tasks[:1], 4)
    assert len(single) == len(seen) - reads + 1, (single, seen)


def test_a_group_reads_handles_it_knows_with_its_locks_and_still_sees_their_revocation(
    service: StatusService, coordinator: ServicePrincipal, worker: ServicePrincipal
) -> None:
    """Events naming their execution by handle: once the service knows which task a handle names
    (it never changes), the group reads the handle rows in the same query as its locks — and reads
    them, so a handle revoked since is refused as before."""
    contexts = [
        activate(service, coordinator, wide_task(service, coordinator, 1), "s0", producer=worker.producer_id)
        for _ in range(3)
    ]
    for ctx in contexts:
        service.report_event(service._tokens.verify(ctx.execution_token, service.now()), event("STEP_STARTED", 1))

    def progress(seq: int) -> tuple[list[Any], list[str]]:
        items = [
            (worker, event("STEP_PROGRESS", seq, execution_handle=ctx.execution_handle, progress=Progress(seq, 9)))
            for ctx in contexts
        ]
        with _statements(engine_for(service, contexts[0].task_id)) as seen:
            outcomes = service.report_group(items)
        return outcomes, seen

    first, unknown = progress(2)
    assert all(isinstance(o, dict) and o["accepted"] for o in first), first
    known_outcomes, known = progress(3)
    assert all(isinstance(o, dict) and o["accepted"] for o in known_outcomes), known_outcomes
    # The handles read before the locks the first time (which tasks to lock?), with them afterwards.
    assert known.count("SELECT") == unknown.count("SELECT") - (1 if _multi_statements(service) else 0), (
        unknown,
        known,
    )
    revoked = contexts[1]
    with engine_for(service, revoked.task_id).begin() as conn:
        conn.execute(
            sa.update(t.task_execution_handle)
            .where(t.task_execution_handle.c.task_id == revoked.task_id)
            .values(revoked_at=service.now(), revoke_reason="CORRECTED")
        )
    after, _ = progress(4)
    assert isinstance(after[0], dict) and after[0]["accepted"] and isinstance(after[2], dict), after
    assert isinstance(after[1], DomainError) and after[1].code is ErrorCode.TOKEN_REVOKED, after


def _multi_statements(service: StatusService) -> bool:
    return service.db.engine.dialect.name == "mysql"
