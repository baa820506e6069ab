"""Whether and how a dynamic step execution is registered (design D8.9R9): pure decisions over
the task's stored attempts, its registration policy and the operation's definition, with the
time and the new execution's id passed in.

The trap is the order. The same registration (clientStepKey and attempt) sent again is answered
as it was bound, before anything is counted: the policy limits what a registration *adds*, and a
repeat adds nothing — counting it would refuse the retry of a registration that was accepted,
once the task reached its limit. Only a new registration is checked, in this order: its task (not
ended: its end ended the task's attempts, and a registration arriving after it — a worker's report
overtaken by the run's ending — would show a step waiting after the work stopped), its parent
(an execution of this task that is still running), the task's policy (operations, depth, counts,
rate), the operation's definition, producer and failure policy, and that its attempt is newer than any the
step has.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from status.domain import ids
from status.domain.attempts import superseded_attempt
from status.domain.definitions import (
    DynamicRegistrationPolicy,
    FailurePolicy,
    OperationDefinition,
    StatusDefinitionSet,
    defined_operation,
)
from status.domain.errors import Conflict, ErrorCode, Invalid, NotFound
from status.domain.lifecycle import Lifecycle
from status.domain.model import StepState, TaskState, evolve

# Dynamic steps are shown after the known ones, in the order they were registered.
DYNAMIC_ORDER_BASE = 10_000


class Registering(Protocol):
    """What a registration asks (the registration command has these fields)."""

    @property
    def client_step_key(self) -> str: ...
    @property
    def operation_code(self) -> str: ...
    @property
    def producer_id(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def parent_execution_id(self) -> str | None: ...
    @property
    def display_name(self) -> str | None: ...
    @property
    def failure_policy(self) -> str | None: ...
    @property
    def heartbeat_interval_seconds(self) -> int | None: ...
    @property
    def heartbeat_timeout_seconds(self) -> int | None: ...


def registered_before(steps: Sequence[StepState], ask: Registering) -> StepState | None:
    """The attempt this very registration created before (its clientStepKey and attempt), to be
    bound again as it was; None for a new one. The same key and attempt with another operation,
    producer or parent is refused (IDEMPOTENCY_CONFLICT), never a second step."""
    existing = next((s for s in steps if s.client_step_key == ask.client_step_key and s.attempt == ask.attempt), None)
    if existing is not None and (existing.operation_code, existing.producer_id, existing.parent_execution_id) != (
        ask.operation_code,
        ask.producer_id,
        ask.parent_execution_id,
    ):
        raise Conflict("clientStepKey was registered with different content", ErrorCode.IDEMPOTENCY_CONFLICT)
    return existing


@dataclass(frozen=True)
class Registration:
    """A new registration decided: the task at its next version, the new attempt (PENDING, its
    execution not bound yet), the step's earlier attempts it supersedes (before, after), and the
    operation's definition it is registered under."""

    task: TaskState
    step: StepState
    superseded: tuple[tuple[StepState, StepState], ...]
    operation: OperationDefinition


@dataclass(frozen=True)
class HeartbeatDefaults:
    """The service's heartbeat interval and timeout for an execution that names none."""

    interval_seconds: int
    timeout_seconds: int


def decide_registration(
    task: TaskState,
    steps: Sequence[StepState],
    ask: Registering,
    *,
    policy: DynamicRegistrationPolicy,
    operations: Iterable[OperationDefinition],
    statuses: StatusDefinitionSet,
    heartbeats: HeartbeatDefaults,
    execution_id: str,
    now: datetime,
) -> Registration:
    """A registration that is not a repeat (see ``registered_before``), decided over the task's
    stored attempts ``steps``; refused as the module's docstring orders."""
    if task.lifecycle.terminal:
        raise Conflict(f"task {task.task_id} has ended; it takes no new steps", ErrorCode.TERMINAL_STATE)
    parent = None
    if ask.parent_execution_id is not None:
        parent = next((s for s in steps if s.execution_id == ask.parent_execution_id), None)
        if parent is None:
            raise NotFound("parentExecutionId is not an execution of this task", ErrorCode.UNKNOWN_STEP)
        if parent.lifecycle.terminal:
            raise Conflict("the parent execution has finished", ErrorCode.TERMINAL_STATE)
    dynamic = [s for s in steps if s.step_kind == "DYNAMIC"]
    minute_ago = now - timedelta(minutes=1)
    depth = (parent.depth + 1) if parent else 1
    policy.check(
        operation_code=ask.operation_code,
        parent_operation=parent.operation_code if parent else None,
        depth=depth,
        dynamic_steps=len({s.step_id for s in dynamic}),
        running_dynamic=sum(1 for s in dynamic if not s.lifecycle.terminal),
        registered_last_minute=sum(1 for s in dynamic if s.activated_at and s.activated_at >= minute_ago),
    )
    operation = defined_operation(operations, ask.operation_code, task.task_type)
    operation.check_producer(ask.producer_id)
    failure_policy = ask.failure_policy or operation.failure_policy.value
    try:
        FailurePolicy(failure_policy)
    except ValueError as exc:
        raise Invalid(f"unknown failurePolicy {failure_policy!r}") from exc
    step_id = ids.dynamic_step_id(ask.client_step_key)
    if any(s.step_id == step_id and s.attempt >= ask.attempt for s in steps):
        raise Conflict(f"attempt {ask.attempt} of {step_id} is not new", ErrorCode.STALE_ATTEMPT)
    # A newer attempt supersedes the previous ones; an unfinished one times out, so a step never
    # shows two running attempts (as an activation does for known steps).
    earlier = [s for s in steps if s.step_id == step_id and not s.superseded]
    step = StepState(
        task_id=task.task_id,
        step_id=step_id,
        attempt=ask.attempt,
        client_step_key=ask.client_step_key,
        operation_code=ask.operation_code,
        operation_definition_version=operation.version,
        service_name=ask.producer_id,
        lifecycle=Lifecycle.PENDING,
        business_status=statuses.resolve(None, Lifecycle.PENDING, None).code,
        version=1,
        step_kind="DYNAMIC",
        display_name=ask.display_name or operation.display_name,
        step_order=DYNAMIC_ORDER_BASE + len(dynamic),
        parent_execution_id=ask.parent_execution_id,
        depth=depth,
        producer_id=ask.producer_id,
        execution_id=execution_id,
        heartbeat_interval_seconds=ask.heartbeat_interval_seconds or heartbeats.interval_seconds,
        heartbeat_timeout_seconds=ask.heartbeat_timeout_seconds or heartbeats.timeout_seconds,
        activated_at=now,
        failure_policy=failure_policy,
        updated_at=now,
    )
    return Registration(
        task=evolve(task, version=task.version + 1, dynamic_step_count=task.dynamic_step_count + 1, updated_at=now),
        step=step,
        superseded=tuple((s, superseded_attempt(s, statuses, now)) for s in earlier),
        operation=operation,
    )
