"""A decided change to one task, as one value, and the one function that writes it (SPEC R1,
AC11; seed: state, event, dedup result and outbox commit together or not at all).

Whoever decided it — an event, an operator's correction — says what changed as a ``Change``:
the task and step rows before and after, the event-log entry, the dedup result that answers a
retry, the notice, the executions it revokes. ``write_change`` turns it into the rows of the
group's transaction: each row's state as the group leaves it, the event-log entry, the dedup
entry, the projector's feed when the workflow's aggregate can move, the outbox rows of every
projection and the notifications. It adds to a ``Group``; the group's flush writes everything
in a constant number of statements, in the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from status.app import outbox
from status.app.context import AppContext
from status.app.group import Group
from status.app.ports import Stores
from status.app.step_cache import TaskView
from status.domain.aggregate import affects_workflow
from status.domain.lifecycle import EventType, Lifecycle
from status.domain.model import StepState, TaskState
from status.domain.notifications import notifications_for
from status.domain.projections import iso
from status.domain.rules import Notice


@dataclass(frozen=True)
class Entry:
    """The change's event-log entry: what happened, by whom, under which sequence, when."""

    event_id: str
    event_type: EventType
    producer_id: str
    source_seq: int
    occurred_at: datetime
    received_at: datetime
    duration_ms: int | None = None
    data_schema: str | None = None
    error_code: str | None = None
    # The log's own record of the report (free-form: what the producer or operator sent).
    payload: Mapping[str, Any] | None = None
    # Whether the detail message's trigger names the event's duration and data (a report's) or
    # not (an operator's correction says neither).
    reported: bool = True


@dataclass(frozen=True)
class Change:
    """Everything one decided change to a task writes, in one transaction."""

    before: TaskState
    after: TaskState
    view: TaskView  # the task as it was before this change (its steps, viewers, groups)
    entry: Entry
    fingerprint: str  # the dedup entry's content hash: a retry with the same content gets ``result``
    step: StepState | None = None  # the step attempt the entry is about, as the change leaves it
    before_step: StepState | None = None
    ended_steps: tuple[StepState, ...] = ()  # attempts the task's end ended with it
    revoke: str = ""  # why the step's execution is revoked when it ends ("" when nothing is)
    notice: Notice | None = None
    must_deliver: bool = True
    broadcast: bool = False
    # The answer a retry gets, beyond the versions and states this change produced.
    answer: Mapping[str, Any] = field(default_factory=dict)


def write_change(ctx: AppContext, stores: Stores, group: Group, change: Change) -> dict[str, Any]:
    """Stage ``change`` in ``group`` (see the module's docstring); the result the caller answers,
    which the dedup entry keeps for a retry."""
    task, step, view = change.after, change.step, change.view
    entry = change.entry
    if step is not None:
        group.write_step(change.before_step, step)
        if step.lifecycle.terminal and change.revoke:
            group.revoke(step.execution_id, change.revoke, entry.received_at)
    for ended in change.ended_steps:
        group.write_step(view.steps.get(ended.step_id, ended.attempt), ended)
        group.revoke(ended.execution_id, "RUN_CLOSED", entry.received_at)
        view = view.changed(view.task, ended)
    group.write_task(change.before, task)
    view = view.changed(task, step)
    committed_at = ctx.now()
    group.events.append(
        outbox.event_row(
            event_id=entry.event_id,
            task=task,
            step=step,
            event_type=entry.event_type.value,
            producer_id=entry.producer_id,
            source_seq=entry.source_seq,
            occurred_at=entry.occurred_at,
            received_at=entry.received_at,
            committed_at=committed_at,
            duration_ms=entry.duration_ms,
            data_schema=entry.data_schema,
            error_code=entry.error_code,
            payload=dict(entry.payload) if entry.payload is not None else None,
        )
    )
    result = {
        **change.answer,
        "taskVersion": str(task.version),
        "stepVersion": str(step.version) if step else None,
        "committedAt": iso(committed_at),
    }
    group.dedups.append(
        {
            "tenant_id": task.tenant_id,
            "event_id": entry.event_id,
            "task_id": task.task_id,
            "payload_hash": change.fingerprint,
            "result": result,
            "created_at": committed_at,
        }
    )
    group.seen[(task.tenant_id, entry.event_id)] = (change.fingerprint, result)
    group.views[task.task_id] = view
    if affects_workflow(change.before, task):
        group.changes.append(outbox.change_row(task, committed_at))
    trigger: dict[str, Any] = {
        "eventId": entry.event_id,
        "eventType": entry.event_type.value,
        "stepId": step.step_id if step else None,
        "operationCode": step.operation_code if step else None,
    }
    if entry.reported:
        trigger["durationMs"] = entry.duration_ms
        trigger["data"] = {"schema": step.data_schema, "value": step.state_data} if step and entry.data_schema else None
    trigger["committedAt"] = iso(committed_at)
    if step is not None and step.lifecycle is Lifecycle.SUCCEEDED:
        group.succeeded.append((task, step))  # joins the ETA history once committed
    group.outbox += outbox.task_messages(
        task,
        view.steps,
        view.viewers,
        notice=change.notice,
        trigger=trigger,
        must_deliver=change.must_deliver,
        event_id=entry.event_id,
        broadcast=change.broadcast,
        now=committed_at,
        history=ctx.durations.for_task(stores, task, view.steps),
        groups=view.groups,
    )
    found = notifications_for(change.before, task, change.notice)
    if found:
        records, hint = outbox.notification_rows(task, view.viewers, found, entry.event_id, committed_at)
        group.notifications += records
        group.outbox.append(hint)
    return result
