"""Commands of the status service: what every adapter (HTTP, batch, tests) builds."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, NotRequired, TypedDict

from status.domain.clock import naive_utc
from status.domain.definitions import DynamicRegistrationPolicy
from status.domain.model import Progress, StepError
from status.domain.rules import DataBody


@dataclass(frozen=True)
class KnownStep:
    step_id: str
    operation_code: str
    display_name: str | None = None
    expected_producer: str | None = None
    failure_policy: str | None = None


@dataclass(frozen=True)
class NewTask:
    client_task_key: str
    title: str
    owner_id: str | None = None  # defaults to the workflow owner
    task_type: str | None = None
    product_id: str | None = None
    project_id: str | None = None
    known_steps: tuple[KnownStep, ...] = ()
    dynamic_registration_policy: DynamicRegistrationPolicy | None = None
    external_refs: tuple[tuple[str, str], ...] = ()  # (refType, refValue) in the caller's scope


@dataclass(frozen=True)
class TemporalOwner:
    """The Temporal run whose end ends a task (no run id: whichever run of the workflow id ends)."""

    namespace: str
    workflow_id: str
    run_id: str | None = None
    # A retried cron run names the run it retries: the work that run owns is this run's too.
    continues_run_id: str | None = None


@dataclass(frozen=True)
class CreateWorkflow:
    client_workflow_key: str
    owner_id: str
    title: str
    workflow_type: str | None = None
    initial_tasks: tuple[NewTask, ...] = ()
    dynamic_registration_policy: DynamicRegistrationPolicy | None = None
    # Not part of the request's identity: each run of a continue-as-new chain, a reset or a retry
    # sends its own, and becomes the owner of the tasks still open.
    temporal_owner: TemporalOwner | None = None


@dataclass(frozen=True)
class TemporalActivity:
    """The Temporal activity an execution runs as (what the reconciler asks Temporal about)."""

    namespace: str
    workflow_id: str
    run_id: str
    activity_id: str


@dataclass(frozen=True)
class StartedEvent:
    """The execution's STEP_STARTED, sent with its binding: both commit in one transaction."""

    event_id: str
    occurred_at: datetime
    source_seq: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "occurred_at", naive_utc(self.occurred_at))

    def as_event(self) -> ReportEvent:
        return ReportEvent(self.event_id, "STEP_STARTED", self.source_seq, self.occurred_at)


@dataclass(frozen=True)
class ActivateStep:
    task_id: str
    step_id: str
    attempt: int
    producer_id: str
    heartbeat_interval_seconds: int | None = None
    heartbeat_timeout_seconds: int | None = None
    temporal_activity: TemporalActivity | None = None
    started: StartedEvent | None = None
    # The execution's further events, applied after the binding (and its STARTED) in the same
    # transaction: a worker's short activity reported in one request (docs/architecture.md).
    events: tuple[ReportEvent, ...] = ()


@dataclass(frozen=True)
class RegisterExecution:
    task_id: str
    client_step_key: str
    operation_code: str
    producer_id: str
    attempt: int = 1
    parent_execution_id: str | None = None
    display_name: str | None = None
    failure_policy: str | None = None
    heartbeat_interval_seconds: int | None = None
    heartbeat_timeout_seconds: int | None = None
    temporal_activity: TemporalActivity | None = None
    started: StartedEvent | None = None
    # The execution's further events, applied after the binding (and its STARTED) in the same
    # transaction: a worker's short activity reported in one request (docs/architecture.md).
    events: tuple[ReportEvent, ...] = ()


@dataclass(frozen=True)
class ReportEvent:
    """One event in full (token) or compact (handle) form; bound fields may be omitted."""

    event_id: str
    event_type: str
    source_seq: int
    occurred_at: datetime
    execution_handle: str | None = None
    workflow_id: str | None = None
    task_id: str | None = None
    task_type: str | None = None
    task_attempt: int | None = None
    step_id: str | None = None
    step_attempt: int | None = None
    execution_id: str | None = None
    operation_code: str | None = None
    producer_id: str | None = None
    business_status: str | None = None
    phase_code: str | None = None
    phase_label: str | None = None
    progress: Progress | None = None
    duration_ms: int | None = None
    data: DataBody | None = None
    error: StepError | None = None
    health: str | None = None
    reason: str | None = None
    failed_step_id: str | None = None
    summary: DataBody | None = None
    # A task event sent as its Temporal run closed (the plugin's): how the run saw each step's
    # activity end (stepId → lifecycle). Present, the task's unfinished attempts end with it.
    step_outcomes: tuple[tuple[str, str], ...] | None = None

    def __post_init__(self) -> None:
        # The boundary of the application: instants are naive UTC from here on (the HTTP and gRPC
        # models already give them so; an in-process caller may not).
        if self.occurred_at.tzinfo is not None:
            object.__setattr__(self, "occurred_at", naive_utc(self.occurred_at))

    def content(self) -> EventContent:
        """The semantic content hashed for idempotency (no credentials)."""
        content: EventContent = {
            "eventType": self.event_type,
            "sourceSeq": self.source_seq,
            "occurredAt": self.occurred_at.isoformat(),
            "taskAttempt": self.task_attempt,
            "businessStatus": self.business_status,
            "phaseCode": self.phase_code,
            "phaseLabel": self.phase_label,
            "progress": None
            if self.progress is None
            else [self.progress.current, self.progress.total, self.progress.unit],
            "durationMs": self.duration_ms,
            "data": None if self.data is None else [self.data.schema, self.data.value],
            "error": None
            if self.error is None
            else [
                self.error.category,
                self.error.code,
                self.error.user_message,
                self.error.retryable,
                self.error.diagnostics_ref,
            ],
            "health": self.health,
            "reason": self.reason,
            # Kept in its pre-0.6 shape (TASK_FAILED's error now travels in "error") so events stored
            # before the upgrade keep their fingerprints: a retry across it stays a duplicate.
            "failure": [None, None, self.failed_step_id],
            "summary": None if self.summary is None else [self.summary.schema, self.summary.value],
        }
        if self.step_outcomes is not None:
            content["stepOutcomes"] = [list(o) for o in self.step_outcomes]
        return content


class EventContent(TypedDict):
    """What an event's fingerprint hashes and its log entry records: the report as sent, without
    its credentials. Its keys, their order and their values' shapes are fixed: a retry after an
    upgrade must hash as its first sending did."""

    eventType: str
    sourceSeq: int
    occurredAt: str
    taskAttempt: int | None
    businessStatus: str | None
    phaseCode: str | None
    phaseLabel: str | None
    progress: list[float | str | None] | None  # current, total, unit
    durationMs: int | None
    data: list[Any] | None  # schema, value
    error: list[str | bool | None] | None  # category, code, user message, retryable, diagnostics
    health: str | None
    reason: str | None
    failure: list[str | None]
    summary: list[Any] | None  # schema, value
    stepOutcomes: NotRequired[list[list[str]]]


class _HeartbeatFields(NamedTuple):
    heartbeat_seq: int
    observed_at: datetime | None = None
    execution_handle: str | None = None
    execution_token: str | None = None
    execution_id: str | None = None
    # The worker's last heartbeat of an activity that completes elsewhere (its task token): the
    # attempt is watched in Temporal from now on, never timed on heartbeats.
    completes_elsewhere: bool = False


class Heartbeat(_HeartbeatFields):
    """One heartbeat of a batch. A named tuple, not a frozen dataclass: a batch holds up to 2,000,
    and a frozen dataclass's ``__init__`` (a guarded ``setattr`` per field) was most of what
    turning a parsed item into its command cost. ``observed_at`` is naive UTC, like every instant
    from the boundary on."""

    __slots__ = ()

    def __new__(
        cls,
        heartbeat_seq: int,
        observed_at: datetime | None = None,
        execution_handle: str | None = None,
        execution_token: str | None = None,
        execution_id: str | None = None,
        completes_elsewhere: bool = False,
    ) -> Heartbeat:
        if observed_at is not None and observed_at.tzinfo is not None:
            observed_at = naive_utc(observed_at)
        return super().__new__(
            cls, heartbeat_seq, observed_at, execution_handle, execution_token, execution_id, completes_elsewhere
        )


@dataclass(frozen=True)
class Classify:
    task_id: str
    expected_version: int | None
    product_id: str | None = None
    task_type: str | None = None
    status_definition_version: int | None = None
    fields: frozenset[str] = field(default_factory=frozenset)  # which of the above were sent
