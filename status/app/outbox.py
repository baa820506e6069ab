"""The one place that turns a committed-to-be change into its event-log entry and its messages.

Every writer of the service (events, activations, classification, access,
workflows, broadcasts) and the observer's workflow projector builds its messages
here, so a message's shape (channels, projections, delivery flags) is defined
once.  The builders are pure; the caller writes the messages inside its
transaction (design D8.1, P17), where the outbox stores each change's messages as
one row; ``change.write_change`` is where a task's change becomes its rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from status.app.records import ChangeRecord, EventRecord, NotificationRecord
from status.domain import shapes
from status.domain.auth import UserPrincipal
from status.domain.messages import Aggregate, Message
from status.domain.model import StepState, TaskState, WorkflowState
from status.domain.notices import Notice
from status.domain.notifications import Notification
from status.domain.projections import (
    History,
    Projection,
    detail_channel,
    project_broadcast,
    project_channel,
    shared_channel,
    summary_and_detail,
    task_detail,
    task_removed,
    user_channel,
    user_summary,
    workflow_channel,
    workflow_summary,
)
from status.domain.stepset import StepSet


def _message(
    aggregate: Aggregate,
    channels: Sequence[str],
    projection: str,
    payload: Mapping[str, Any],
    *,
    must_deliver: bool,
    event_id: str | None,
    now: datetime,
) -> Message:
    return Message(aggregate, tuple(channels), projection, payload, must_deliver, event_id, now)


def viewers_of(task: TaskState, grants: Sequence[tuple[str, str]]) -> list[str]:
    """The owner first, then every other user holding an unrevoked USER grant."""
    return [task.owner_id, *[pid for kind, pid in grants if kind == "USER" and pid != task.owner_id]]


def groups_of(grants: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The PROJECT and ROLE grants (at most access.MAX_GROUP_GRANTS: granting keeps it so), in a stable order."""
    return sorted((kind, pid) for kind, pid in grants if kind in ("PROJECT", "ROLE"))


def task_messages(
    task: TaskState,
    steps: StepSet,
    viewers: Sequence[str],
    *,
    notice: Notice | None,
    trigger: shapes.TriggerEvent | None,
    must_deliver: bool,
    event_id: str,
    broadcast: bool,
    now: datetime,
    history: History | None = None,
    groups: Sequence[tuple[str, str]] = (),
    detail: bool = True,
) -> list[Message]:
    """A task change's messages, each with the projection's full state and version.

    The summary goes to each USER viewer's channel and to the shared channel of each PROJECT or
    ROLE granted the task (its members subscribe to it: the service does not know who they are);
    the detail to the task's detail channel unless ``detail`` is False (nobody may follow it:
    status/app/watching.py).
    """
    aggregate = Aggregate("TASK", task.task_id, task.version, user_channel(task.tenant_id, task.owner_id))

    def message(channels: Sequence[str], projection: str, payload: Mapping[str, Any]) -> Message:
        return _message(aggregate, channels, projection, payload, must_deliver=must_deliver, event_id=event_id, now=now)

    channels = [user_channel(task.tenant_id, user) for user in viewers]
    channels += [shared_channel(task.tenant_id, kind, pid) for kind, pid in groups]
    if detail:
        summary, detailed = summary_and_detail(task, steps, now, notice, trigger, history)
        messages = [
            message(channels, Projection.USER_SUMMARY, summary),
            message([detail_channel(task.tenant_id, task.task_id)], Projection.TASK_DETAIL, detailed),
        ]
    else:
        messages = [message(channels, Projection.USER_SUMMARY, user_summary(task, steps, now, notice, history))]
    if broadcast and task.project_id:
        messages.append(
            message(
                [project_channel(task.tenant_id, task.project_id)],
                Projection.PROJECT_BROADCAST,
                project_broadcast(task, steps, now),
            )
        )
    return messages


def notification_records(
    task: TaskState, viewers: Sequence[str], found: Sequence[Notification], event_id: str, now: datetime
) -> tuple[list[NotificationRecord], Message]:
    """Durable notification records for each viewer, and the realtime hint on their channels."""
    payload = {
        "kind": "notification.created",
        "schemaVersion": 1,
        "taskId": task.task_id,
        "notifications": [n.to_json(now) for n in found],
    }
    records = [
        NotificationRecord(
            tenant_id=task.tenant_id,
            user_id=user,
            notification_id=n.id,
            task_id=n.task_id,
            task_version=n.task_version,
            notification_type=n.type,
            level=n.level,
            title=n.title[:300],
            message=n.message[:600] if n.message else None,
            lifecycle_status=n.lifecycle_status,
            details=n.details(),
            created_at=now,
            read_at=None,
        )
        for user in viewers
        for n in found
    ]
    hint = _message(
        Aggregate("TASK", task.task_id, task.version, user_channel(task.tenant_id, task.owner_id)),
        [user_channel(task.tenant_id, user) for user in viewers],
        Projection.USER_NOTIFICATION,
        payload,
        must_deliver=True,
        event_id=event_id,
        now=now,
    )
    return records, hint


def removal(task: TaskState, channel: str, projection: str, event_id: str, now: datetime) -> Message:
    """The tombstone telling whoever follows ``channel`` (a user's, a project's) to drop the task (must deliver)."""
    return _message(
        Aggregate("TASK", task.task_id, task.version, user_channel(task.tenant_id, task.owner_id)),
        [channel],
        projection,
        task_removed(task),
        must_deliver=True,
        event_id=event_id,
        now=now,
    )


def unsubscribe(task: TaskState, user_ids: Sequence[str], event_id: str, now: datetime) -> Message:
    """After a revoke: end these users' live subscriptions to the task's detail channel (must be delivered)."""
    return _message(
        Aggregate("TASK", task.task_id, task.version, user_channel(task.tenant_id, task.owner_id)),
        [detail_channel(task.tenant_id, task.task_id)],
        Projection.UNSUBSCRIBE,
        # the users as Centrifugo knows them
        {"users": [UserPrincipal(task.tenant_id, u).subject for u in user_ids]},
        must_deliver=True,
        event_id=event_id,
        now=now,
    )


def workflow_messages(
    workflow: WorkflowState, users: Sequence[str], now: datetime, *, must_deliver: bool = True
) -> list[Message]:
    """The workflow summary on its own channel and on each listed user's summary channel."""
    channels = [workflow_channel(workflow.tenant_id, workflow.workflow_id)]
    channels += [user_channel(workflow.tenant_id, u) for u in dict.fromkeys(users)]
    return [
        _message(
            Aggregate(
                "WORKFLOW",
                workflow.workflow_id,
                workflow.version,
                user_channel(workflow.tenant_id, workflow.owner_id),
            ),
            channels,
            Projection.WORKFLOW_SUMMARY,
            workflow_summary(workflow, now),
            must_deliver=must_deliver,
            event_id=None,
            now=now,
        )
    ]


def broadcast_message(
    aggregate: Aggregate, channels: Sequence[str], projection: str, payload: Mapping[str, Any], now: datetime
) -> Message:
    return _message(aggregate, channels, projection, payload, must_deliver=True, event_id=None, now=now)


def event_record(
    *,
    event_id: str,
    task: TaskState,
    step: StepState | None,
    event_type: str,
    producer_id: str,
    source_seq: int,
    occurred_at: datetime,
    received_at: datetime,
    committed_at: datetime,
    duration_ms: int | None = None,
    data_schema: str | None = None,
    error_code: str | None = None,
    payload: Mapping[str, Any] | None = None,
) -> EventRecord:
    """The immutable event-log record of a change, at the versions it produced."""
    return EventRecord(
        tenant_id=task.tenant_id,
        event_id=event_id,
        workflow_id=task.workflow_id,
        task_id=task.task_id,
        task_version=task.version,
        step_id=step.step_id if step else None,
        operation_code=step.operation_code if step else None,
        execution_id=step.execution_id if step else None,
        step_version=step.version if step else None,
        task_attempt=task.attempt,
        step_attempt=step.attempt if step else None,
        producer_id=producer_id,
        source_seq=source_seq,
        event_type=event_type,
        lifecycle_status=(step.lifecycle if step else task.lifecycle).value,
        business_status=step.business_status if step else task.business_status,
        health=(step.health if step else task.health).value,
        data_schema=data_schema,
        error_code=error_code,
        occurred_at=occurred_at,
        received_at=received_at,
        committed_at=committed_at,
        duration_ms=duration_ms,
        payload=dict(payload) if payload is not None else None,
    )


def change_record(task: TaskState, now: datetime) -> ChangeRecord:
    """The workflow projector's feed entry (design D8.15): insert-only, so task commits never lock the workflow."""
    return ChangeRecord(task.workflow_id, task.task_id, task.version, now)


def detail_message(task: TaskState, steps: StepSet, now: datetime, history: History | None = None) -> Message:
    """The task's detail as it stands, for its detail channel alone (a follower's first look after
    changes nobody followed: status/app/watching.py); no event triggered it."""
    # Its own row (home: the detail channel), beside the change's row of the same version.
    channel = detail_channel(task.tenant_id, task.task_id)
    return _message(
        Aggregate("TASK", task.task_id, task.version, channel),
        [channel],
        Projection.TASK_DETAIL,
        task_detail(task, steps, now, None, history),
        must_deliver=False,
        event_id=None,
        now=now,
    )
