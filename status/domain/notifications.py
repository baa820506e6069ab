"""Which changes become durable notifications for offline users (design D8.13).

Realtime notices reach only connected clients.  A task reaching a terminal state, and anything
that needs the user's action, also becomes a notification record per viewer, idempotent by
``userId + taskId + taskVersion + notificationType`` so no retry notifies twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from status.domain.lifecycle import Lifecycle
from status.domain.model import TaskState
from status.domain.notices import Notice, NoticeKind
from status.domain.projections import iso

_TERMINAL_TYPES = {
    Lifecycle.SUCCEEDED: (NoticeKind.TASK_SUCCEEDED, "INFO", "finished"),
    Lifecycle.FAILED: (NoticeKind.TASK_FAILED, "ERROR", "failed"),
    Lifecycle.CANCELLED: (NoticeKind.TASK_CANCELLED, "WARNING", "was cancelled"),
    Lifecycle.TIMED_OUT: (NoticeKind.TASK_TIMED_OUT, "ERROR", "timed out"),
}


@dataclass(frozen=True)
class Notification:
    """A durable notice, as the live one said it (design D8.13): after a reload, or on another device,
    the user reads how the task ended (an operator's stop with its reason, a timeout's length)
    exactly as a connected page showed it."""

    task_id: str
    task_version: int
    type: str  # a NoticeKind's value (one stored by an earlier version may be another word)
    level: str
    title: str
    message: str | None
    lifecycle_status: str | None = None  # the task's state the notice reports (terminal for an ending)
    reason: str | None = None  # user-safe: why it ended that way, when its ending said
    operation_code: str | None = None
    error_code: str | None = None
    retryable: bool | None = None
    requires_action: bool = False
    actions: tuple[str, ...] = ()
    step_id: str | None = None

    @property
    def id(self) -> str:
        return f"{self.task_id}:{self.task_version}:{self.type}"

    @property
    def terminal(self) -> bool:
        return self.lifecycle_status is not None and Lifecycle(self.lifecycle_status).terminal

    def details(self) -> dict[str, Any]:
        """What the record keeps beside its listed columns (the rest of the notice)."""
        return {
            "reason": self.reason,
            "operationCode": self.operation_code,
            "errorCode": self.error_code,
            "retryable": self.retryable,
            "requiresAction": self.requires_action,
            "actions": list(self.actions),
            "stepId": self.step_id,
        }

    @classmethod
    def restored(
        cls,
        task_id: str,
        task_version: int,
        type_: str,
        level: str,
        title: str,
        message: str | None,
        lifecycle_status: str | None,
        details: dict[str, Any] | None,
    ) -> Notification:
        """A stored record back (one written before details were kept has none)."""
        more = details or {}
        return cls(
            task_id,
            task_version,
            type_,
            level,
            title,
            message,
            lifecycle_status=lifecycle_status,
            reason=more.get("reason"),
            operation_code=more.get("operationCode"),
            error_code=more.get("errorCode"),
            retryable=more.get("retryable"),
            requires_action=bool(more.get("requiresAction", False)),
            actions=tuple(more.get("actions") or ()),
            step_id=more.get("stepId"),
        )

    def to_json(self, created_at: datetime, read_at: datetime | None = None) -> dict[str, Any]:
        return {
            "id": self.id,
            "taskId": self.task_id,
            "taskVersion": str(self.task_version),
            "type": self.type,
            "level": self.level,
            "title": self.title,
            "message": self.message,
            "lifecycleStatus": self.lifecycle_status,
            "terminal": self.terminal,
            **self.details(),
            "createdAt": iso(created_at),
            "readAt": iso(read_at),
            "read": read_at is not None,
        }


def _from_notice(task: TaskState, notice: Notice, kind: NoticeKind | None = None) -> Notification:
    return Notification(
        task.task_id,
        task.version,
        (kind or notice.type).value,
        notice.level.value,
        notice.title,
        notice.message,
        lifecycle_status=task.lifecycle.value,
        reason=task.end_reason,
        operation_code=notice.operation_code,
        error_code=notice.error_code,
        retryable=notice.retryable,
        requires_action=notice.requires_action,
        actions=notice.actions,
        step_id=notice.step_id,
    )


def notifications_for(before: TaskState, after: TaskState, notice: Notice | None) -> list[Notification]:
    """The notifications a change creates (the same for every viewer of the task).

    An ending keeps the live notice's words when the change had one (a failure's message, an
    operator's stop and its reason, a timeout's length); otherwise it says what happened plainly.
    """
    found = []
    if after.lifecycle.terminal and after.lifecycle is not before.lifecycle:
        type_, level, verb = _TERMINAL_TYPES[after.lifecycle]
        if notice is not None and notice.type == type_:
            found.append(_from_notice(after, notice))
        else:
            failure = after.failure if after.lifecycle is Lifecycle.FAILED else None
            message = (failure.user_message or None) if failure else after.end_reason
            found.append(
                Notification(
                    after.task_id,
                    after.version,
                    type_.value,
                    level,
                    f"{after.title} {verb}",
                    message,
                    lifecycle_status=after.lifecycle.value,
                    reason=after.end_reason,
                    error_code=failure.code if failure else None,
                    retryable=failure.retryable if failure else None,
                    step_id=after.failed_step_id if failure else None,
                )
            )
    if notice is not None and notice.requires_action:
        found.append(_from_notice(after, notice, NoticeKind.ACTION_REQUIRED))
    if notice is not None and notice.type in RUN_HEALTH_TYPES:
        # A stuck run's task shows STALE with stuckSince after a reload too: its words are kept.
        found.append(_from_notice(after, notice))
    return found


RUN_HEALTH_TYPES = frozenset({NoticeKind.WORKFLOW_STUCK, NoticeKind.WORKFLOW_RECOVERED})
