"""What a decided change is answered — the same value its dedup entry keeps, so a retry of it
gets the first answer again (marked ``duplicate``), whichever transport asks.

They are typed dictionaries, not classes: the answer is JSON three times over (the REST body,
the gRPC message's source, the dedup entry's stored result), and an entry stored by an earlier
version is answered as it was stored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Literal, TypedDict, TypeVar, cast

from status.domain.corrections import FieldChange
from status.domain.errors import DomainError
from status.domain.model import StepState, TaskState
from status.domain.projections import iso


class Refusal(TypedDict):
    code: str
    message: str
    retryable: bool


class EventAccepted(TypedDict):
    """An accepted event's answer."""

    eventId: str
    accepted: Literal[True]
    duplicate: bool
    stale: bool
    taskId: str
    stepId: str | None
    operationCode: str | None
    lifecycleStatus: str  # the step's, or the task's for a task event
    businessStatus: str | None
    taskLifecycleStatus: str
    taskVersion: str
    stepVersion: str | None
    committedAt: str


class EventRefused(TypedDict):
    """A refused event's answer within a batch (alone, its refusal is the request's error)."""

    eventId: str
    accepted: Literal[False]
    error: Refusal


EventAnswer = EventAccepted | EventRefused


class CorrectionAccepted(TypedDict):
    correctionId: str
    accepted: Literal[True]
    duplicate: bool
    taskId: str
    stepId: str | None
    attempt: int | None
    changes: list[FieldChange]
    taskVersion: str
    stepVersion: str | None
    committedAt: str


# What a change's writer makes of the change as written: its answer (None: a service's own
# change, which nobody retries by an id).
A = TypeVar("A", EventAccepted, CorrectionAccepted, None)
Reply = Callable[[TaskState, StepState | None, datetime], A]


def no_reply(task: TaskState, step: StepState | None, committed_at: datetime) -> None:
    return None


def event_reply(event_id: str) -> Reply[EventAccepted]:
    """An event's answer, once its change is written (``task``/``step``: as it leaves them)."""

    def answer(task: TaskState, step: StepState | None, committed_at: datetime) -> EventAccepted:
        return {
            "eventId": event_id,
            "accepted": True,
            "duplicate": False,
            "stale": False,
            "taskId": task.task_id,
            "stepId": step.step_id if step else None,
            "operationCode": step.operation_code if step else None,
            "lifecycleStatus": (step or task).lifecycle.value,
            "businessStatus": (step or task).business_status,
            "taskLifecycleStatus": task.lifecycle.value,
            "taskVersion": str(task.version),
            "stepVersion": str(step.version) if step else None,
            "committedAt": iso(committed_at),
        }

    return answer


def correction_reply(correction_id: str, changes: list[FieldChange]) -> Reply[CorrectionAccepted]:
    def answer(task: TaskState, step: StepState | None, committed_at: datetime) -> CorrectionAccepted:
        return {
            "correctionId": correction_id,
            "accepted": True,
            "duplicate": False,
            "taskId": task.task_id,
            "stepId": step.step_id if step else None,
            "attempt": step.attempt if step else None,
            "changes": changes,
            "taskVersion": str(task.version),
            "stepVersion": str(step.version) if step else None,
            "committedAt": iso(committed_at),
        }

    return answer


def refused(event_id: str, err: DomainError) -> EventRefused:
    return {
        "eventId": event_id,
        "accepted": False,
        "error": {"code": err.code.value, "message": err.message, "retryable": err.retryable},
    }


def stored_event_answer(answer: Mapping[str, Any] | None) -> EventAccepted | None:
    """A dedup entry's answer to an event, as stored (by this version or an earlier one)."""
    return cast(EventAccepted | None, answer)


def stored_correction_answer(answer: Mapping[str, Any] | None) -> CorrectionAccepted | None:
    return cast(CorrectionAccepted | None, answer)
