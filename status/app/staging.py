"""Staging a decided change (SPEC R1, AC11): what one event writes, added to its group.

The domain has decided (``status.domain.rules``: an ``Outcome``); this writes it into the group
the transaction flushes in a constant number of statements: the step and task rows as the group
leaves them, the event log row, the dedup result, the projector feed, the outbox rows of every
projection and the notifications, and the execution handles an ended attempt revokes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from status.app import commands as c
from status.app import outbox
from status.app.context import AppContext
from status.app.group import Group
from status.app.ports import UnitOfWork
from status.app.step_cache import TaskView
from status.domain.aggregate import affects_workflow
from status.domain.lifecycle import EventType, Lifecycle
from status.domain.model import StepState, TaskState
from status.domain.notifications import notifications_for
from status.domain.projections import iso
from status.domain.rules import Outcome


def stage(
    ctx: AppContext,
    uow: UnitOfWork,
    group: Group,
    before_task: TaskState,
    before_step: StepState | None,
    view: TaskView,
    outcome: Outcome,
    event_type: EventType,
    cmd: c.ReportEvent,
    producer_id: str,
    source_seq: int,
    fingerprint: str,
    received_at: datetime,
    *,
    lifecycle_changed: bool,
) -> dict[str, Any]:
    """Stage the decided change for the group's flush (rows as the group leaves them, inserts)."""
    task, step = outcome.task, outcome.step
    if step is not None:
        group.write_step(before_step, step)
        if step.lifecycle.terminal:
            group.revoke(step.execution_id, "STEP_TERMINAL", received_at)
    for ended in outcome.ended_steps:
        previous = view.steps.get(ended.step_id, ended.attempt)
        group.write_step(previous, ended)
        group.revoke(ended.execution_id, "RUN_CLOSED", received_at)
        view = view.changed(view.task, ended)
    group.write_task(before_task, task)
    view = view.changed(task, step)
    committed_at = ctx.now()
    data = cmd.data
    group.events.append(
        outbox.event_row(
            event_id=cmd.event_id,
            task=task,
            step=step,
            event_type=event_type.value,
            producer_id=producer_id,
            source_seq=source_seq,
            occurred_at=cmd.occurred_at,
            received_at=received_at,
            committed_at=committed_at,
            duration_ms=cmd.duration_ms,
            data_schema=data.schema if data else None,
            error_code=cmd.error.code if cmd.error else None,
            payload={k: v for k, v in cmd.content().items() if v is not None},
        )
    )
    result = {
        "eventId": cmd.event_id,
        "accepted": True,
        "duplicate": False,
        "stale": False,
        "taskId": task.task_id,
        "stepId": step.step_id if step else None,
        "operationCode": step.operation_code if step else None,
        "taskVersion": str(task.version),
        "stepVersion": str(step.version) if step else None,
        "lifecycleStatus": (step or task).lifecycle.value,
        "businessStatus": (step or task).business_status,
        "taskLifecycleStatus": task.lifecycle.value,
        "committedAt": iso(committed_at),
    }
    group.dedups.append(
        {
            "tenant_id": task.tenant_id,
            "event_id": cmd.event_id,
            "task_id": task.task_id,
            "payload_hash": fingerprint,
            "result": result,
            "created_at": committed_at,
        }
    )
    group.seen[(task.tenant_id, cmd.event_id)] = (fingerprint, result)
    group.views[task.task_id] = view
    if affects_workflow(before_task, task):
        group.changes.append(outbox.change_row(task, committed_at))
    trigger = {
        "eventId": cmd.event_id,
        "eventType": event_type.value,
        "stepId": step.step_id if step else None,
        "operationCode": step.operation_code if step else None,
        "durationMs": cmd.duration_ms,
        "data": {"schema": step.data_schema, "value": step.state_data} if step and data else None,
        "committedAt": iso(committed_at),
    }
    if step is not None and step.lifecycle is Lifecycle.SUCCEEDED:
        group.succeeded.append((task, step))  # joins the ETA history once committed
    group.outbox += outbox.task_rows(
        task,
        view.steps,
        view.viewers,
        notice=outcome.notice,
        trigger=trigger,
        must_deliver=outcome.must_deliver,
        event_id=cmd.event_id,
        broadcast=lifecycle_changed or outcome.must_deliver,
        now=committed_at,
        history=ctx.durations.for_task(uow, task, view.steps),
        groups=view.groups,
    )
    found = notifications_for(before_task, task, outcome.notice)
    if found:
        records, hints = outbox.notification_rows(task, view.viewers, found, cmd.event_id, committed_at)
        group.notifications += records
        group.outbox += hints
    return result
