"""Request models (pydantic v2) of the HTTP API, and their conversion to commands.

Internal-API models forbid unknown fields: a typo in a producer's payload is a
clear 422, never silently ignored.  Sizes and charsets are bounded here so no
unbounded string ever reaches the service.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from pydantic.alias_generators import to_camel

from status.app import commands as c
from status.domain.definitions import DynamicRegistrationPolicy
from status.domain.errors import Invalid
from status.domain.ids import PRINCIPAL_ID_PATTERN
from status.domain.model import StepError

Key = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[^\s\x00-\x1f]+$")]
ShortKey = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[^\s\x00-\x1f]+$")]
# Users, projects: they become parts of channel names (status.domain.ids.PRINCIPAL_ID_PATTERN).
PrincipalId = Annotated[str, StringConstraints(pattern=PRINCIPAL_ID_PATTERN)]
OperationCode = Annotated[
    str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Z][A-Z0-9_]*(\.[A-Z0-9_]+)*$")
]
Title = Annotated[str, StringConstraints(min_length=1, max_length=255)]
PhaseCode = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")]
Count = Annotated[int, Field(ge=0, le=2**62)]


def utc_instant(value: datetime) -> datetime:
    """The instant in UTC; RFC 3339 allows offsets that move it out of the calendar (year 0 or 10000)."""
    if value.tzinfo is not None:
        try:
            value = value.astimezone(UTC).replace(tzinfo=None)
        except OverflowError as exc:
            raise Invalid(f"{value.isoformat()} is outside the years 1000 to 9999 in UTC") from exc
    if value.year < 1000:  # the database's DATETIME range starts there
        raise Invalid(f"{value.isoformat()} is outside the years 1000 to 9999 in UTC")
    return value


class Body(BaseModel):
    """A request body. Bodies are parsed from their bytes by pydantic's own parser
    (``status.api.gate``), which reads NaN and Infinity: a float field refuses them, as storage
    must; unknown fields are refused, never silently ignored."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    def free_form(self, depth: int = 1) -> Iterator[tuple[Any, int]]:
        """The body's free-form JSON values (what no field type bounds), each with the depth it
        sits at in the request body when the model's own object is at ``depth``: the gate checks
        that storage can hold them (``status.api.gate.check_storable``)."""
        return iter(())


class Strict(Body):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)


class KnownStepIn(Strict):
    step_id: Key
    operation_code: OperationCode
    display_name: Annotated[str, StringConstraints(max_length=128)] | None = None
    expected_producer: Key | None = None
    failure_policy: Literal["FAIL_TASK", "RETRY_THEN_FAIL_TASK", "CONTINUE_WITH_WARNING", "WAIT_FOR_USER"] | None = None
    depends_on: list[Key] = Field(default_factory=list, max_length=64)


class DynamicPolicyIn(Strict):
    allowed_parent_operations: list[Annotated[str, StringConstraints(max_length=128)]] = Field(
        default_factory=list, max_length=64
    )
    allowed_child_operations: list[Annotated[str, StringConstraints(max_length=128)]] = Field(
        default_factory=list, max_length=64
    )
    max_dynamic_steps: int = Field(default=0, ge=0, le=10_000)
    max_depth: int = Field(default=1, ge=1, le=16)
    max_parallel_executions: int = Field(default=10, ge=1, le=1000)
    registrations_per_minute: int = Field(default=60, ge=1, le=10_000)

    def policy(self) -> DynamicRegistrationPolicy:
        return DynamicRegistrationPolicy(
            tuple(self.allowed_parent_operations),
            tuple(self.allowed_child_operations),
            self.max_dynamic_steps,
            self.max_depth,
            self.max_parallel_executions,
            self.registrations_per_minute,
        )


RefType = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")]
RefValue = Annotated[str, StringConstraints(min_length=1, max_length=255, pattern=r"^[^\x00-\x1f]+$")]


class ExternalRefIn(Strict):
    """Another system's id for the task, in the credential's authority scope (design D5)."""

    ref_type: RefType
    ref_value: RefValue


class AttachRefsIn(Strict):
    external_refs: list[ExternalRefIn] = Field(min_length=1, max_length=20)

    def pairs(self) -> list[tuple[str, str]]:
        return [(r.ref_type, r.ref_value) for r in self.external_refs]


class NewTaskIn(Strict):
    client_task_key: Key
    title: Title
    owner_id: PrincipalId | None = None
    task_type: Key | None = None
    product_id: ShortKey | None = None
    project_id: PrincipalId | None = None
    known_steps: list[KnownStepIn] = Field(default_factory=list, max_length=200)
    dynamic_registration_policy: DynamicPolicyIn | None = None
    external_refs: list[ExternalRefIn] = Field(default_factory=list, max_length=20)

    def command(self) -> c.NewTask:
        return c.NewTask(
            client_task_key=self.client_task_key,
            title=self.title,
            owner_id=self.owner_id,
            task_type=self.task_type,
            product_id=self.product_id,
            project_id=self.project_id,
            known_steps=tuple(
                c.KnownStep(s.step_id, s.operation_code, s.display_name, s.expected_producer, s.failure_policy)
                for s in self.known_steps
            ),
            dynamic_registration_policy=self.dynamic_registration_policy.policy()
            if self.dynamic_registration_policy
            else None,
            external_refs=tuple((r.ref_type, r.ref_value) for r in self.external_refs),
        )


TemporalName = Annotated[str, StringConstraints(min_length=1, max_length=255, pattern=r"^[^\x00-\x1f\x7f]+$")]


RunId = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9-]+$")]


class TemporalOwnerIn(Strict):
    """The Temporal run that owns tasks: when it closes, Temporal's verdict ends them."""

    namespace: TemporalName
    workflow_id: TemporalName
    run_id: RunId | None = None
    # The run this one retries (a cron run's retry): the open work that run owns is adopted.
    continues_run_id: RunId | None = None

    def command(self) -> c.TemporalOwner:
        return c.TemporalOwner(self.namespace, self.workflow_id, self.run_id, self.continues_run_id)


class CreateWorkflowIn(Strict):
    client_workflow_key: Key
    owner_id: PrincipalId
    title: Title
    workflow_type: Key | None = None
    initial_tasks: list[NewTaskIn] = Field(default_factory=list, max_length=100)
    dynamic_registration_policy: DynamicPolicyIn | None = None
    temporal_owner: TemporalOwnerIn | None = None

    def command(self) -> c.CreateWorkflow:
        return c.CreateWorkflow(
            client_workflow_key=self.client_workflow_key,
            owner_id=self.owner_id,
            title=self.title,
            workflow_type=self.workflow_type,
            initial_tasks=tuple(t.command() for t in self.initial_tasks),
            dynamic_registration_policy=self.dynamic_registration_policy.policy()
            if self.dynamic_registration_policy
            else None,
            temporal_owner=self.temporal_owner.command() if self.temporal_owner else None,
        )


UserMessage = Annotated[str, StringConstraints(max_length=512)]


class ErrorIn(Strict):
    """The error object of design D6.1; ``userMessage`` is redacted before anyone sees it, ``diagnosticsRef``
    is kept for operators and never appears in a projection or read API."""

    category: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    code: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    retryable: bool | None = None
    user_message: UserMessage | None = None
    diagnostics_ref: Annotated[str, StringConstraints(max_length=255)] | None = None
    message: UserMessage | None = Field(
        default=None, description="Deprecated: use userMessage.", json_schema_extra={"deprecated": True}
    )

    @model_validator(mode="after")
    def _one_message(self) -> ErrorIn:
        if self.user_message is not None and self.message is not None:
            raise ValueError("send userMessage only (message is its deprecated name)")
        return self

    def domain(self) -> StepError:
        text = self.user_message if self.user_message is not None else self.message
        return StepError(self.category, self.code, text or "", self.retryable, self.diagnostics_ref)


class CorrectionIn(Strict):
    """An operator's correction of a task (no stepId) or of one step attempt (an operator's command, design D6)."""

    correction_id: Key
    operator_id: Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[^\s\x00-\x1f]+$")]
    reason: Annotated[str, StringConstraints(min_length=1, max_length=500)]
    step_id: Key | None = None
    attempt: int | None = Field(default=None, ge=1, le=10_000)
    lifecycle_status: Literal["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"] | None = None
    business_status: ShortKey | None = None
    error: ErrorIn | None = None
    expected_task_version: Annotated[str, StringConstraints(pattern=r"^[0-9]{1,19}$")] | None = None


class ClassifyIn(Strict):
    product_id: ShortKey | None = None
    task_type: Key | None = None
    status_definition_version: int | None = Field(default=None, ge=1, le=1_000_000)


class AclIn(Strict):
    permission: Literal["VIEW", "OPERATE", "ADMIN"] = "VIEW"


class BatchGetIn(Body):
    model_config = ConfigDict(extra="forbid")

    taskIds: list[Key] = Field(min_length=1, max_length=100)
    knownVersions: dict[Key, Annotated[str, StringConstraints(pattern=r"^[0-9]{1,19}$")]] = Field(
        default_factory=dict, max_length=100
    )


class WorkflowBatchGetIn(Body):
    model_config = ConfigDict(extra="forbid")

    workflowIds: list[Key] = Field(min_length=1, max_length=100)


class SubscriptionIn(Body):
    model_config = ConfigDict(extra="forbid")

    taskId: Key | None = None
    workflowId: Key | None = None
    projectId: PrincipalId | None = None
    broadcast: Literal["tenant", "system"] | None = None


class BroadcastIn(Strict):
    broadcast_id: Key
    audience: Literal["SYSTEM", "TENANT", "PROJECT", "USERS"]
    level: Literal["INFO", "WARNING", "ERROR"] = "INFO"
    text: Annotated[str, StringConstraints(min_length=1, max_length=500)]
    project_id: PrincipalId | None = None
    user_ids: list[PrincipalId] = Field(default_factory=list, max_length=100_000)


class ReleaseIn(Body):
    model_config = ConfigDict(extra="forbid")

    channel: Annotated[str, StringConstraints(min_length=3, max_length=255)]


class MarkReadIn(Body):
    """Mark some notifications read (``ids``) or all of them (``all``: true)."""

    model_config = ConfigDict(extra="forbid")

    ids: list[Annotated[str, StringConstraints(min_length=1, max_length=200)]] | None = Field(
        default=None, min_length=1, max_length=200
    )
    all: bool = False

    @model_validator(mode="after")
    def _one_of(self) -> MarkReadIn:
        if (self.ids is None) == (not self.all):
            raise ValueError("send either ids or all: true")
        return self


class WatchSetIn(Body):
    model_config = ConfigDict(extra="forbid")

    sessionId: Annotated[str, StringConstraints(min_length=8, max_length=64, pattern=r"^[A-Za-z0-9-]+$")]
    taskIds: list[Key] = Field(default_factory=list, max_length=100)


# A browser reports at most this much per report; values out of range are refused, not clamped.
_Count = Annotated[int, Field(ge=0, le=1_000_000)]
_Seconds = Annotated[float, Field(ge=0.0, le=86_400.0, allow_inf_nan=False)]


class ClientCountersIn(Body):
    """What one page saw since its last report."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    connects: _Count = 0
    reconnects: _Count = 0
    recovered_false: _Count = 0  # a reconnect whose history could not fill the gap (snapshots then)
    snapshots: _Count = 0
    unknown_messages: _Count = 0  # messages of a kind or schemaVersion this client does not know
    snapshot_failures: _Count = 0  # snapshot reads that failed (each retried with backoff)
    unknown_operations: _Count = 0  # operationCodes shown only as the generic card (each once a page)
    unknown_schemas: _Count = 0  # the same, of data.schema


class ClientTelemetryIn(Body):
    """A page's realtime health since its last report (design D12: what operators cannot see otherwise)."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    counters: ClientCountersIn = Field(default_factory=ClientCountersIn)
    # How long each snapshot load took, and commit → shown for each live message (asOf to render,
    # corrected for the browser's clock offset).
    snapshot_seconds: list[_Seconds] = Field(default_factory=list, max_length=100)
    commit_to_visible_seconds: list[_Seconds] = Field(default_factory=list, max_length=500)
    transport: Literal["websocket", "http_stream", "sse"] | None = None
