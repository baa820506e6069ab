"""What users are told about a change as it happens: a notice rides on the task's summary
message (design D8.13, D8.13); ``status.domain.notifications`` keeps the ones that must outlive a page."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from status.domain.definitions import Severity

if TYPE_CHECKING:
    from status.domain import shapes


class NoticeKind(StrEnum):
    """What a notice tells, the ``type`` clients switch on (a stored notification keeps it too)."""

    STEP_FAILED = "STEP_FAILED"
    STEP_TIMED_OUT = "STEP_TIMED_OUT"
    STEP_RETRYING = "STEP_RETRYING"
    STALE = "STALE"
    RECOVERED = "RECOVERED"
    ACTION_REQUIRED = "ACTION_REQUIRED"
    TASK_SUCCEEDED = "TASK_SUCCEEDED"
    TASK_FAILED = "TASK_FAILED"
    TASK_CANCELLED = "TASK_CANCELLED"
    TASK_TIMED_OUT = "TASK_TIMED_OUT"
    WORKFLOW_STUCK = "WORKFLOW_STUCK"
    WORKFLOW_RECOVERED = "WORKFLOW_RECOVERED"
    CORRECTED = "CORRECTED"


@dataclass(frozen=True)
class Notice:
    """A user-facing notice on the summary channel (design D8.13, D8.13); id = taskId:taskVersion.

    ``level`` follows the notice policy of design D8.13: a step failure that will be retried or that the
    task survives is a WARNING, a task failure an ERROR; ``requires_action`` marks what the user
    must act on (clients keep those and errors until dismissed).
    """

    id: str
    type: NoticeKind
    level: Severity
    title: str
    message: str | None = None
    operation_code: str | None = None
    error_code: str | None = None
    retryable: bool | None = None
    requires_action: bool = False
    actions: tuple[str, ...] = ()
    step_id: str | None = None

    def to_json(self) -> shapes.Notice:
        return {
            "id": self.id,
            "type": str(self.type),
            "level": self.level.value,
            "title": self.title,
            "message": self.message,
            "operationCode": self.operation_code,
            "errorCode": self.error_code,
            "retryable": self.retryable,
            "requiresAction": self.requires_action,
            "actions": list(self.actions),
            "stepId": self.step_id,
        }
