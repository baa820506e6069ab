"""Event rules (SPEC R1–R8, R10, R13): pure decisions over current state.

The service resolves credentials, locks rows and checks dedup; these functions
then decide — in R1's order — whether an event is accepted and what the new
task and step states are.  They never read a clock: ``now`` is passed in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from status.domain.definitions import (
    FailurePolicy,
    OperationDefinition,
    SchemaValidator,
    Severity,
    StatusDefinitionSet,
)
from status.domain.errors import Conflict, ErrorCode, Forbidden, Invalid
from status.domain.lifecycle import (
    STEP_EVENT_TYPES,
    EventType,
    Health,
    Lifecycle,
    next_step_lifecycle,
    next_task_lifecycle,
)
from status.domain.model import Progress, StepError, StepState, TaskState

PHASE_CODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
ERROR_CODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
MAX_PHASE_LABEL = 128
MAX_ERROR_MESSAGE = 512
ERROR_CATEGORIES = frozenset({"INPUT", "DEPENDENCY", "SYSTEM", "TIMEOUT", "PERMISSION", "BUSINESS", "UNKNOWN"})


@dataclass(frozen=True)
class DataBody:
    schema: str
    value: Any


@dataclass(frozen=True)
class StepEvent:
    """A step event as the producer reported it (already authenticated and bound)."""

    event_id: str
    event_type: EventType
    source_seq: int
    producer_id: str
    occurred_at: datetime
    business_status: str | None = None
    phase_code: str | None = None
    phase_label: str | None = None
    progress: Progress | None = None
    duration_ms: int | None = None
    data: DataBody | None = None
    error: StepError | None = None
    health: Health | None = None  # STEP_HEALTH_CHANGED only
    reason: str | None = None


@dataclass(frozen=True)
class TaskEvent:
    """A Coordinator task-level event (TASK_COMPLETED / TASK_FAILED / TASK_CANCELLED)."""

    event_id: str
    event_type: EventType
    task_attempt: int
    source_seq: int
    producer_id: str
    occurred_at: datetime
    business_status: str | None = None
    duration_ms: int | None = None
    failure_code: str | None = None
    failure_message: str | None = None
    failed_step_id: str | None = None
    summary: DataBody | None = None


@dataclass(frozen=True)
class Notice:
    """A user-facing notice on the summary channel (R13); id = taskId:taskVersion."""

    id: str
    kind: str
    severity: Severity
    title: str
    step_id: str | None = None
    code: str | None = None
    message: str | None = None
    requires_action: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "severity": self.severity.value,
            "title": self.title,
            "stepId": self.step_id,
            "code": self.code,
            "message": self.message,
            "requiresAction": self.requires_action,
        }


@dataclass(frozen=True)
class Outcome:
    task: TaskState
    step: StepState | None
    notice: Notice | None
    must_deliver: bool  # terminal, new attempt, notice: never coalesced away (R14)


def validate_progress(progress: Progress | None) -> None:
    if progress is None:
        return
    if progress.current < 0 or (progress.total is not None and progress.total < 0):
        raise Invalid("progress values must not be negative")
    if progress.total is not None and progress.total > 0 and progress.current > progress.total:
        raise Invalid("progress.current exceeds progress.total")
    if progress.unit is not None and not (0 < len(progress.unit) <= 32):
        raise Invalid("progress.unit must be 1–32 characters")


def validate_phase(code: str | None, label: str | None) -> None:
    """Free phase codes are allowed within charset/length limits (R3, AC7)."""
    if code is not None and not PHASE_CODE_RE.match(code):
        raise Invalid("phaseCode must be 1–64 characters of [A-Za-z0-9_.:-]")
    if label is not None and len(label) > MAX_PHASE_LABEL:
        raise Invalid(f"phaseLabel must be at most {MAX_PHASE_LABEL} characters")


def validate_error(err: StepError | None) -> None:
    if err is None:
        return
    if err.category not in ERROR_CATEGORIES:
        raise Invalid(f"error.category must be one of {sorted(ERROR_CATEGORIES)}")
    if not ERROR_CODE_RE.match(err.code):
        raise Invalid("error.code must be 1–128 characters of [A-Za-z0-9_.:-]")
    if len(err.message) > MAX_ERROR_MESSAGE:
        raise Invalid(f"error.message must be at most {MAX_ERROR_MESSAGE} characters")


def _ms_between(start: datetime | None, end: datetime) -> int | None:
    if start is None:
        return None
    return max(0, int((end - start).total_seconds() * 1000))


def apply_step_event(
    task: TaskState,
    step: StepState,
    event: StepEvent,
    *,
    operation: OperationDefinition,
    statuses: StatusDefinitionSet,
    validator: SchemaValidator,
    other_steps_stale: bool,
    now: datetime,
) -> Outcome:
    """Decide a step event (R1 from "sourceSeq" on); returns the new states.

    The caller has already checked dedup, the execution binding (token/handle,
    current attempt and execution, producer and operation match).
    """
    if event.event_type not in STEP_EVENT_TYPES:
        raise Conflict(f"{event.event_type} is not a step event", ErrorCode.INVALID_TRANSITION)
    health_event = event.event_type is EventType.STEP_HEALTH_CHANGED
    # Health changes come from the health role on a stream of their own: they
    # must not advance the producer's sourceSeq (its next event would regress).
    if not health_event:
        if event.source_seq <= step.source_seq:
            raise Conflict(
                f"sourceSeq {event.source_seq} is not after {step.source_seq} for this execution",
                ErrorCode.SOURCE_SEQ_REGRESSION,
            )
        operation.check_event_type(event.event_type)
    lifecycle = next_step_lifecycle(event.event_type, step.lifecycle)
    health = step.health
    if event.event_type is EventType.STEP_HEALTH_CHANGED:
        if event.health not in (Health.HEALTHY, Health.STALE) or event.health == step.health:
            raise Conflict(f"step health is already {step.health}", ErrorCode.INVALID_TRANSITION)
        health = event.health
    elif lifecycle.terminal:
        health = Health.HEALTHY if step.health is Health.STALE else step.health
    business = statuses.resolve(event.business_status, lifecycle, step.business_status)
    validate_phase(event.phase_code, event.phase_label)
    validate_progress(event.progress)
    validate_error(event.error)
    data_schema, state_data = step.data_schema, step.state_data
    if event.data is not None:
        operation.check_data(event.event_type, event.data.schema, event.data.value, validator)
        data_schema = event.data.schema
        state_data = operation.strip_to_schema(event.data.schema, event.data.value)
    if event.event_type is EventType.STEP_FAILED and event.error is None:
        raise Invalid("STEP_FAILED needs an error")

    new_step = replace(
        step,
        lifecycle=lifecycle,
        business_status=business.code,
        health=health,
        source_seq=step.source_seq if health_event else event.source_seq,
        version=step.version + 1,
        progress=event.progress or step.progress,
        phase_code=event.phase_code or step.phase_code,
        phase_label=event.phase_label or step.phase_label,
        data_schema=data_schema,
        state_data=state_data,
        started_at=step.started_at or (now if lifecycle is not Lifecycle.PENDING else None),
        finished_at=now if lifecycle.terminal else step.finished_at,
        # The producer's monotonic duration is kept as reported (AC19).
        duration_ms=event.duration_ms if event.duration_ms is not None else step.duration_ms,
        error=event.error or step.error,
        stale_since=(now if health is Health.STALE else None),
        # A STALE execution that reports again has proven it is alive.
        last_heartbeat_at=now if lifecycle is Lifecycle.RUNNING else step.last_heartbeat_at,
        updated_at=now,
    )

    task_lifecycle = task.lifecycle
    started_at = task.started_at
    if task.lifecycle is Lifecycle.PENDING and lifecycle is not Lifecycle.PENDING:
        task_lifecycle = Lifecycle.RUNNING
        started_at = now
    task_health = _task_health(task, new_step, other_steps_stale)
    task_business = task.business_status
    if task_lifecycle is not task.lifecycle:
        task_business = statuses.resolve(None, task_lifecycle, task.business_status).code
    new_task = replace(
        task,
        lifecycle=task_lifecycle,
        business_status=task_business,
        health=task_health,
        started_at=started_at,
        version=task.version + 1,
        updated_at=now,
    )
    notice = _step_notice(new_task, step, new_step, operation, business.requires_action)
    return Outcome(new_task, new_step, notice, must_deliver=lifecycle.terminal or notice is not None)


def _task_health(task: TaskState, step: StepState, other_steps_stale: bool) -> Health:
    if step.health is Health.STALE or other_steps_stale:
        return Health.STALE
    if (
        step.lifecycle is Lifecycle.FAILED and step.failure_policy == FailurePolicy.CONTINUE_WITH_WARNING.value
    ) or task.health is Health.DEGRADED:
        return Health.DEGRADED
    return Health.HEALTHY


def _step_notice(
    task: TaskState,
    before: StepState,
    after: StepState,
    operation: OperationDefinition,
    requires_action: bool,
) -> Notice | None:
    nid = f"{task.task_id}:{task.version}"
    name = after.display_name or after.operation_code
    if after.lifecycle is Lifecycle.FAILED and before.lifecycle is not Lifecycle.FAILED:
        policy = after.failure_policy or operation.failure_policy.value
        waiting = policy == FailurePolicy.WAIT_FOR_USER.value
        return Notice(
            id=nid,
            kind="STEP_FAILED",
            severity=Severity.WARNING if policy == FailurePolicy.CONTINUE_WITH_WARNING.value else Severity.ERROR,
            title=f"{name} failed",
            step_id=after.step_id,
            code=after.error.code if after.error else None,
            message=after.error.message if after.error else None,
            requires_action=waiting,
        )
    if after.lifecycle is Lifecycle.TIMED_OUT:
        return Notice(nid, "STEP_TIMED_OUT", Severity.ERROR, f"{name} timed out", step_id=after.step_id)
    if after.health is Health.STALE and before.health is not Health.STALE:
        return Notice(nid, "STALE", Severity.WARNING, f"{name} stopped reporting", step_id=after.step_id)
    if after.health is Health.HEALTHY and before.health is Health.STALE:
        return Notice(nid, "RECOVERED", Severity.INFO, f"{name} is reporting again", step_id=after.step_id)
    if requires_action and after.business_status != before.business_status:
        return Notice(
            nid,
            "ACTION_REQUIRED",
            Severity.WARNING,
            f"{name} needs your action",
            step_id=after.step_id,
            requires_action=True,
        )
    return None


def apply_task_event(
    task: TaskState,
    event: TaskEvent,
    *,
    statuses: StatusDefinitionSet,
    now: datetime,
) -> Outcome:
    """Decide a Coordinator event (R4): task attempt, coordinator sequence, state machine."""
    if event.task_attempt != task.attempt:
        raise Conflict(
            f"task attempt {event.task_attempt} is not the current attempt {task.attempt}",
            ErrorCode.STALE_ATTEMPT,
        )
    if event.source_seq <= task.coordinator_source_seq:
        raise Conflict(
            f"sourceSeq {event.source_seq} is not after {task.coordinator_source_seq}",
            ErrorCode.SOURCE_SEQ_REGRESSION,
        )
    lifecycle = next_task_lifecycle(event.event_type, task.lifecycle)
    business = statuses.resolve(event.business_status, lifecycle, task.business_status)
    if event.event_type is EventType.TASK_FAILED:
        if not event.failure_code or not ERROR_CODE_RE.match(event.failure_code):
            raise Invalid("TASK_FAILED needs a failure.code of [A-Za-z0-9_.:-]")
        if event.failure_message is not None and len(event.failure_message) > MAX_ERROR_MESSAGE:
            raise Invalid(f"failure.message must be at most {MAX_ERROR_MESSAGE} characters")
    version = task.version + 1
    new_task = replace(
        task,
        lifecycle=lifecycle,
        business_status=business.code,
        coordinator_source_seq=event.source_seq,
        version=version,
        started_at=task.started_at,
        finished_at=now,
        duration_ms=event.duration_ms,
        failure_code=event.failure_code if lifecycle is Lifecycle.FAILED else None,
        failure_message=event.failure_message if lifecycle is Lifecycle.FAILED else None,
        failed_step_id=event.failed_step_id if lifecycle is Lifecycle.FAILED else None,
        # A finished task is no longer waiting on a silent executor.
        health=Health.DEGRADED if task.health is Health.DEGRADED else Health.HEALTHY,
        summary_schema=event.summary.schema if event.summary else task.summary_schema,
        summary_data=event.summary.value if event.summary else task.summary_data,
        updated_at=now,
    )
    notice = None
    if lifecycle is Lifecycle.FAILED:
        notice = Notice(
            id=f"{task.task_id}:{version}",
            kind="TASK_FAILED",
            severity=Severity.ERROR,
            title=f"{task.title} failed",
            step_id=event.failed_step_id,
            code=event.failure_code,
            message=event.failure_message,
        )
    return Outcome(new_task, None, notice, must_deliver=True)


def task_timing(task: TaskState, now: datetime) -> dict[str, Any]:
    """queue/run/total durations (SPEC §4); run time is the producer's when known."""
    end = task.finished_at or now
    return {
        "queueDurationMs": _ms_between(task.created_at, task.started_at) if task.started_at else None,
        "runDurationMs": task.duration_ms if task.duration_ms is not None else _ms_between(task.started_at, end),
        "totalDurationMs": _ms_between(task.created_at, end),
        "durationSource": "PRODUCER_MONOTONIC" if task.duration_ms is not None else "WALL_CLOCK_ESTIMATE",
        "elapsedMs": _ms_between(task.created_at, end),
    }


def bound_fields_match(bound: Mapping[str, Any], claimed: Mapping[str, Any]) -> None:
    """Every field a token/handle binds must match the body exactly (AC4)."""
    codes = {
        "producerId": ErrorCode.PRODUCER_MISMATCH,
        "operationCode": ErrorCode.OPERATION_MISMATCH,
        "executionId": ErrorCode.STALE_EXECUTION,
        "stepAttempt": ErrorCode.STALE_ATTEMPT,
    }
    for name, value in claimed.items():
        if value is None or name not in bound:
            continue
        if bound[name] != value:
            code = codes.get(name, ErrorCode.PERMISSION_DENIED)
            raise (Conflict if code in (ErrorCode.STALE_EXECUTION, ErrorCode.STALE_ATTEMPT) else Forbidden)(
                f"{name} does not match the execution context", code
            )
