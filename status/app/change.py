"""A decided change to one task, as one value, and the one function that writes it (design D8.1,
design P11, D5: state, event, dedup result and outbox commit together or not at all).

Whoever decided it — an event, an operator's correction — says what changed as a ``Change``:
the task and step rows before and after, the event-log entry, the dedup result that answers a
retry, the notice, the executions it revokes. ``write_change`` turns it into the rows of the
group's transaction: each row's state as the group leaves it, the event-log entry, the dedup
entry, the projector's feed when the workflow's aggregate can move, the outbox rows of every
projection and the notifications. It adds to a ``Group``; the group's flush writes everything
in a constant number of statements, in the caller's transaction.

The service's own changes (a task's creation, a step's activation or registration, a
classification, an access change) go through it too, as ``Change.service``: they insert what
they create, so they stage their rows themselves, and nobody retries them by an eventId, so they
have no dedup entry; their entry, feed row and messages are written here like any other's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from typing import Any, Generic

from status.app import outbox
from status.app.answers import A, Reply, no_reply
from status.app.context import AppContext
from status.app.group import Group, StagedMessages
from status.app.ports import Stores
from status.app.records import DedupRecord
from status.app.step_cache import TaskView
from status.domain.aggregate import affects_workflow
from status.domain.lifecycle import EventType, Lifecycle
from status.domain.messages import Message
from status.domain.model import StepState, TaskState
from status.domain.notices import Notice
from status.domain.notifications import notifications_for
from status.domain.projections import trigger_event
from status.domain.reports import SERVICE_EVENT_PREFIX


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
class Change(Generic[A]):
    """Everything one decided change to a task writes, in one transaction."""

    before: TaskState
    after: TaskState
    # The task as it was before this change (its steps, viewers, groups); for a service's change,
    # as the change leaves its steps (it staged them).
    view: TaskView
    entry: Entry
    # The dedup entry's content hash: a retry with the same content gets the answer again. None
    # for a service's change: it has no dedup entry.
    fingerprint: str | None
    # The answer, made of the change as written (versions, commit time); the dedup entry keeps it.
    reply: Reply[A]
    step: StepState | None = None  # the step attempt the entry is about, as the change leaves it
    before_step: StepState | None = None
    ended_steps: tuple[StepState, ...] = ()  # attempts the task's end ended with it
    revoke: str = ""  # why the step's execution is revoked when it ends ("" when nothing is)
    notice: Notice | None = None
    must_deliver: bool = True
    broadcast: bool = False
    # The service's own change (see the module's docstring): its rows are staged, it has no dedup
    # entry, and the workflow's aggregate is folded again whatever moved (a grant changes what a
    # grantee's trimmed aggregate shows; a classification, its labels).
    service: bool = False
    # False: its messages are not added to the group; ``messages_of`` builds them when the caller
    # wants them (an activation whose STARTED, in the same transaction, supersedes them).
    publish: bool = True

    @staticmethod
    def of_service(
        task: TaskState,
        view: TaskView,
        event_type: EventType,
        producer_id: str,
        payload: Mapping[str, Any],
        now: datetime,
        *,
        step: StepState | None = None,
        notice: Notice | None = None,
        must_deliver: bool = True,
        broadcast: bool = False,
        publish: bool = True,
    ) -> Change[None]:
        """A change the service itself made to ``task`` (at its new version), logged under the
        service's own eventId for that version."""
        entry = Entry(
            event_id=f"{SERVICE_EVENT_PREFIX}{task.task_id}:{task.version}",
            event_type=event_type,
            producer_id=producer_id,
            source_seq=0,
            occurred_at=now,
            received_at=now,
            payload=payload,
            reported=False,
        )
        return Change(
            before=task,
            after=task,
            view=view,
            entry=entry,
            fingerprint=None,
            reply=no_reply,
            step=step,
            notice=notice,
            must_deliver=must_deliver,
            broadcast=broadcast,
            service=True,
            publish=publish,
        )


def write_change(ctx: AppContext, stores: Stores, group: Group, change: Change[A]) -> A:
    """Stage ``change`` in ``group`` (see the module's docstring); the answer the caller gives,
    which the dedup entry keeps for a retry."""
    task, step, view = change.after, change.step, change.view
    entry = change.entry
    if change.service:
        view = replace(view, task=task)
        committed_at = entry.received_at  # the service's own clock: ``messages_of`` says the same
    else:
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
        outbox.event_record(
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
            payload=entry.payload,
        )
    )
    result = change.reply(task, step, committed_at)
    if change.fingerprint is not None and result is not None:
        group.dedups.append(
            DedupRecord(task.tenant_id, entry.event_id, task.task_id, change.fingerprint, result, committed_at)
        )
        group.seen[(task.tenant_id, entry.event_id)] = (change.fingerprint, result)
    group.views[task.task_id] = view
    if change.service or affects_workflow(change.before, task):
        group.changes.append(outbox.change_record(task, committed_at))
    if step is not None and step.lifecycle is Lifecycle.SUCCEEDED and not change.service:
        group.succeeded.append((task, step))  # joins the ETA history once committed
    found = notifications_for(change.before, task, change.notice)
    records, hint = (
        outbox.notification_records(task, view.viewers, found, entry.event_id, committed_at) if found else ([], None)
    )
    group.notifications += records
    if change.publish:
        group.outbox.append(
            StagedMessages(
                task.task_id,
                (view.viewers, view.groups),
                not (change.must_deliver or change.broadcast or change.notice or hint),
                partial(
                    _task_messages, ctx, stores, change, view, committed_at, detail=task.task_id not in group.unwatched
                ),
            )
        )
        if hint is not None:
            group.outbox.append(hint)
    return result


def messages_of(ctx: AppContext, stores: Stores, group: Group, change: Change[None]) -> list[Message]:
    """The messages of a service's change staged with ``publish=False`` in ``group``, for the caller to add."""
    assert change.service and not change.publish
    return _task_messages(
        ctx,
        stores,
        change,
        replace(change.view, task=change.after),
        change.entry.received_at,
        detail=change.after.task_id not in group.unwatched,
    )


def _task_messages(
    ctx: AppContext, stores: Stores, change: Change[Any], view: TaskView, committed_at: datetime, *, detail: bool = True
) -> list[Message]:
    task, step, entry = change.after, change.step, change.entry
    trigger = trigger_event(
        entry.event_id,
        entry.event_type,
        step,
        committed_at,
        reported=entry.reported,
        duration_ms=entry.duration_ms,
        with_data=bool(entry.data_schema),
    )
    return outbox.task_messages(
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
        detail=detail,
    )
