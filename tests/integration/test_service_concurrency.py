"""Concurrency, atomicity and ordering properties of the write path (design P15, P17, P14, P16)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from status.app.service import StatusService
from status.domain.auth import ServicePrincipal
from status.domain.errors import DomainError
from status.domain.model import StepError
from status.infra import tables as t
from status.infra.stores import sql
from status.infra.stores.tasks import SqlTaskStore
from tests.support.factories import activate, event, wide_task
from tests.support.shards import engine_for


def _counts(engine: sa.Engine, task_id: str) -> dict[str, Any]:
    with engine.connect() as conn:
        return {
            "version": conn.execute(sa.select(t.task.c.version).where(t.task.c.id == task_id)).scalar(),
            "events": conn.execute(
                sa.select(sa.func.count()).select_from(t.task_event_log).where(t.task_event_log.c.task_id == task_id)
            ).scalar(),
            "dedup": conn.execute(
                sa.select(sa.func.count())
                .select_from(t.task_event_dedup)
                .where(t.task_event_dedup.c.task_id == task_id)
            ).scalar(),
            "outbox": conn.execute(
                sa.select(sa.func.count()).select_from(t.task_outbox).where(t.task_outbox.c.aggregate_id == task_id)
            ).scalar(),
            "steps": [
                tuple(r)
                for r in conn.execute(
                    sa.select(t.task_step.c.step_id, t.task_step.c.version, t.task_step.c.lifecycle_status).where(
                        t.task_step.c.task_id == task_id
                    )
                )
            ],
        }


def test_ac15_concurrent_producers_get_distinct_gap_free_versions(
    service: StatusService, coordinator: ServicePrincipal
) -> None:
    producers, per_producer = 6, 8
    task_id = wide_task(service, coordinator, producers)
    contexts = [activate(service, coordinator, task_id, f"s{i}", producer=f"producer-{i}") for i in range(producers)]
    start_version = max(ctx.task_version for ctx in contexts)
    results: list[dict[str, Any]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    barrier = threading.Barrier(producers)

    def run(ctx: Any) -> None:
        claims = service._tokens.verify(ctx.execution_token, service.now())
        barrier.wait()
        try:
            kinds = ["STEP_STARTED"] + ["STEP_PROGRESS"] * (per_producer - 1)
            for seq, kind in enumerate(kinds, start=1):
                r = service.report_event(claims, event(kind, seq))
                with lock:
                    results.append(r)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(ctx,)) for ctx in contexts]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    versions = sorted(int(r["taskVersion"]) for r in results)
    assert versions == list(range(start_version + 1, start_version + 1 + producers * per_producer))
    counts = _counts(engine_for(service, task_id), task_id)
    assert counts["version"] == versions[-1]
    assert counts["dedup"] == producers * per_producer
    with engine_for(service, task_id).connect() as conn:
        logged = conn.scalars(
            sa.select(t.task_event_log.c.task_version).where(t.task_event_log.c.task_id == task_id)
        ).all()
        outboxed = set(
            conn.scalars(sa.select(t.task_outbox.c.aggregate_version).where(t.task_outbox.c.aggregate_id == task_id))
        )
    assert sorted(logged) == list(range(1, versions[-1] + 1))
    assert outboxed == set(logged)


def _crash_after(monkeypatch: pytest.MonkeyPatch, target: Any, name: str) -> None:
    original: Callable[..., Any] = getattr(target, name)

    def crashing(*args: Any, **kwargs: Any) -> Any:
        original(*args, **kwargs)
        raise RuntimeError(f"injected crash after {name}")

    monkeypatch.setattr(target, name, crashing)


# Every statement of the event transaction, in order: the lock (with the dedup probe), the step
# and task rows (the task store writes a group's rows in one statement per table), the inserts.
@pytest.mark.parametrize(
    "point", ["lock_task_version", "write_steps", "write_tasks", "insert_events", "insert_dedups", "insert_outbox"]
)
def test_ac17_a_crash_between_statements_leaves_nothing(
    service: StatusService, coordinator: ServicePrincipal, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    from tests.support.factories import create_task

    task_id = create_task(service, coordinator)
    ctx = activate(service, coordinator, task_id)
    claims = service._tokens.verify(ctx.execution_token, service.now())
    before = _counts(engine_for(service, task_id), task_id)
    _crash_after(monkeypatch, SqlTaskStore if hasattr(SqlTaskStore, point) else sql, point)
    the_event = event("STEP_STARTED", 1)
    with pytest.raises(RuntimeError, match="injected crash"):
        service.report_event(claims, the_event)
    assert _counts(engine_for(service, task_id), task_id) == before
    monkeypatch.undo()
    # The producer's retry with the same eventId then lands exactly once.
    result = service.report_event(claims, the_event)
    assert result["duplicate"] is False and int(result["taskVersion"]) == before["version"] + 1


# ------------------------------------------------------------------ property-based
KINDS = st.sampled_from(["STEP_PROGRESS", "STEP_PROGRESS", "STEP_PROGRESS", "STEP_COMPLETED", "STEP_FAILED"])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kinds=st.lists(KINDS, min_size=1, max_size=6),
    deliveries=st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=10),
)
def test_reordered_and_duplicated_delivery_never_regresses(
    service: StatusService, coordinator: ServicePrincipal, kinds: list[str], deliveries: list[int]
) -> None:
    """Random interleavings/duplications of one producer's stream, then the durable resend of everything.

    Versions returned never go down for new commits, a terminal step never
    changes, and the final lifecycle equals the in-order result.
    """
    from tests.support.factories import create_task

    # A producer's stream: STARTED, some progress, maybe one terminal event, nothing after it.
    stream = [("STEP_STARTED", 1)]
    for kind in kinds:
        stream.append((kind, len(stream) + 1))
        if kind != "STEP_PROGRESS":
            break
    in_order_final = {"STEP_COMPLETED": "SUCCEEDED", "STEP_FAILED": "FAILED"}.get(stream[-1][0], "RUNNING")
    events = [
        event(kind, seq, error=StepError("SYSTEM", "BOOM", "boom") if kind == "STEP_FAILED" else None)
        for kind, seq in stream
    ]
    task_id = create_task(service, coordinator)
    ctx = activate(service, coordinator, task_id)
    claims = service._tokens.verify(ctx.execution_token, service.now())
    order = [events[i % len(events)] for i in deliveries] + events  # network chaos, then the outbox resend
    committed: list[int] = []
    terminal_seen: str | None = None
    for ev in order:
        try:
            result = service.report_event(claims, ev)
        except DomainError:
            continue
        if not result["duplicate"]:
            committed.append(int(result["taskVersion"]))
        lifecycle = result["lifecycleStatus"]
        if terminal_seen is not None and not result["duplicate"]:
            pytest.fail(f"a new commit after the terminal {terminal_seen}: {lifecycle}")
        if lifecycle in ("SUCCEEDED", "FAILED"):
            terminal_seen = terminal_seen or lifecycle
    assert committed == sorted(committed) and len(set(committed)) == len(committed)
    snap = service.snapshot(task_id)
    assert snap is not None
    parse = next(s for s in snap["steps"] if s["stepId"] == "02_parse")
    # The last event carries the highest sequence, so once the resend delivers it the
    # final lifecycle is the in-order one, whatever the chaos before.
    assert parse["lifecycleStatus"] == in_order_final
    assert int(snap["taskVersion"]) == max(committed)
