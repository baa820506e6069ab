"""An activity that completes elsewhere (asynchronous completion through its task token): its
worker's last heartbeat says so; the attempt is then watched in Temporal instead of timed on
heartbeats, and ends as Temporal recorded it. Temporal is played by ``ask``."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

import sqlalchemy as sa

from status.app import commands as c
from status.app.executions import ExecutionContext
from status.app.service import StatusService
from status.domain.auth import ServicePrincipal
from status.domain.verdicts import ActivityOutcome, ActivityRef, ActivityState
from status.infra import tables as t
from tests.support.factories import activate, create_task, event, later
from tests.support.shards import engine_for, rows_everywhere


def _temporal_row(service: StatusService, execution_id: str) -> sa.RowMapping:
    (row,) = rows_everywhere(
        service, sa.select(t.task_step_temporal).where(t.task_step_temporal.c.execution_id == execution_id)
    )
    return row._mapping


def _step(service: StatusService, task_id: str) -> sa.RowMapping:
    with engine_for(service, task_id).connect() as conn:
        return (
            conn.execute(
                sa.select(t.task_step).where(t.task_step.c.task_id == task_id, t.task_step.c.step_id == "02_parse")
            )
            .mappings()
            .one()
        )


class _Temporal:
    """What Temporal answers about activities, and what it was asked."""

    def __init__(self, state: ActivityState) -> None:
        self.state = state
        self.asked: list[set[str]] = []

    def __call__(self, refs: Mapping[str, ActivityRef]) -> Mapping[str, ActivityOutcome]:
        self.asked.append({ref.activity_id for ref in refs.values()})
        return {execution_id: ActivityOutcome(self.state) for execution_id in refs}


def _running(service: StatusService, coordinator: ServicePrincipal) -> tuple[str, ExecutionContext]:
    """A step attempt that runs as Temporal activity 7 and has reported STARTED."""
    task_id = create_task(service, coordinator)
    ctx = activate(
        service,
        coordinator,
        task_id,
        heartbeat_interval_seconds=5,
        heartbeat_timeout_seconds=20,
        temporal_activity=c.TemporalActivity("default", "wf-1", "run-1", "7"),
    )
    service.report_event(service._tokens.verify(ctx.execution_token, service.now()), event("STEP_STARTED", 1))
    return task_id, ctx


def _awaiting(service: StatusService, coordinator: ServicePrincipal, worker: ServicePrincipal) -> tuple[str, str]:
    task_id, ctx = _running(service, coordinator)
    said = service.record_heartbeats(
        worker, [c.Heartbeat(1, execution_handle=ctx.execution_handle, completes_elsewhere=True)]
    )
    assert said["results"][0]["accepted"] is True
    return task_id, ctx.execution_id


def test_a_pending_activity_completing_elsewhere_never_goes_stale_and_is_asked_about_less_often(
    service: StatusService, coordinator: ServicePrincipal, worker: ServicePrincipal
) -> None:
    task_id, execution_id = _awaiting(service, coordinator, worker)
    scope = (coordinator.tenant_id, coordinator.authority_scope)
    # Long past its heartbeat deadline: no STALE (no beat is due), and the silence census ignores it.
    assert later(service, 600).mark_stale(tenant_scope=scope) == []
    assert _step(service, task_id)["health"] == "HEALTHY"
    pending = _Temporal(ActivityState.PENDING)
    assert later(service, 120).watch_completions(pending) == []
    assert pending.asked == [{"7"}]
    row = _temporal_row(service, execution_id)
    # Two minutes into the wait: asked again a sixtieth of that later (2 s), not every second.
    assert timedelta(seconds=121) < row["next_check_at"] - row["completes_elsewhere_at"] <= timedelta(seconds=123)
    # Not due yet: Temporal is not asked again until then.
    assert later(service, 120.5).watch_completions(pending) == [] and len(pending.asked) == 1
    assert _step(service, task_id)["lifecycle_status"] == "RUNNING"
    assert later(service, 123).watch_completions(pending) == [] and len(pending.asked) == 2


def test_an_activity_completed_elsewhere_ends_as_temporal_recorded_it_and_is_watched_no_more(
    service: StatusService, coordinator: ServicePrincipal, worker: ServicePrincipal
) -> None:
    task_id, execution_id = _awaiting(service, coordinator, worker)
    completed = _Temporal(ActivityState.COMPLETED)
    ended = later(service, 1).watch_completions(completed)
    assert [r["lifecycleStatus"] for r in ended] == ["SUCCEEDED"]
    step = _step(service, task_id)
    assert (step["lifecycle_status"], step["health"]) == ("SUCCEEDED", "HEALTHY")
    with engine_for(service, task_id).connect() as conn:  # the task goes on: only its step ended
        assert conn.scalar(sa.select(t.task.c.lifecycle_status).where(t.task.c.id == task_id)) == "RUNNING"
    assert _temporal_row(service, execution_id)["next_check_at"] is None
    assert later(service, 60).watch_completions(completed) == [] and len(completed.asked) == 1


def test_a_failed_activity_fails_its_step_with_temporals_failure_type(
    service: StatusService, coordinator: ServicePrincipal, worker: ServicePrincipal
) -> None:
    task_id, _ = _awaiting(service, coordinator, worker)
    failed = _Temporal(ActivityState.FAILED)
    assert [r["lifecycleStatus"] for r in later(service, 1).watch_completions(failed)] == ["FAILED"]
    assert _step(service, task_id)["lifecycle_status"] == "FAILED"


def test_an_attempt_that_ended_by_its_own_report_is_dropped_from_the_watch_without_asking(
    service: StatusService, coordinator: ServicePrincipal, worker: ServicePrincipal
) -> None:
    _, ctx = _running(service, coordinator)
    claims = service._tokens.verify(ctx.execution_token, service.now())
    service.record_heartbeats(worker, [c.Heartbeat(1, execution_handle=ctx.execution_handle, completes_elsewhere=True)])
    service.report_event(claims, event("STEP_COMPLETED", 2))  # the completer's process reported it
    asked = _Temporal(ActivityState.COMPLETED)
    assert later(service, 5).watch_completions(asked) == [] and asked.asked == []
    assert _temporal_row(service, ctx.execution_id)["next_check_at"] is None


def test_a_plain_heartbeat_leaves_the_attempt_timed_on_heartbeats(
    service: StatusService, coordinator: ServicePrincipal, worker: ServicePrincipal
) -> None:
    _, ctx = _running(service, coordinator)
    service.record_heartbeats(worker, [c.Heartbeat(1, execution_handle=ctx.execution_handle)])
    assert _temporal_row(service, ctx.execution_id)["next_check_at"] is None
    asked = _Temporal(ActivityState.PENDING)
    assert later(service, 60).watch_completions(asked) == [] and asked.asked == []
    stale = later(service, 60).mark_stale(tenant_scope=(coordinator.tenant_id, coordinator.authority_scope))
    assert len(stale) == 1
