"""Plain data of the current state: workflows, tasks, step attempts."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

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
    """A classified error (seed §3.7): ``code`` drives clients' actions, ``user_message`` is safe to
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
