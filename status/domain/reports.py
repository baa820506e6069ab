"""A report before its task's state is asked (design D8.1, D8.4; design D4): what kind of event it is,
which execution or task it speaks for, and whether it repeats an event already answered.

The application reads what these decisions need (the handle rows a group names, the task's row,
the eventId's dedup entry) and calls them in design D8.1's order; everything they decide is decided here,
from the report's own fields, the caller's credential and the time passed in. What the state
machine then does with an admitted event is ``admission`` and ``rules``.

The trap is the order. A refusal that depends only on the body (an unknown event type, a key that
is not printable, data over the limit) comes first, before any row is read. Then the binding: the
body's identity fields must be what the credential binds — a mismatch is refused, but a revoked
or expired credential is only *noted* (``Binding.problem``), because a retry of an event accepted
before the revocation must still get its first answer from the dedup entry, which is consulted
after the binding and before the problem is raised (``admission.admit_step_event``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, Protocol

from status.domain import ids
from status.domain.admission import TEMPORAL_VERDICT, Binding, Limits
from status.domain.auth import ExecutionClaims, Role, ServicePrincipal, StoredHandle
from status.domain.errors import DomainError, ErrorCode, Forbidden, Invalid, NotFound, TooLarge
from status.domain.idempotency import first_answer
from status.domain.lifecycle import TASK_EVENT_TYPES, WORKER_EVENT_TYPES, EventType, Health
from status.domain.retention import check_event_age
from status.domain.rules import DataBody, bound_fields_match

# Timeline entries the service writes itself are named sys:<taskId>:<version>; no producer's
# eventId may start so, so the two can never collide.
SERVICE_EVENT_PREFIX = "sys:"
# The producer a health checker's step events speak as (it names the execution it judged).
HEALTH_PRODUCER = "task-status/health"
KEY_LIMIT = 128
_SPACE_OR_CONTROL = re.compile(r"[\s\x00-\x1f]")
# The endings Temporal's record can tell of an attempt: completed, failed, timed out, cancelled.
TEMPORAL_STEP_ENDINGS = frozenset(
    {EventType.STEP_COMPLETED, EventType.STEP_FAILED, EventType.STEP_TIMED_OUT, EventType.STEP_CANCELLED}
)
_HEALTH_EVENTS = (EventType.STEP_HEALTH_CHANGED, EventType.TASK_HEALTH_CHANGED)
_RUN_HEALTH = {Health.STALE.value: True, Health.HEALTHY.value: False}


class Route(Enum):
    """Which decision a report goes on to: a step's, a task's, or its run's health."""

    STEP = "STEP"
    TASK = "TASK"
    RUN_HEALTH = "RUN_HEALTH"


class Envelope(Protocol):
    """The fields of a report that name what it is about (the events command has them all)."""

    @property
    def event_id(self) -> str: ...
    @property
    def event_type(self) -> str: ...
    @property
    def source_seq(self) -> int: ...
    @property
    def occurred_at(self) -> datetime: ...
    @property
    def execution_handle(self) -> str | None: ...
    @property
    def workflow_id(self) -> str | None: ...
    @property
    def task_id(self) -> str | None: ...
    @property
    def task_attempt(self) -> int | None: ...
    @property
    def step_id(self) -> str | None: ...
    @property
    def step_attempt(self) -> int | None: ...
    @property
    def execution_id(self) -> str | None: ...
    @property
    def operation_code(self) -> str | None: ...
    @property
    def producer_id(self) -> str | None: ...
    @property
    def health(self) -> str | None: ...
    @property
    def data(self) -> DataBody | None: ...
    @property
    def summary(self) -> DataBody | None: ...


def check_key(name: str, value: str, limit: int = KEY_LIMIT) -> None:
    """An identifier a caller chose: 1 to ``limit`` characters, none of them space or control."""
    if not value or len(value) > limit or _SPACE_OR_CONTROL.search(value):
        raise Invalid(f"{name} must be 1–{limit} printable characters without spaces")


def route_of(report: Envelope, *, max_data_bytes: int) -> tuple[EventType, Route]:
    """The report's event type and where it goes, or the refusal its body alone earns.

    Refusals, in order: an unknown event type; an eventId that is not a key, or that names the
    service's own entries; a sourceSeq below 1 (health changes carry none of their own); data or
    summary larger than ``max_data_bytes`` once encoded (TOO_LARGE: the event log keeps it); an
    event type no one reports (the service's own, such as an activation)."""
    try:
        event_type = EventType(report.event_type)
    except ValueError as exc:
        raise Invalid(f"unknown eventType {report.event_type!r}") from exc
    check_key("eventId", report.event_id)
    if report.event_id.startswith(SERVICE_EVENT_PREFIX):
        raise Invalid(f"eventIds starting with {SERVICE_EVENT_PREFIX!r} name the service's own entries")
    if report.source_seq < 1 and event_type not in _HEALTH_EVENTS:
        raise Invalid("sourceSeq must be >= 1")
    for body in (report.data, report.summary):
        if body is not None and len(json.dumps(body.value, default=str)) > max_data_bytes:
            raise TooLarge(f"data is larger than {max_data_bytes} bytes; send a resultRef instead")
    if event_type is EventType.TASK_HEALTH_CHANGED:
        return event_type, Route.RUN_HEALTH
    if event_type in TASK_EVENT_TYPES:
        return event_type, Route.TASK
    if event_type not in {*WORKER_EVENT_TYPES, EventType.STEP_HEALTH_CHANGED}:
        raise Invalid(f"{event_type} cannot be reported")
    return event_type, Route.STEP


@dataclass(frozen=True)
class BoundStep:
    """The step attempt a step event speaks for, in the caller's tenant and scope, and what its
    credential binds (with the credential's problem, if it has one: raised after dedup)."""

    task_id: str
    step_id: str
    step_attempt: int
    tenant_id: str
    authority_scope: str
    binding: Binding


def bind_step_event(  # noqa: C901
    report: Envelope,
    event_type: EventType,
    caller: ExecutionClaims | ServicePrincipal,
    *,
    handles: Mapping[str, StoredHandle],
    revoked_now: Mapping[str, str],
    now: datetime,
) -> BoundStep:
    """The execution a step event is bound to: its token's claims, the names a health checker or
    Temporal's verdict gives, or its handle's stored row (``handles``: by hash, as the group read
    them; ``revoked_now``: executions whose handles this transaction revoked, with why).

    Body fields the credential binds must match it exactly; ``taskId`` alone is never enough
    (design P4, P10). A revoked or expired handle is the binding's ``problem``, not a refusal here."""
    if isinstance(caller, ExecutionClaims):
        if event_type is EventType.STEP_HEALTH_CHANGED:
            raise Forbidden("health changes come from the health role only", ErrorCode.EVENT_TYPE_NOT_ALLOWED)
        if report.execution_handle is not None:
            raise Invalid("send either an execution token or an executionHandle, not both")
        _match(
            report,
            caller.task_id,
            caller.step_id,
            caller.step_attempt,
            caller.execution_id,
            caller.producer_id,
            operation_code=caller.operation_code,
            workflow_id=caller.workflow_id,
        )
        return BoundStep(
            caller.task_id,
            caller.step_id,
            caller.step_attempt,
            caller.tenant_id,
            caller.authority_scope,
            Binding(caller.execution_id, caller.producer_id, caller.operation_code, caller.allowed_event_types),
        )
    if event_type is EventType.STEP_HEALTH_CHANGED:
        if not caller.has(Role.HEALTH):
            raise Forbidden("STEP_HEALTH_CHANGED needs the HEALTH role", ErrorCode.EVENT_TYPE_NOT_ALLOWED)
        return _named(report, caller, HEALTH_PRODUCER, "health events")
    if event_type in TEMPORAL_STEP_ENDINGS and report.execution_handle is None and caller.has(Role.RECONCILER):
        # Temporal's record of an activity that ended while its report never came (a lost outbox).
        return _named(report, caller, TEMPORAL_VERDICT, "Temporal's verdict on a step")
    if report.execution_handle is None:
        raise Invalid("step events need an execution token or an executionHandle")
    handle = handles.get(ids.handle_hash(report.execution_handle))
    if handle is None:
        raise Forbidden("the execution handle is not valid", ErrorCode.TOKEN_REVOKED)
    if handle.producer_id != caller.producer_id:
        raise Forbidden("the handle belongs to another producer", ErrorCode.PRODUCER_MISMATCH)
    execution_id = handle.execution_id
    _match(report, handle.task_id, handle.step_id, handle.step_attempt, execution_id, handle.producer_id)
    problem: DomainError | None = None
    revoked = handle.revoke_reason if handle.revoked_at is not None else None
    revoked = revoked or revoked_now.get(execution_id)
    if revoked is not None:
        problem = Forbidden(f"the execution handle was revoked ({revoked})", ErrorCode.TOKEN_REVOKED)
    elif handle.expires_at <= now:
        problem = Forbidden("the execution handle has expired", ErrorCode.TOKEN_EXPIRED)
    return BoundStep(
        handle.task_id,
        handle.step_id,
        handle.step_attempt,
        caller.tenant_id,
        caller.authority_scope,
        Binding(execution_id, handle.producer_id, None, None, problem),
    )


def _named(report: Envelope, caller: ServicePrincipal, producer: str, what: str) -> BoundStep:
    """An event of the service's own roles, which names its execution instead of holding a handle."""
    if report.task_id is None or report.step_id is None or report.step_attempt is None or report.execution_id is None:
        raise Invalid(f"{what} name taskId, stepId, stepAttempt and executionId")
    return BoundStep(
        report.task_id,
        report.step_id,
        report.step_attempt,
        caller.tenant_id,
        caller.authority_scope,
        Binding(report.execution_id, producer, None, None),
    )


def _match(
    report: Envelope,
    task_id: str,
    step_id: str,
    step_attempt: int,
    execution_id: str,
    producer_id: str,
    *,
    operation_code: str | None = None,
    workflow_id: str | None = None,
) -> None:
    """What the body names must be what the credential binds (a field the credential does not
    bind — a handle's operation and workflow — is checked against the task later)."""
    if report.task_id is not None and report.task_id != task_id:
        raise Forbidden("taskId does not match the execution context", ErrorCode.PERMISSION_DENIED)
    if report.step_id is not None and report.step_id != step_id:
        raise Forbidden("stepId does not match the execution context", ErrorCode.PERMISSION_DENIED)
    bound: dict[str, Any] = {
        "stepAttempt": step_attempt,
        "executionId": execution_id,
        "producerId": producer_id,
    }
    if workflow_id is not None:
        bound["workflowId"] = workflow_id
    if operation_code is not None:
        bound["operationCode"] = operation_code
    bound_fields_match(
        bound,
        {
            "workflowId": report.workflow_id,
            "stepAttempt": report.step_attempt,
            "executionId": report.execution_id,
            "operationCode": report.operation_code,
            "producerId": report.producer_id,
        },
    )


def task_report_target(report: Envelope) -> tuple[str, int]:
    """The task and attempt a task event names (after ``admission.task_event_speaker`` said the
    caller may send it): both are required, a token never names a task for it."""
    if report.task_id is None or report.task_attempt is None:
        raise Invalid("task events need taskId and taskAttempt")
    return report.task_id, report.task_attempt


def check_task_workflow(report: Envelope, task_id: str, workflow_id: str) -> None:
    """A task event naming a workflow must name the task's own: to any other workflow the task
    does not exist (checked before dedup, like a step event's envelope)."""
    if report.workflow_id is not None and report.workflow_id != workflow_id:
        raise NotFound(f"task {task_id} is not in workflow {report.workflow_id}", ErrorCode.UNKNOWN_TASK)


def admit_task_report(report: Envelope, *, verdict: bool, now: datetime, limits: Limits) -> None:
    """What is left to refuse of a task event that is not a repeat: summary data (not taken on
    task events yet), and an event too old or too far ahead — unless it is Temporal's verdict
    (a run that closed), the truth however late it is read."""
    if report.summary is not None:
        raise Invalid("summary data is not accepted on task events yet", ErrorCode.SCHEMA_REJECTED)
    if not verdict:
        check_event_age(report.occurred_at, now, limits.max_age, limits.max_skew)


def run_health_target(report: Envelope, caller: ExecutionClaims | ServicePrincipal) -> tuple[str, bool]:
    """The task whose run Temporal reports stuck (True) or moving again (False): the observer's
    word alone (RECONCILER), never a producer's."""
    if not (isinstance(caller, ServicePrincipal) and caller.has(Role.RECONCILER)):
        raise Forbidden("TASK_HEALTH_CHANGED needs the RECONCILER role", ErrorCode.EVENT_TYPE_NOT_ALLOWED)
    stuck = _RUN_HEALTH.get(report.health or "")
    if report.task_id is None or stuck is None:
        raise Invalid("TASK_HEALTH_CHANGED needs taskId and health STALE or HEALTHY")
    return report.task_id, stuck


def repeat_of(fingerprint: str, first: tuple[str, Mapping[str, Any]] | None) -> dict[str, Any] | None:
    """The answer to an event whose (tenant, eventId) was answered before (``first``: that
    answer's fingerprint and result), or None for a new event. The same content is the first
    answer again, marked a duplicate — one change however often it is sent; other content under
    the same eventId is refused (EVENT_ID_CONFLICT), never applied as a new event."""
    return first_answer(fingerprint, first, name="eventId", conflict=ErrorCode.EVENT_ID_CONFLICT)
