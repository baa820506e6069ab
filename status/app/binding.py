"""Which execution an event is bound to (SPEC §3, R1's "resolve handle/token"; AC4, AC10).

Body fields an execution token or handle binds must match exactly; ``taskId``
alone is never enough.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from status.app import commands as c
from status.app.context import HEALTH_PRODUCER, RUN_PRODUCER, EventCaller
from status.domain import ids
from status.domain.auth import ExecutionClaims, Role, ServicePrincipal
from status.domain.errors import DomainError, ErrorCode, Forbidden, Invalid
from status.domain.lifecycle import EventType
from status.domain.rules import bound_fields_match

# The endings Temporal's record can tell of an attempt: completed, failed, timed out, cancelled.
TEMPORAL_STEP_ENDINGS = frozenset(
    {EventType.STEP_COMPLETED, EventType.STEP_FAILED, EventType.STEP_TIMED_OUT, EventType.STEP_CANCELLED}
)


@dataclass(frozen=True)
class Bound:
    """The execution an event is bound to, and any credential problem found (raised after dedup)."""

    task_id: str
    step_id: str | None
    step_attempt: int | None
    execution_id: str | None
    producer_id: str
    operation_code: str | None
    tenant_id: str
    authority_scope: str
    allowed_event_types: frozenset[str] | None
    credential_problem: DomainError | None = None


def resolve_binding(
    handles: dict[str, Any],
    revoked_now: dict[str, str],
    caller: EventCaller,
    cmd: c.ReportEvent,
    event_type: EventType,
    now: datetime,
) -> Bound:
    """The execution an event is bound to, from its token's claims, a health caller's names or its handle.

    ``handles``: the group's handle rows by hash; ``revoked_now``: executions whose
    handles this transaction revoked.  A credential problem (revoked, expired) is
    returned, not raised: R1 checks dedup first, so a retried event still gets its
    first result.
    """
    claimed = {
        "taskId": cmd.task_id,
        "workflowId": cmd.workflow_id,
        "stepId": cmd.step_id,
        "stepAttempt": cmd.step_attempt,
        "executionId": cmd.execution_id,
        "operationCode": cmd.operation_code,
        "producerId": cmd.producer_id,
    }
    if isinstance(caller, ExecutionClaims):
        if event_type is EventType.STEP_HEALTH_CHANGED:
            raise Forbidden("health changes come from the health role only", ErrorCode.EVENT_TYPE_NOT_ALLOWED)
        if cmd.execution_handle is not None:
            raise Invalid("send either an execution token or an executionHandle, not both")
        _match(
            {
                "taskId": caller.task_id,
                "workflowId": caller.workflow_id,
                "stepId": caller.step_id,
                "stepAttempt": caller.step_attempt,
                "executionId": caller.execution_id,
                "operationCode": caller.operation_code,
                "producerId": caller.producer_id,
            },
            claimed,
        )
        return Bound(
            task_id=caller.task_id,
            step_id=caller.step_id,
            step_attempt=caller.step_attempt,
            execution_id=caller.execution_id,
            producer_id=caller.producer_id,
            operation_code=caller.operation_code,
            tenant_id=caller.tenant_id,
            authority_scope=caller.authority_scope,
            allowed_event_types=caller.allowed_event_types,
        )
    if event_type is EventType.STEP_HEALTH_CHANGED:
        if not caller.has(Role.HEALTH):
            raise Forbidden("STEP_HEALTH_CHANGED needs the HEALTH role", ErrorCode.EVENT_TYPE_NOT_ALLOWED)
        return _named(cmd, caller, HEALTH_PRODUCER, "health events")
    if event_type in TEMPORAL_STEP_ENDINGS and cmd.execution_handle is None and caller.has(Role.RECONCILER):
        # Temporal's record of an activity that ended while its report never came (a lost outbox).
        return _named(cmd, caller, RUN_PRODUCER, "Temporal's verdict on a step")
    if cmd.execution_handle is None:
        raise Invalid("step events need an execution token or an executionHandle")
    handle = handles.get(ids.handle_hash(cmd.execution_handle))
    if handle is None:
        raise Forbidden("the execution handle is not valid", ErrorCode.TOKEN_REVOKED)
    if handle["producer_id"] != caller.producer_id:
        raise Forbidden("the handle belongs to another producer", ErrorCode.PRODUCER_MISMATCH)
    _match(
        {
            "taskId": handle["task_id"],
            "stepId": handle["step_id"],
            "stepAttempt": handle["step_attempt"],
            "executionId": handle["execution_id"],
            "producerId": handle["producer_id"],
        },
        claimed,
    )
    problem: DomainError | None = None
    revoked = handle["revoke_reason"] if handle["revoked_at"] is not None else None
    revoked = revoked or revoked_now.get(handle["execution_id"])
    if revoked is not None:
        problem = Forbidden(f"the execution handle was revoked ({revoked})", ErrorCode.TOKEN_REVOKED)
    elif handle["expires_at"] <= now:
        problem = Forbidden("the execution handle has expired", ErrorCode.TOKEN_EXPIRED)
    return Bound(
        task_id=handle["task_id"],
        step_id=handle["step_id"],
        step_attempt=handle["step_attempt"],
        execution_id=handle["execution_id"],
        producer_id=handle["producer_id"],
        operation_code=None,
        tenant_id=caller.tenant_id,
        authority_scope=caller.authority_scope,
        allowed_event_types=None,
        credential_problem=problem,
    )


def _named(cmd: c.ReportEvent, caller: ServicePrincipal, producer: str, what: str) -> Bound:
    """An event of the service's own roles, which names its execution instead of holding a handle."""
    if cmd.task_id is None or None in (cmd.step_id, cmd.step_attempt, cmd.execution_id):
        raise Invalid(f"{what} name taskId, stepId, stepAttempt and executionId")
    return Bound(
        task_id=cmd.task_id,
        step_id=cmd.step_id,
        step_attempt=cmd.step_attempt,
        execution_id=cmd.execution_id,
        producer_id=producer,
        operation_code=None,
        tenant_id=caller.tenant_id,
        authority_scope=caller.authority_scope,
        allowed_event_types=None,
    )


def _match(bound: dict[str, Any], claimed: dict[str, Any]) -> None:
    if claimed.get("taskId") is not None and claimed["taskId"] != bound.get("taskId"):
        raise Forbidden("taskId does not match the execution context", ErrorCode.PERMISSION_DENIED)
    if claimed.get("stepId") is not None and claimed["stepId"] != bound.get("stepId"):
        raise Forbidden("stepId does not match the execution context", ErrorCode.PERMISSION_DENIED)
    bound_fields_match(bound, {k: v for k, v in claimed.items() if k not in ("taskId", "stepId")})
