"""What a worker sends (pydantic v2): events, the bindings of its executions, heartbeats.

The request models of the ingest routes, REST's and, field for field, gRPC's
(``status.api.proto_commands`` reads each message field by the type declared here). Like every
internal-API model they forbid unknown fields and bound every size (``status.api.models``).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, StringConstraints, model_validator

from status.api.models import (
    Count,
    ErrorIn,
    Key,
    OperationCode,
    PhaseCode,
    ShortKey,
    Strict,
    TemporalName,
    UserMessage,
    utc_instant,
)
from status.app import commands as c
from status.domain.model import Progress, StepError
from status.domain.rules import DataBody


class ProgressIn(Strict):
    current: float = Field(ge=0, le=1e15)
    total: float | None = Field(default=None, ge=0, le=1e15)
    unit: Annotated[str, StringConstraints(min_length=1, max_length=32)] | None = None


class DataIn(Strict):
    schema_: Annotated[str, StringConstraints(min_length=1, max_length=128)] = Field(alias="schema")
    value: Any = None


class FailureIn(Strict):
    """Deprecated TASK_FAILED body (before ``error`` + ``failedStepId``, design D6.1)."""

    code: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    message: UserMessage | None = None
    failed_step_id: Key | None = None


class EventIn(Strict):
    """One event, full (design D6) or compact (design D6) form."""

    event_id: Key
    event_type: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    source_seq: Count
    occurred_at: datetime
    execution_handle: Annotated[str, StringConstraints(min_length=8, max_length=128)] | None = None
    workflow_id: Key | None = None
    task_id: Key | None = None
    task_type: Key | None = None
    task_attempt: int | None = Field(default=None, ge=1, le=10_000)
    step_id: Key | None = None
    step_attempt: int | None = Field(default=None, ge=1, le=10_000)
    execution_id: Key | None = None
    operation_code: OperationCode | None = None
    producer_id: Key | None = None
    business_status: ShortKey | None = None
    phase_code: PhaseCode | None = None
    phase_label: Annotated[str, StringConstraints(max_length=128)] | None = None
    progress: ProgressIn | None = None
    duration_ms: Count | None = None
    data: DataIn | None = None
    error: ErrorIn | None = None
    failed_step_id: Key | None = None
    failure: FailureIn | None = Field(
        default=None,
        description="Deprecated: use error and failedStepId.",
        json_schema_extra={"deprecated": True},
    )
    step_outcomes: (
        Annotated[dict[Key, Literal["SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"]], Field(max_length=1000)] | None
    ) = Field(
        default=None,
        description=(
            "How the run saw each step's activity end (a known step by stepId, a dynamic one by its"
            " clientStepKey, to a lifecycle). Every unfinished step attempt of the task ends with the task,"
            " in the same version: as listed, else CANCELLED (TIMED_OUT with TASK_TIMED_OUT); a step that"
            " never started and is not listed is CANCELLED with the error code NOT_REACHED."
        ),
    )

    @model_validator(mode="after")
    def _one_failure_shape(self) -> EventIn:
        if self.failure is not None and (self.error is not None or self.failed_step_id is not None):
            raise ValueError("send error and failedStepId (failure is their deprecated form), not both")
        return self

    def free_form(self, depth: int = 1) -> Iterator[tuple[Any, int]]:
        if self.data is not None:
            yield self.data.value, depth + 2  # event → data → value

    def _error(self) -> StepError | None:
        if self.error is not None:
            return self.error.domain()
        if self.failure is not None:
            return StepError("UNKNOWN", self.failure.code, self.failure.message or "", None, None)
        return None

    def command(self) -> c.ReportEvent:
        return c.ReportEvent(
            event_id=self.event_id,
            event_type=self.event_type,
            source_seq=self.source_seq,
            occurred_at=utc_instant(self.occurred_at),
            execution_handle=self.execution_handle,
            workflow_id=self.workflow_id,
            task_id=self.task_id,
            task_type=self.task_type,
            task_attempt=self.task_attempt,
            step_id=self.step_id,
            step_attempt=self.step_attempt,
            execution_id=self.execution_id,
            operation_code=self.operation_code,
            producer_id=self.producer_id,
            business_status=self.business_status,
            phase_code=self.phase_code,
            phase_label=self.phase_label,
            progress=Progress(self.progress.current, self.progress.total, self.progress.unit)
            if self.progress
            else None,
            duration_ms=self.duration_ms,
            data=DataBody(self.data.schema_, self.data.value) if self.data else None,
            error=self._error(),
            failed_step_id=self.failed_step_id or (self.failure.failed_step_id if self.failure else None),
            step_outcomes=None if self.step_outcomes is None else tuple(sorted(self.step_outcomes.items())),
        )


UNBOUND_IDENTITY = "an event sent with its binding is that execution's: it carries no executionHandle"


def _unbound_identity(events: list[EventIn]) -> list[EventIn]:
    if any(event.execution_handle is not None for event in events):
        raise ValueError(UNBOUND_IDENTITY)
    return events


# An execution's events after its binding (and its STARTED), applied in the binding's transaction
# in order, each with its own result (docs/architecture.md, "The plugin's sender").
BoundEvents = Annotated[list[EventIn], Field(max_length=100), AfterValidator(_unbound_identity)]

# The events one request may carry, those riding with its bindings included: a request's events
# are decided in one transaction, holding their tasks' locks, so what one request costs the tasks'
# other writers stays bounded whichever way its events are spread over bindings.
MAX_REQUEST_EVENTS = 500
TOO_MANY_EVENTS = f"a request carries at most {MAX_REQUEST_EVENTS} events, those sent with its bindings included"


def check_request_events(riding: int, own: int) -> None:
    """``riding``: the events sent with the request's bindings; ``own``: the batch's own."""
    if riding + own > MAX_REQUEST_EVENTS:
        raise ValueError(TOO_MANY_EVENTS)


class TemporalActivityIn(Strict):
    """The Temporal activity an execution runs as: the reconciler asks Temporal about it before STALE."""

    namespace: TemporalName
    workflow_id: TemporalName
    run_id: Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9-]+$")]
    activity_id: TemporalName

    def command(self) -> c.TemporalActivity:
        return c.TemporalActivity(self.namespace, self.workflow_id, self.run_id, self.activity_id)


class StartedEventIn(Strict):
    """The execution's STEP_STARTED, committed with the binding (one transaction, one request).

    Idempotent like any event (same eventId, same result); its outcome is the response's
    ``startedEvent`` (a rejection there leaves the binding in place)."""

    event_id: Key
    occurred_at: datetime
    source_seq: Count = 1

    def command(self) -> c.StartedEvent:
        return c.StartedEvent(self.event_id, utc_instant(self.occurred_at), self.source_seq)


class _BindingIn(Strict):
    """What an activation and a registration both carry: who binds, how it beats, the Temporal
    activity, and the events that go with the binding."""

    producer_id: Key
    heartbeat_interval_seconds: int | None = Field(default=None, ge=1, le=3600)
    heartbeat_timeout_seconds: int | None = Field(default=None, ge=2, le=86_400)
    temporal_activity: TemporalActivityIn | None = None
    started_event: StartedEventIn | None = None
    events: BoundEvents = Field(default_factory=list)

    def free_form(self, depth: int = 1) -> Iterator[tuple[Any, int]]:
        for event in self.events:
            yield from event.free_form(depth + 2)  # binding → events → event


class ActivateStepIn(_BindingIn):
    attempt: int = Field(ge=1, le=10_000)

    def of_step(self, task_id: str, step_id: str) -> c.ActivateStep:
        return c.ActivateStep(
            task_id,
            step_id,
            self.attempt,
            self.producer_id,
            self.heartbeat_interval_seconds,
            self.heartbeat_timeout_seconds,
            self.temporal_activity.command() if self.temporal_activity else None,
            self.started_event.command() if self.started_event else None,
            tuple(event.command() for event in self.events),
        )


class RegisterExecutionIn(_BindingIn):
    client_step_key: Key
    operation_code: OperationCode
    attempt: int = Field(default=1, ge=1, le=10_000)
    parent_execution_id: Key | None = None
    display_name: Annotated[str, StringConstraints(max_length=128)] | None = None
    failure_policy: Literal["FAIL_TASK", "RETRY_THEN_FAIL_TASK", "CONTINUE_WITH_WARNING", "WAIT_FOR_USER"] | None = None

    def of_task(self, task_id: str) -> c.RegisterExecution:
        fields = self.model_dump(exclude={"temporal_activity", "started_event", "events", "task_id"})
        return c.RegisterExecution(
            task_id=task_id,
            temporal_activity=self.temporal_activity.command() if self.temporal_activity else None,
            started=self.started_event.command() if self.started_event else None,
            events=tuple(event.command() for event in self.events),
            **fields,
        )


class ActivateItemIn(ActivateStepIn):
    task_id: Key
    step_id: Key

    def command(self) -> c.ActivateStep:
        return self.of_step(self.task_id, self.step_id)


class RegisterItemIn(RegisterExecutionIn):
    task_id: Key

    def command(self) -> c.RegisterExecution:
        return self.of_task(self.task_id)


class BindItemIn(Strict):
    """One binding of a batch: an activation (known step) or a registration (dynamic step)."""

    activate: ActivateItemIn | None = None
    registration: RegisterItemIn | None = Field(default=None, alias="register")

    @model_validator(mode="after")
    def _one_kind(self) -> BindItemIn:
        if (self.activate is None) == (self.registration is None):
            raise ValueError("an item is either activate or register")
        return self

    def command(self) -> c.ActivateStep | c.RegisterExecution:
        if self.activate is not None:
            return self.activate.command()
        assert self.registration is not None
        return self.registration.command()

    @property
    def riding(self) -> int:
        """How many events ride with this binding."""
        kind = self.activate if self.activate is not None else self.registration
        return len(kind.events) if kind is not None else 0

    def free_form(self, depth: int = 1) -> Iterator[tuple[Any, int]]:
        kind = self.activate if self.activate is not None else self.registration
        assert kind is not None
        return kind.free_form(depth + 1)  # item → activate/register


class BindBatchIn(Strict):
    """Bindings of many executions, committed together (each with its STARTED when given)."""

    items: list[BindItemIn] = Field(min_length=1, max_length=100)

    @model_validator(mode="after")
    def _bounded(self) -> BindBatchIn:
        check_request_events(sum(item.riding for item in self.items), 0)
        return self

    def free_form(self, depth: int = 1) -> Iterator[tuple[Any, int]]:
        for item in self.items:
            yield from item.free_form(depth + 2)  # batch → items → item


class HeartbeatIn(Strict):
    heartbeat_seq: Count
    observed_at: datetime | None = None
    execution_handle: Annotated[str, StringConstraints(min_length=8, max_length=128)] | None = None
    execution_token: Annotated[str, StringConstraints(min_length=8, max_length=4096)] | None = None
    execution_id: Key | None = None
    task_id: Key | None = None
    step_id: Key | None = None
    step_attempt: int | None = Field(default=None, ge=1, le=10_000)
    completes_elsewhere: bool = Field(
        default=False,
        description=(
            "The worker's last heartbeat of an activity that completes elsewhere (asynchronous"
            " completion through its task token): no further heartbeat is due; the observer watches"
            " the activity in Temporal and ends the attempt as Temporal records it."
        ),
    )

    def command(self) -> c.Heartbeat:
        return c.Heartbeat(
            self.heartbeat_seq,
            utc_instant(self.observed_at) if self.observed_at else None,
            self.execution_handle,
            self.execution_token,
            self.execution_id,
            self.completes_elsewhere,
        )


class HeartbeatBatchIn(Strict):
    heartbeats: list[HeartbeatIn] = Field(min_length=1, max_length=2000)


class EventBatchIn(Strict):
    """Events, one result each; with ``bindings``, executions bound first (each with its own events,
    answered as ``executions:bind`` would), so a worker's pass is one request; with
    ``heartbeats``, the worker's due heartbeats ride in the same request (recorded after the
    events, answered as ``task-heartbeats:batch`` would)."""

    bindings: list[BindItemIn] = Field(default_factory=list, max_length=100)
    events: list[EventIn] = Field(default_factory=list, max_length=500)
    heartbeats: list[HeartbeatIn] = Field(default_factory=list, max_length=2000)

    @model_validator(mode="after")
    def _something(self) -> EventBatchIn:
        if not self.events and not self.heartbeats and not self.bindings:
            raise ValueError("a batch carries bindings, events, heartbeats or some of them")
        check_request_events(sum(item.riding for item in self.bindings), len(self.events))
        return self

    def free_form(self, depth: int = 1) -> Iterator[tuple[Any, int]]:
        for item in self.bindings:
            yield from item.free_form(depth + 2)  # batch → bindings → item
        for event in self.events:
            yield from event.free_form(depth + 2)  # batch → events → event

    def commands(self) -> tuple[list[c.ActivateStep | c.RegisterExecution], list[c.ReportEvent], list[c.Heartbeat]]:
        """Every binding, event and riding heartbeat as its command, or the request's refusal (an
        instant out of range, say): all of it is parsed before any of it is applied."""
        return (
            [b.command() for b in self.bindings],
            [e.command() for e in self.events],
            [h.command() for h in self.heartbeats],
        )
