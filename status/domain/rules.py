"""Event rules (design D8.1–D8.8, D8.10, D8.13): pure decisions over current state.

The service resolves credentials, locks rows and checks dedup; these functions
then decide — in design D8.1's order — whether an event is accepted and what the new
task and step states are.  They never read a clock: ``now`` is passed in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from status.domain import shapes
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
from status.domain.model import Progress, StepError, StepState, TaskState, evolve
from status.domain.notices import Notice, NoticeKind

PHASE_CODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
ERROR_CODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
MAX_PHASE_LABEL = 128
MAX_ERROR_MESSAGE = 512
# The error categories of design D6.1 (BUSINESS_INPUT, DEPENDENCY, SYSTEM …) plus the short forms accepted before.
ERROR_CATEGORIES = frozenset(
    {
        "BUSINESS_INPUT",
        "INPUT",
        "BUSINESS",
        "DEPENDENCY",
        "SYSTEM",
        "TIMEOUT",
        "PERMISSION",
        "CANCELLED",
        "UNKNOWN",
    }
)

# What a user must never see in a message (design D6.1: no stacks, SQL, storage addresses, keys,
# third-party responses).  Producers should send a curated text; these catch what slips through.
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]+")
_URL_RE = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]{1,15}://\S+")
_ASSIGNED_SECRET_RE = re.compile(
    r"(?i)\b(password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|authorization|bearer)(\s*[=:]\s*|\s+)\S+"
)
_TOKEN_RE = re.compile(
    r"\beyJ[\w-]+\.[\w-]+\.[\w-]*|\b(?=[A-Za-z0-9+/_=-]*\d)(?=[A-Za-z0-9+/_=-]*[A-Za-z])[A-Za-z0-9+/_=-]{32,}"
)
_PATH_RE = re.compile(r"(?<![\w/])(?:/[\w.@~-]+){2,}/?|\b[A-Za-z]:\\\S+")
_EMAIL_RE = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")


def safe_user_message(text: str) -> str:
    """A message as users may see it: one line, links, paths, addresses and secrets removed, bounded."""
    text = _CONTROL_RE.sub(" ", text)
    text = _URL_RE.sub("[link removed]", text)
    text = _ASSIGNED_SECRET_RE.sub(lambda m: f"{m.group(1)}=[redacted]", text)
    text = _TOKEN_RE.sub("[redacted]", text)
    text = _EMAIL_RE.sub("[address removed]", text)
    text = _PATH_RE.sub("[path removed]", text)
    text = " ".join(text.split())
    if len(text) > MAX_ERROR_MESSAGE:
        text = text[: MAX_ERROR_MESSAGE - 1].rstrip() + "…"
    return text


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
    # Temporal's record of how the attempt ended (its own report was lost): not the producer's
    # stream, so neither its sequence nor the operation's allowed event types apply.
    from_temporal: bool = False


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
    error: StepError | None = None  # TASK_FAILED: design D6.1 error object
    failed_step_id: str | None = None
    summary: DataBody | None = None
    reason: str | None = None  # user-safe: why the task ended this way (Temporal's verdict)


@dataclass(frozen=True)
class Outcome:
    task: TaskState
    step: StepState | None
    notice: Notice | None
    must_deliver: bool  # terminal, new attempt, notice: never coalesced away (design D8.14)
    # Step attempts a task-level event ended with the task (its run closed under them).
    ended_steps: tuple[StepState, ...] = ()


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
    """Free phase codes are allowed within charset/length limits (design D8.3, P7)."""
    if code is not None and not PHASE_CODE_RE.match(code):
        raise Invalid("phaseCode must be 1–64 characters of [A-Za-z0-9_.:-]")
    if label is not None and len(label) > MAX_PHASE_LABEL:
        raise Invalid(f"phaseLabel must be at most {MAX_PHASE_LABEL} characters")


def checked_error(err: StepError | None) -> StepError | None:
    """The error as stored and shown: category and code checked, ``user_message`` made safe."""
    if err is None:
        return None
    if err.category not in ERROR_CATEGORIES:
        raise Invalid(f"error.category must be one of {sorted(ERROR_CATEGORIES)}")
    if not ERROR_CODE_RE.match(err.code):
        raise Invalid("error.code must be 1–128 characters of [A-Za-z0-9_.:-]")
    if len(err.user_message) > MAX_ERROR_MESSAGE:
        raise Invalid(f"error.userMessage must be at most {MAX_ERROR_MESSAGE} characters")
    if err.diagnostics_ref is not None and len(err.diagnostics_ref) > 255:
        raise Invalid("error.diagnosticsRef must be at most 255 characters")
    return replace(err, user_message=safe_user_message(err.user_message))


def ms_between(start: datetime | None, end: datetime) -> int | None:
    """Whole milliseconds from start to end (never negative); None without a start."""
    if start is None:
        return None
    return max(0, int((end - start).total_seconds() * 1000))


def apply_step_event(  # noqa: C901
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
    """Decide a step event (design D8.1 from "sourceSeq" on); returns the new states.

    The caller has already checked dedup, the execution binding (token/handle,
    current attempt and execution, producer and operation match).
    """
    if event.event_type not in STEP_EVENT_TYPES:
        raise Conflict(f"{event.event_type} is not a step event", ErrorCode.INVALID_TRANSITION)
    if task.lifecycle.terminal:
        # The task's end ended its steps (``apply_task_event``): a late report of work that ran
        # before it is history, not a change; only an audited correction changes them now.
        raise Conflict(f"task is {task.lifecycle}; its steps no longer change", ErrorCode.TERMINAL_STATE)
    health_event = event.event_type is EventType.STEP_HEALTH_CHANGED
    # Health changes come from the health role on a stream of their own: they
    # must not advance the producer's sourceSeq (its next event would regress).
    if not health_event:
        if event.source_seq <= step.source_seq:
            raise Conflict(
                f"sourceSeq {event.source_seq} is not after {step.source_seq} for this execution",
                ErrorCode.SOURCE_SEQ_REGRESSION,
            )
        if not event.from_temporal:
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
    error = checked_error(event.error)
    data_schema, state_data = step.data_schema, step.state_data
    if event.data is not None:
        operation.check_data(event.event_type, event.data.schema, event.data.value, validator)
        data_schema = event.data.schema
        state_data = operation.strip_to_schema(event.data.schema, event.data.value)
    if event.event_type is EventType.STEP_FAILED and event.error is None:
        raise Invalid("STEP_FAILED needs an error")

    new_step = evolve(
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
        # The producer's monotonic duration is kept as reported (design P19).
        duration_ms=event.duration_ms if event.duration_ms is not None else step.duration_ms,
        error=error or step.error,
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
    new_task = evolve(
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
    if step.health is Health.STALE or other_steps_stale or task.stuck_since is not None:
        return Health.STALE
    if (
        step.lifecycle is Lifecycle.FAILED and step.failure_policy == FailurePolicy.CONTINUE_WITH_WARNING.value
    ) or task.health is Health.DEGRADED:
        return Health.DEGRADED
    return Health.HEALTHY


def _step_notice(  # noqa: C901
    task: TaskState,
    before: StepState,
    after: StepState,
    operation: OperationDefinition,
    requires_action: bool,
) -> Notice | None:
    """The notice policy (design D8.13) for a step change; None when users need not be told."""
    if task.lifecycle.terminal:
        # The task has ended and its users were told how: a late report of an attempt that ran
        # before (an abandoned activity, a local activity's last word) is history, not news.
        return None
    name = after.display_name or after.operation_code

    def notice(type_: NoticeKind, level: Severity, title: str, message: str | None = None, **more: Any) -> Notice:
        return Notice(
            f"{task.task_id}:{task.version}",
            type_,
            level,
            title,
            message,
            operation_code=after.operation_code,
            step_id=after.step_id,
            **more,
        )

    if after.lifecycle is Lifecycle.FAILED and before.lifecycle is not Lifecycle.FAILED:
        policy = after.failure_policy or operation.failure_policy.value
        err = after.error
        text = err.user_message or None if err else None
        failed = {"error_code": err.code if err else None, "retryable": err.retryable if err else None}
        if policy == FailurePolicy.WAIT_FOR_USER.value:
            return notice(
                NoticeKind.STEP_FAILED,
                Severity.WARNING,
                f"{name} needs your action",
                text,
                requires_action=True,
                actions=("VIEW_DETAILS",),
                **failed,
            )
        if err is not None and err.retryable:
            return notice(NoticeKind.STEP_FAILED, Severity.WARNING, f"{name} failed, retrying", text, **failed)
        if policy == FailurePolicy.CONTINUE_WITH_WARNING.value:
            return notice(
                NoticeKind.STEP_FAILED, Severity.WARNING, f"{name} failed; the task continues", text, **failed
            )
        return notice(
            NoticeKind.STEP_FAILED, Severity.ERROR, f"{name} failed", text, actions=("VIEW_DETAILS",), **failed
        )
    if after.lifecycle is Lifecycle.TIMED_OUT:
        return notice(NoticeKind.STEP_TIMED_OUT, Severity.ERROR, f"{name} timed out")
    if after.health is Health.STALE and before.health is not Health.STALE:
        return notice(
            NoticeKind.STALE,
            Severity.WARNING,
            f"{name}: status temporarily unconfirmed",
            "Still running, but its executor has stopped reporting; this clears when it reports again.",
        )
    if after.health is Health.HEALTHY and before.health is Health.STALE:
        return notice(NoticeKind.RECOVERED, Severity.INFO, f"{name} is reporting again")
    if requires_action and after.business_status != before.business_status:
        return notice(
            NoticeKind.ACTION_REQUIRED,
            Severity.WARNING,
            f"{name} needs your action",
            requires_action=True,
            actions=("VIEW_DETAILS",),
        )
    return None


def apply_task_event(
    task: TaskState,
    event: TaskEvent,
    *,
    statuses: StatusDefinitionSet,
    now: datetime,
    failed_operation_code: str | None = None,
    open_steps: Sequence[StepState] = (),
    open_steps_become: Lifecycle | None = None,
    step_outcomes: Mapping[str, Lifecycle] | None = None,
) -> Outcome:
    """Decide a Coordinator event (design D8.4): task attempt, coordinator sequence, state machine.

    A task's end ends its steps: the unfinished attempts in ``open_steps`` end with the task, in
    its version, so no step claims to run, or to be still to come, after the work stopped. Each
    ends as ``step_outcomes`` says for it (``outcome_key``: how the run saw its activity end — a local activity or
    an asynchronously completed one whose own report is still on its way), else as
    ``open_steps_become`` (CANCELLED; TIMED_OUT with a timed-out task); a step that never started
    is CANCELLED with ``NOT_REACHED``: the task ended before it ran. From then on a step changes
    only by an audited correction.
    """
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
    error = checked_error(event.error)
    if event.event_type is EventType.TASK_FAILED and error is None:
        raise Invalid("TASK_FAILED needs an error {category, code, retryable, userMessage}")
    version = task.version + 1
    new_task = evolve(
        task,
        lifecycle=lifecycle,
        business_status=business.code,
        coordinator_source_seq=event.source_seq,
        version=version,
        started_at=task.started_at,
        finished_at=now,
        duration_ms=event.duration_ms,
        failure=error if lifecycle is Lifecycle.FAILED else None,
        failed_step_id=event.failed_step_id if lifecycle is Lifecycle.FAILED else None,
        # A finished task is no longer waiting on a silent executor, nor on a stuck run.
        health=Health.DEGRADED if task.health is Health.DEGRADED else Health.HEALTHY,
        stuck_since=None,
        end_reason=event.reason if lifecycle.terminal else None,
        summary_schema=event.summary.schema if event.summary else task.summary_schema,
        summary_data=event.summary.value if event.summary else task.summary_data,
        updated_at=now,
    )
    notice = None
    if lifecycle is Lifecycle.FAILED and error is not None:
        notice = Notice(
            f"{task.task_id}:{version}",
            NoticeKind.TASK_FAILED,
            Severity.ERROR,
            f"{task.title} failed",
            error.user_message or None,
            operation_code=failed_operation_code,
            error_code=error.code,
            retryable=error.retryable,
            actions=("RETRY", "VIEW_DETAILS") if error.retryable else ("VIEW_DETAILS",),
            step_id=event.failed_step_id,
        )
    elif lifecycle is Lifecycle.CANCELLED and event.reason:
        notice = Notice(
            f"{task.task_id}:{version}",
            NoticeKind.TASK_CANCELLED,
            Severity.WARNING,
            f"{task.title} was stopped",
            event.reason,
        )
    elif lifecycle is Lifecycle.TIMED_OUT:
        notice = Notice(
            f"{task.task_id}:{version}",
            NoticeKind.TASK_TIMED_OUT,
            Severity.ERROR,
            f"{task.title} timed out",
            event.reason,
            actions=("VIEW_DETAILS",),
        )
    ended: tuple[StepState, ...] = ()
    if open_steps_become is not None:
        outcomes = step_outcomes or {}
        ended = tuple(
            _ended_with_task(step, outcomes.get(outcome_key(step)), open_steps_become, error, event, statuses, now)
            for step in open_steps
            if not step.lifecycle.terminal and not step.superseded
        )
    return Outcome(new_task, None, notice, must_deliver=True, ended_steps=ended)


def outcome_key(step: StepState) -> str:
    """How a run's ``stepOutcomes`` name a step: a known step by its id, a dynamic one by the
    clientStepKey it was registered with (the run never learns the id the service gave it)."""
    return step.step_id if step.step_kind == "KNOWN" else step.client_step_key


NOT_REACHED = StepError("CANCELLED", "NOT_REACHED", "Not run: the task ended before this step started.", False)


def _ended_with_task(
    step: StepState,
    outcome: Lifecycle | None,
    otherwise: Lifecycle,
    error: StepError | None,
    event: TaskEvent,
    statuses: StatusDefinitionSet,
    now: datetime,
) -> StepState:
    """An unfinished attempt as its task's end leaves it (see ``apply_task_event``)."""
    never_started = outcome is None and step.lifecycle is Lifecycle.PENDING and step.started_at is None
    becomes = Lifecycle.CANCELLED if never_started else outcome or otherwise
    why: StepError | None
    if never_started:
        why = step.error or NOT_REACHED
    elif becomes is Lifecycle.FAILED and step.step_id == event.failed_step_id and step.error is None:
        why = error  # the step that failed the run says why, though its own report has not come (yet)
    else:
        why = step.error
    return evolve(
        step,
        lifecycle=becomes,
        error=why,
        business_status=statuses.resolve(None, becomes, step.business_status).code,
        health=Health.HEALTHY if step.health is Health.STALE else step.health,
        stale_since=None,
        version=step.version + 1,
        started_at=None if never_started else step.started_at or now,
        finished_at=now,
        updated_at=now,
    )


STUCK_MESSAGE = "The workflow is stuck; operators are told."


def apply_run_health(
    task: TaskState, *, stuck: bool, steps_stale: bool, steps_degraded: bool, now: datetime
) -> Outcome:
    """Temporal reports the owning run stuck (its workflow task fails again and again: open in
    Temporal, making no progress) or moving again. The task's lifecycle stays what was last
    confirmed; its health says the status is unconfirmed (STALE) while the run is stuck, with a
    WARNING notice for its users, and comes back with the run (an INFO notice)."""
    if task.lifecycle.terminal:
        raise Conflict(f"task is {task.lifecycle} and can no longer change", ErrorCode.TERMINAL_STATE)
    if stuck == (task.stuck_since is not None):
        raise Conflict(f"the task's run is already {'stuck' if stuck else 'moving'}", ErrorCode.INVALID_TRANSITION)
    version = task.version + 1
    health = Health.STALE if stuck or steps_stale else Health.DEGRADED if steps_degraded else Health.HEALTHY
    new_task = evolve(task, health=health, stuck_since=now if stuck else None, version=version, updated_at=now)
    notice_id = f"{task.task_id}:{version}"
    if stuck:
        notice = Notice(notice_id, NoticeKind.WORKFLOW_STUCK, Severity.WARNING, f"{task.title} is stuck", STUCK_MESSAGE)
    else:
        notice = Notice(notice_id, NoticeKind.WORKFLOW_RECOVERED, Severity.INFO, f"{task.title} is moving again")
    return Outcome(new_task, None, notice, must_deliver=True)


def task_timing(task: TaskState, now: datetime) -> shapes.Timing:
    """queue/run/total durations (design D4); run time is the producer's when known."""
    end = task.finished_at or now
    return {
        "queueDurationMs": ms_between(task.created_at, task.started_at) if task.started_at else None,
        "runDurationMs": task.duration_ms if task.duration_ms is not None else ms_between(task.started_at, end),
        "totalDurationMs": ms_between(task.created_at, end),
        "durationSource": "PRODUCER_MONOTONIC" if task.duration_ms is not None else "WALL_CLOCK_ESTIMATE",
        "elapsedMs": ms_between(task.created_at, end),
    }


def bound_fields_match(bound: Mapping[str, Any], claimed: Mapping[str, Any]) -> None:
    """Every field a token/handle binds must match the body exactly (design P4)."""
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
