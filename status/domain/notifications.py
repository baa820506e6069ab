"""Which changes become durable notifications for offline users (seed "可选离线通知").

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
from status.domain.projections import iso
from status.domain.rules import Notice

_TERMINAL_TYPES = {
    Lifecycle.SUCCEEDED: ("TASK_SUCCEEDED", "INFO", "finished"),
    Lifecycle.FAILED: ("TASK_FAILED", "ERROR", "failed"),
    Lifecycle.CANCELLED: ("TASK_CANCELLED", "WARNING", "was cancelled"),
    Lifecycle.TIMED_OUT: ("TASK_TIMED_OUT", "ERROR", "timed out"),
}


@dataclass(frozen=True)
class Notification:
    task_id: str
    task_version: int
    type: str
    level: str
    title: str
    message: str | None

    @property
    def id(self) -> str:
        return f"{self.task_id}:{self.task_version}:{self.type}"

    def to_json(self, created_at: datetime, read_at: datetime | None = None) -> dict[str, Any]:
        return {
            "id": self.id,
            "taskId": self.task_id,
            "taskVersion": str(self.task_version),
            "type": self.type,
            "level": self.level,
            "title": self.title,
            "message": self.message,
            "createdAt": iso(created_at),
            "readAt": iso(read_at),
            "read": read_at is not None,
        }


def notifications_for(before: TaskState, after: TaskState, notice: Notice | None) -> list[Notification]:
    """The notifications a change creates (the same for every viewer of the task)."""
    found = []
    if after.lifecycle.terminal and after.lifecycle is not before.lifecycle:
        type_, level, verb = _TERMINAL_TYPES[after.lifecycle]
        message = after.failure.user_message or None if after.failure and after.lifecycle is Lifecycle.FAILED else None
        found.append(Notification(after.task_id, after.version, type_, level, f"{after.title} {verb}", message))
    if notice is not None and notice.requires_action:
        found.append(
            Notification(
                after.task_id, after.version, "ACTION_REQUIRED", notice.level.value, notice.title, notice.message
            )
        )
    return found
