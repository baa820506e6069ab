"""Plain data of the current state: workflows, tasks, step attempts."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, TypeVar

from status.domain.lifecycle import Health, Lifecycle


@dataclass(frozen=True)
class Progress:
    current: float
    total: float | None = None
    unit: str | None = None

    @property
    def percent(self) -> float | None:
        if self.total is None or self.total <= 0:
            return None
        return round(min(100.0, 100.0 * self.current / self.total), 2)


@dataclass(frozen=True)
class StepError:
    """A classified error (design D6.1): ``code`` drives clients' actions, ``user_message`` is safe to
    show (length-limited and redacted before it gets here), ``diagnostics_ref`` is for operators only
    and never leaves the service."""

    category: str
    code: str
    user_message: str
    retryable: bool | None = None
    diagnostics_ref: str | None = None


@dataclass(frozen=True)
class StepState:
    task_id: str
    step_id: str
    attempt: int
    client_step_key: str
    operation_code: str
    operation_definition_version: int
    service_name: str
    lifecycle: Lifecycle
    business_status: str
    version: int
    step_kind: str = "KNOWN"
    display_name: str | None = None
    step_order: int = 0
    parent_execution_id: str | None = None
    depth: int = 0
    producer_id: str | None = None
    execution_id: str | None = None
    superseded: bool = False  # a newer attempt of the same step exists
    source_seq: int = 0
    health: Health = Health.HEALTHY
    heartbeat_interval_seconds: int | None = None
    heartbeat_timeout_seconds: int | None = None
    last_heartbeat_seq: int = 0
    last_heartbeat_at: datetime | None = None
    stale_since: datetime | None = None
    progress: Progress | None = None
    phase_code: str | None = None
    phase_label: str | None = None
    data_schema: str | None = None
    state_data: Any = None
    activated_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_ms: int | None = None
    error: StepError | None = None
    failure_policy: str | None = None
    updated_at: datetime | None = None
    # The Temporal activity this attempt ran as (``ids.temporal_activity_key``) and Temporal's own
    # attempt number for it: the next activation is placed by them (``domain.attempts``).
    temporal_activity: str | None = None
    temporal_attempt: int | None = None


@dataclass(frozen=True)
class TaskState:
    task_id: str
    workflow_id: str
    client_task_key: str
    tenant_id: str
    owner_id: str
    authority_scope: str
    bucket_id: int
    title: str
    lifecycle: Lifecycle
    business_status: str
    version: int
    created_at: datetime
    updated_at: datetime
    attempt: int = 1
    coordinator_source_seq: int = 0
    health: Health = Health.HEALTHY
    product_id: str | None = None
    task_type: str | None = None
    project_id: str | None = None
    status_definition_version: int | None = None
    operation_definition_version: int | None = None
    summary_schema: str | None = None
    summary_data: Any = None
    failure: StepError | None = None  # TASK_FAILED's error (or the last correction's)
    failed_step_id: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_ms: int | None = None
    dynamic_step_count: int = 0
    # Temporal reports the owning run's workflow task failing over and over: the run is open
    # but makes no progress (a bug or a non-deterministic change in workflow code).
    stuck_since: datetime | None = None
    # How the task ended, in user-safe words, when its ending came with a reason (an operator's
    # terminate, a timeout's length): shown after a reload as it was live.
    end_reason: str | None = None


@dataclass(frozen=True)
class WorkflowState:
    workflow_id: str
    tenant_id: str
    owner_id: str
    authority_scope: str
    client_workflow_key: str
    title: str
    lifecycle: Lifecycle
    version: int
    created_at: datetime
    updated_at: datetime
    workflow_type: str | None = None
    health: Health = Health.HEALTHY
    task_count: int = 0
    aggregate: dict[str, Any] = field(default_factory=dict)
    started_at: datetime | None = None
    finished_at: datetime | None = None


State = TypeVar("State", StepState, TaskState, WorkflowState)


def evolve(state: State, **changes: Any) -> State:
    """``dataclasses.replace(state, **changes)``, a few times cheaper: what an event does to its
    step and task many times per change.

    ``replace`` builds the new state through ``__init__``, which for a frozen class is a guarded
    ``object.__setattr__`` per field (39 of them for a step). These states have no
    ``__post_init__``, no ``InitVar`` and no field left out of ``__init__``, so a copy of the
    instance's fields with the changed ones set is the very object ``replace`` builds. The trap
    ``replace`` guards against is guarded here too: a misspelt field is a ``TypeError``, never a
    new attribute nobody reads."""
    unknown = changes.keys() - _FIELD_NAMES[type(state)]
    if unknown:
        raise TypeError(f"{type(state).__name__} has no field {', '.join(sorted(unknown))}")
    new = object.__new__(type(state))
    attributes = new.__dict__
    attributes.update(state.__dict__)
    attributes.update(changes)
    return new


def _field_names(cls: type) -> frozenset[str]:
    # The promise above, checked when this module loads: a field that ``__init__`` leaves out,
    # or a ``__post_init__``, would make a copy differ from what ``replace`` builds.
    if hasattr(cls, "__post_init__") or any(not f.init for f in fields(cls)):
        raise TypeError(f"evolve cannot stand in for replace on {cls.__name__}")
    return frozenset(f.name for f in fields(cls))


_FIELD_NAMES = {cls: _field_names(cls) for cls in (StepState, TaskState, WorkflowState)}
