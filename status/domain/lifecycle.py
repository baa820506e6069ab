"""Lifecycle state machine (design D8.2, D8.4, D8.6) and event types."""

from __future__ import annotations

from enum import StrEnum

from status.domain.errors import Conflict, ErrorCode


class Lifecycle(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMED_OUT = "TIMED_OUT"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({Lifecycle.SUCCEEDED, Lifecycle.FAILED, Lifecycle.CANCELLED, Lifecycle.TIMED_OUT})


class Health(StrEnum):
    HEALTHY = "HEALTHY"
    DEGRADED = "DEGRADED"
    STALE = "STALE"


class EventType(StrEnum):
    # Step events, reported by the execution's producer.
    STEP_STARTED = "STEP_STARTED"
    STEP_PROGRESS = "STEP_PROGRESS"
    STEP_STATUS_CHANGED = "STEP_STATUS_CHANGED"
    STEP_COMPLETED = "STEP_COMPLETED"
    STEP_FAILED = "STEP_FAILED"
    STEP_CANCELLED = "STEP_CANCELLED"
    STEP_TIMED_OUT = "STEP_TIMED_OUT"
    # Health role only (reconciler, or a STALE execution's heartbeat).
    STEP_HEALTH_CHANGED = "STEP_HEALTH_CHANGED"
    # Coordinator only.
    TASK_COMPLETED = "TASK_COMPLETED"
    TASK_FAILED = "TASK_FAILED"
    TASK_CANCELLED = "TASK_CANCELLED"
    # Temporal's verdict only (a run that timed out): the Coordinator never sees it happen.
    TASK_TIMED_OUT = "TASK_TIMED_OUT"
    # Temporal's report only (the owning run's workflow task keeps failing, or moves again).
    TASK_HEALTH_CHANGED = "TASK_HEALTH_CHANGED"
    # Written by the service itself for commands that change a task.
    TASK_CREATED = "TASK_CREATED"
    TASK_CLASSIFIED = "TASK_CLASSIFIED"
    TASK_ACCESS_CHANGED = "TASK_ACCESS_CHANGED"
    STEP_ACTIVATED = "STEP_ACTIVATED"
    STEP_REGISTERED = "STEP_REGISTERED"
    # An operator's correction (its own command, audited; never a producer's report).
    ADMIN_CORRECTION = "ADMIN_CORRECTION"


#: Events a producer may submit for a step, and what they do to its lifecycle.
STEP_TRANSITIONS: dict[EventType, dict[Lifecycle, Lifecycle]] = {
    EventType.STEP_STARTED: {Lifecycle.PENDING: Lifecycle.RUNNING},
    EventType.STEP_PROGRESS: {Lifecycle.RUNNING: Lifecycle.RUNNING},
    EventType.STEP_STATUS_CHANGED: {
        Lifecycle.PENDING: Lifecycle.PENDING,
        Lifecycle.RUNNING: Lifecycle.RUNNING,
    },
    EventType.STEP_COMPLETED: {Lifecycle.RUNNING: Lifecycle.SUCCEEDED},
    # A step can fail or be cancelled before it ever started (e.g. bad input).
    EventType.STEP_FAILED: {Lifecycle.PENDING: Lifecycle.FAILED, Lifecycle.RUNNING: Lifecycle.FAILED},
    EventType.STEP_CANCELLED: {
        Lifecycle.PENDING: Lifecycle.CANCELLED,
        Lifecycle.RUNNING: Lifecycle.CANCELLED,
    },
    EventType.STEP_TIMED_OUT: {Lifecycle.RUNNING: Lifecycle.TIMED_OUT},
    EventType.STEP_HEALTH_CHANGED: {Lifecycle.RUNNING: Lifecycle.RUNNING},
}

#: Task-level events of the Coordinator (design D8.4).
TASK_TRANSITIONS: dict[EventType, dict[Lifecycle, Lifecycle]] = {
    EventType.TASK_COMPLETED: {
        Lifecycle.PENDING: Lifecycle.SUCCEEDED,
        Lifecycle.RUNNING: Lifecycle.SUCCEEDED,
    },
    EventType.TASK_FAILED: {Lifecycle.PENDING: Lifecycle.FAILED, Lifecycle.RUNNING: Lifecycle.FAILED},
    EventType.TASK_CANCELLED: {
        Lifecycle.PENDING: Lifecycle.CANCELLED,
        Lifecycle.RUNNING: Lifecycle.CANCELLED,
    },
    EventType.TASK_TIMED_OUT: {Lifecycle.PENDING: Lifecycle.TIMED_OUT, Lifecycle.RUNNING: Lifecycle.TIMED_OUT},
}

STEP_EVENT_TYPES = frozenset(STEP_TRANSITIONS)
TASK_EVENT_TYPES = frozenset(TASK_TRANSITIONS)
#: What an execution token allows by default; the operation definition may narrow it.
WORKER_EVENT_TYPES = frozenset(STEP_EVENT_TYPES - {EventType.STEP_HEALTH_CHANGED})


def _next(
    table: dict[EventType, dict[Lifecycle, Lifecycle]], event: EventType, current: Lifecycle, what: str
) -> Lifecycle:
    if current.terminal:
        raise Conflict(f"{what} is {current} and can no longer change", ErrorCode.TERMINAL_STATE)
    target = table[event].get(current)
    if target is None:
        raise Conflict(f"{event} is not allowed while the {what} is {current}", ErrorCode.INVALID_TRANSITION)
    return target


def next_step_lifecycle(event: EventType, current: Lifecycle) -> Lifecycle:
    """The step's lifecycle after ``event``; raises TERMINAL_STATE / INVALID_TRANSITION."""
    if event not in STEP_TRANSITIONS:
        raise Conflict(f"{event} is not a step event", ErrorCode.INVALID_TRANSITION)
    return _next(STEP_TRANSITIONS, event, current, "step")


def next_task_lifecycle(event: EventType, current: Lifecycle) -> Lifecycle:
    """The task's lifecycle after a Coordinator event."""
    if event not in TASK_TRANSITIONS:
        raise Conflict(f"{event} is not a task event", ErrorCode.INVALID_TRANSITION)
    return _next(TASK_TRANSITIONS, event, current, "task")
