"""Whether a step event may change its step at all (design D8.1, D8.2; design D4): the checks between
the event's binding and its state change, as one pure decision.

The application has found the task, the step attempt and what the event's credential binds, and
has answered a retry from its dedup entry; what is left is decided here, from the stored state,
the binding, the event's own facts and the time passed in. A refusal is a typed domain error
with the contract's code; an admitted event comes back as the ``StepEvent`` the state machine
(``rules.apply_step_event``) takes, with the sequence it is applied under.

The order is part of the contract: a credential problem first (its code is what a worker acts on),
then whether the event is the current attempt's and execution's, then who may say what, and the
event's age last — only an event that would otherwise be applied is refused for being old.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from status.domain.auth import Role, ServicePrincipal
from status.domain.errors import Conflict, DomainError, ErrorCode, Forbidden
from status.domain.lifecycle import EventType
from status.domain.model import StepState, TaskState
from status.domain.retention import check_event_age
from status.domain.rules import StepEvent

# The producer Temporal's own record speaks as (the observer's run follower and completion
# watch): its verdict on an attempt is the truth however late it is read, and it follows
# whatever the attempt's producer sent.
TEMPORAL_VERDICT = "temporal/verdict"


@dataclass(frozen=True)
class Binding:
    """What an event's credential binds (an execution token's claims, a handle's row, or the
    names a reconciler or health checker gives), and the credential's problem if it has one
    (revoked, expired: refused only after dedup, so a retry still gets its first answer)."""

    execution_id: str | None
    producer_id: str
    operation_code: str | None
    allowed_event_types: frozenset[str] | None
    problem: DomainError | None = None

    @property
    def from_temporal(self) -> bool:
        return self.producer_id == TEMPORAL_VERDICT


def check_envelope(
    task: TaskState,
    step: StepState,
    *,
    workflow_id: str | None = None,
    operation_code: str | None = None,
    task_type: str | None = None,
) -> None:
    """What a body says of its task and step must be what they are (design D3.2, D18): a compact
    handle binds the execution, and the envelope's other fields may not claim something else.

    Checked before the eventId's dedup entry is consulted: these name facts that never change
    (the task's workflow and type, the step's operation), so a retry of an accepted event names
    the same ones or is refused; a body that claims another task's facts is never answered as a
    duplicate of this one's event."""
    if workflow_id is not None and workflow_id != task.workflow_id:
        raise Forbidden("workflowId does not match the execution's task", ErrorCode.PERMISSION_DENIED)
    if operation_code is not None and operation_code != step.operation_code:
        raise Forbidden("operationCode does not match the step", ErrorCode.OPERATION_MISMATCH)
    if task_type is not None and task_type != task.task_type:
        raise Forbidden("taskType does not match the task", ErrorCode.PERMISSION_DENIED)


def task_event_speaker(caller: object, event_type: EventType, *, producer_id: str | None) -> bool:
    """Who may end a task (design D8.4), given the event's credential (a service principal; an execution's
    claims never may): the Coordinator, or Temporal's verdict (the RECONCILER role: the
    run that owned the task has closed), the only one that sees a run time out. True when the
    event is Temporal's verdict (the truth however late it is read), False for the Coordinator's;
    refused for anyone else, and for a body that names another producer than its credential."""
    verdict = isinstance(caller, ServicePrincipal) and caller.has(Role.RECONCILER)
    coordinator = isinstance(caller, ServicePrincipal) and caller.has(Role.COORDINATOR)
    if not (verdict or coordinator) or (event_type is EventType.TASK_TIMED_OUT and not verdict):
        needed = "RECONCILER" if event_type is EventType.TASK_TIMED_OUT else "COORDINATOR"
        raise Forbidden(f"{event_type} needs the {needed} role", ErrorCode.EVENT_TYPE_NOT_ALLOWED)
    assert isinstance(caller, ServicePrincipal)
    if producer_id is not None and producer_id != caller.producer_id:
        raise Forbidden("producerId does not match the credential", ErrorCode.PRODUCER_MISMATCH)
    return verdict


@dataclass(frozen=True)
class Limits:
    """How old (or how far ahead of the service's clock) an event may be (None: no bound)."""

    max_age: timedelta | None = None
    max_skew: timedelta | None = None


def admit_step_event(  # noqa: C901
    task: TaskState,
    step: StepState,
    binding: Binding,
    event: StepEvent,
    *,
    task_attempt: int | None,
    now: datetime,
    limits: Limits,
) -> StepEvent:
    """The event as the state machine applies it (sequenced, marked Temporal's when it is), or the
    refusal that stops it. ``event`` is the report as sent, under its binding's producer;
    ``task_attempt`` the task attempt its body names, if any.

    Refusals, in order: the credential's own problem; a ``taskAttempt`` that is not the task's
    (STALE_ATTEMPT); an execution that is not the step's current one (STALE_EXECUTION); an
    attempt a newer one superseded (STALE_ATTEMPT: an old attempt never changes anything); a
    producer that does not own the execution (PRODUCER_MISMATCH), an operation that is not the
    step's (OPERATION_MISMATCH), an event type its token does not allow (EVENT_TYPE_NOT_ALLOWED);
    an event too old or too far ahead (EVENT_TOO_OLD, EVENT_IN_FUTURE).

    Temporal's verdict and health changes speak for no producer: they skip the producer checks,
    and are sequenced by the step itself (after whatever the producer sent), not by the report.
    """
    if binding.problem is not None:
        raise binding.problem
    if task_attempt is not None and task_attempt != task.attempt:
        raise Conflict(f"taskAttempt {task_attempt} is not the task's attempt", ErrorCode.STALE_ATTEMPT)
    if step.execution_id != binding.execution_id:
        raise Conflict("the execution is not the current one for this step", ErrorCode.STALE_EXECUTION)
    if step.superseded:
        raise Conflict("a newer attempt of this step exists", ErrorCode.STALE_ATTEMPT)
    health_event = event.event_type is EventType.STEP_HEALTH_CHANGED
    if not health_event and not binding.from_temporal:
        if step.producer_id != binding.producer_id:
            raise Forbidden("the producer does not own this execution", ErrorCode.PRODUCER_MISMATCH)
        if binding.operation_code is not None and step.operation_code != binding.operation_code:
            raise Forbidden("the operation does not match the step", ErrorCode.OPERATION_MISMATCH)
        allowed = binding.allowed_event_types
        if allowed is not None and event.event_type.value not in allowed:
            raise Forbidden(
                f"{event.event_type} is not allowed by the execution token", ErrorCode.EVENT_TYPE_NOT_ALLOWED
            )
    if health_event:
        source_seq = step.version + 1
    elif binding.from_temporal:  # its own later reports then meet a terminal step
        source_seq = step.source_seq + 1
    else:
        source_seq = event.source_seq
    if not binding.from_temporal:  # Temporal's verdict is the truth however late it is read
        check_event_age(event.occurred_at, now, limits.max_age, limits.max_skew)
    return replace(event, source_seq=source_seq, producer_id=binding.producer_id, from_temporal=binding.from_temporal)
