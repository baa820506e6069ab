"""Executions: activating attempts of known steps and registering dynamic steps (design D8.9, D4R9).

Each returns the Execution Context with a signed token and a fresh handle; a
newer attempt supersedes the previous one, whose handles are revoked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from status.app import commands as c
from status.app.answers import EventAnswer, refused
from status.app.change import Change, messages_of, write_change
from status.app.context import AppContext, EventCaller, check_heartbeat_settings, operation, require_binder
from status.app.events import EventCommands
from status.app.group import Group
from status.app.ports import UnitOfWork
from status.app.records import ActivityRecord, HandleRecord
from status.app.shard_ports import RouteChanged, ShardGroup
from status.app.shards import MOVING, on_shards, run_for
from status.app.step_cache import TaskView
from status.domain import ids
from status.domain.attempts import decide_activation, lost_attempt, next_attempt, superseded_attempt
from status.domain.auth import ExecutionClaims, ServicePrincipal
from status.domain.definitions import DynamicRegistrationPolicy, OperationDefinition, OperationKey, Severity
from status.domain.errors import DomainError, ErrorCode, Forbidden, Invalid, Unavailable
from status.domain.lifecycle import WORKER_EVENT_TYPES, EventType, Lifecycle
from status.domain.messages import Message
from status.domain.model import StepState, TaskState, evolve
from status.domain.notices import Notice, NoticeKind
from status.domain.projections import iso
from status.domain.registration import HeartbeatDefaults, decide_registration, registered_before
from status.domain.reports import check_key

# What an execution's token lets its worker report (the same for every execution).
_WORKER_EVENTS = frozenset(e.value for e in WORKER_EVENT_TYPES)


@dataclass(frozen=True)
class ExecutionContext:
    """What activation/registration returns (design D4)."""

    workflow_id: str
    task_id: str
    step_id: str
    operation_code: str
    step_attempt: int
    execution_id: str
    producer_id: str
    heartbeat_interval_seconds: int | None
    heartbeat_timeout_seconds: int | None
    execution_token: str
    execution_handle: str
    task_version: int
    step_version: int
    created: bool
    expires_at: datetime
    # The outcome of the STEP_STARTED sent with the binding: its result, or its rejection.
    started: EventAnswer | None = None
    # The outcomes of the further events sent with the binding, in their order.
    events: tuple[EventAnswer, ...] = ()

    def to_json(self) -> dict[str, Any]:
        started = {"startedEvent": self.started} if self.started is not None else {}
        events = {"events": list(self.events)} if self.events else {}
        return (
            started
            | events
            | {
                "workflowId": self.workflow_id,
                "taskId": self.task_id,
                "stepId": self.step_id,
                "operationCode": self.operation_code,
                "stepAttempt": self.step_attempt,
                "executionId": self.execution_id,
                "producerId": self.producer_id,
                "heartbeatIntervalSeconds": self.heartbeat_interval_seconds,
                "heartbeatTimeoutSeconds": self.heartbeat_timeout_seconds,
                "executionToken": self.execution_token,
                "executionHandle": self.execution_handle,
                "taskVersion": str(self.task_version),
                "stepVersion": str(self.step_version),
                "created": self.created,
                "expiresAt": iso(self.expires_at),
            }
        )


@dataclass
class Bound:
    """A binding staged in a group: what it answers, the task's view after it."""

    context: ExecutionContext
    view: TaskView | None  # None: nothing changed


# A binding staged, and the operation definition it froze.
Staged = tuple[Bound, OperationKey | None]
Bindings = Sequence[tuple[EventCaller, c.ActivateStep | c.RegisterExecution]]


class ExecutionCommands:
    def __init__(self, ctx: AppContext, events: EventCommands) -> None:
        self.ctx = ctx
        self.events = events
        self._frozen: set[OperationKey] = set()  # operation definitions known to be frozen (never thaw)

    def _one(
        self, owner: tuple[str, str], task_id: str, stage: Callable[[UnitOfWork, Group, TaskView, datetime], Staged]
    ) -> ExecutionContext:
        """One binding in a transaction of its own."""

        def work(uow: UnitOfWork) -> Staged:
            now = self.ctx.now()
            group = Group()
            self.events.prepare(uow, group, [task_id], set())  # as a group of bindings locks its tasks
            view = self.events.locked(uow, group, task_id, owner)
            bound, frozen = stage(uow, group, view, now)
            self._finish(uow, group)
            return bound, frozen

        bound, frozen = run_for(self.ctx.shards, ids.bucket_hint(task_id), work)
        self._committed([bound], [frozen])
        return bound.context

    def bind_many(self, items: Bindings) -> list[ExecutionContext | BaseException]:
        """Many bindings (activations and registrations, each with its STARTED or not) in one
        transaction per shard: their tasks locked in one statement, their STARTED eventIds probed in one, each
        row written once (a group of bindings is a set, as a group of events is). Each item gets its
        context or its own error; if the transaction fails for a reason that is no item's
        rejection, each runs again alone, so one poison item can't take its neighbours down."""
        checked: list[tuple[str, str] | DomainError] = []
        for caller, cmd in items:
            try:
                if isinstance(cmd, c.ActivateStep):
                    checked.append(self._check_activation(caller, cmd))
                else:
                    checked.append(self._check_registration(caller, cmd))
            except DomainError as err:
                checked.append(err)

        buckets = [ids.bucket_hint(cmd.task_id) for _, cmd in items]
        return on_shards(
            self.ctx.shards,
            buckets,
            lambda shard: self._bind_on(shard, [items[i] for i in shard.indexes], [checked[i] for i in shard.indexes]),
            lambda _: Unavailable(MOVING),
        )

    def _bind_on(
        self, shard: ShardGroup, items: Bindings, checked: Sequence[tuple[str, str] | DomainError]
    ) -> list[ExecutionContext | BaseException]:
        def work(uow: UnitOfWork) -> list[Staged | DomainError]:
            now = self.ctx.now()
            group = Group()
            probe = {(caller.tenant_id, cmd.started.event_id) for caller, cmd in items if cmd.started is not None}
            probe.update((caller.tenant_id, event.event_id) for caller, cmd in items for event in cmd.events)
            self.events.prepare(uow, group, sorted({cmd.task_id for _, cmd in items}), probe)
            staged: list[Staged | DomainError] = []
            for (caller, cmd), owner in zip(items, checked, strict=True):
                if isinstance(owner, DomainError):
                    staged.append(owner)
                    continue
                try:
                    view = self.events.locked(uow, group, cmd.task_id, owner)
                    if isinstance(cmd, c.ActivateStep):
                        assert isinstance(caller, ServicePrincipal)  # _check_activation refused any other
                        bound, frozen = self._stage_activation(uow, group, view, now, caller, cmd)
                    else:
                        bound, frozen = self._stage_registration(uow, group, view, now, caller, cmd)
                except DomainError as err:
                    staged.append(err)
                    continue
                if bound.view is not None:  # the next binding of the same task starts from here
                    group.views[cmd.task_id] = bound.view
                staged.append((bound, frozen))
            self._finish(uow, group)
            return staged

        try:
            staged = self.ctx.shards.run(shard, work)
        except RouteChanged:
            raise
        except Exception:
            return [self._alone(caller, cmd) for caller, cmd in items]
        done = [s for s in staged if not isinstance(s, DomainError)]
        self._committed([b for b, _ in done], [f for _, f in done])
        return [s if isinstance(s, DomainError) else s[0].context for s in staged]

    def _alone(
        self, caller: EventCaller, cmd: c.ActivateStep | c.RegisterExecution
    ) -> ExecutionContext | BaseException:
        try:
            if isinstance(cmd, c.ActivateStep):
                if not isinstance(caller, ServicePrincipal):
                    raise Forbidden("activating a step needs a service credential", ErrorCode.PERMISSION_DENIED)
                return self.activate_step(caller, cmd)
            return self.register_execution(caller, cmd)
        except Exception as exc:  # one item's own failure stays that item's
            return exc

    @staticmethod
    def _finish(uow: UnitOfWork, group: Group) -> None:
        """Write what the bindings staged (each row once, their handles with them), and commit."""
        group.flush(uow)
        uow.commit()

    def _committed(self, bounds: Sequence[Bound], frozen: Sequence[OperationKey | None]) -> None:
        """Once committed, the tasks' views serve the events that follow."""
        for bound in bounds:
            if bound.view is not None:
                self.ctx.steps.put(bound.context.task_id, bound.view)
        self._frozen.update(key for key in frozen if key is not None)

    def activate_step(self, caller: ServicePrincipal, cmd: c.ActivateStep) -> ExecutionContext:
        """Create attempt N of a known step and bind an execution (idempotent per attempt)."""
        return self._one(
            self._check_activation(caller, cmd),
            cmd.task_id,
            lambda uow, group, view, now: self._stage_activation(uow, group, view, now, caller, cmd),
        )

    @staticmethod
    def _check_activation(caller: EventCaller, cmd: c.ActivateStep) -> tuple[str, str]:
        """What an activation must satisfy before any lock; the (tenant, scope) it may touch."""
        check_key("producerId", cmd.producer_id)
        if not isinstance(caller, ServicePrincipal):
            raise Forbidden("activating a step needs a service credential", ErrorCode.PERMISSION_DENIED)
        require_binder(caller, cmd.producer_id)
        if cmd.attempt < 1:
            raise Invalid("attempt must be >= 1")
        check_heartbeat_settings(cmd.heartbeat_interval_seconds, cmd.heartbeat_timeout_seconds)
        return caller.tenant_id, caller.authority_scope

    def _stage_activation(
        self, uow: UnitOfWork, group: Group, view: TaskView, now: datetime, caller: ServicePrincipal, cmd: Any
    ) -> Staged:
        task = view.task
        attempts = view.steps.attempts_of(cmd.step_id)
        activity = _activity_key(cmd.temporal_activity)
        decided = decide_activation(task, attempts, activity, cmd.attempt, cmd.step_id, cmd.producer_id)
        placed, existing, current = decided.placement, decided.placement.existing, attempts[-1]
        if decided.rebind:
            assert existing is not None
            return self._bound(task, existing, view, cmd, created=False, now=now, uow=uow, group=group), None
        defs = self.ctx.definitions_for(uow, task.tenant_id, task.authority_scope)
        op = operation(defs, current.operation_code, task.task_type, current.operation_definition_version)
        op.check_producer(cmd.producer_id)
        statuses = defs.status_set(task.task_type, task.status_definition_version)
        execution_id = ids.new_execution_id(int(now.replace(tzinfo=UTC).timestamp() * 1000))
        changed: list[StepState] = []
        lost: list[StepState] = []
        notice = None
        if existing is None:
            # A newer attempt supersedes the previous one: its late events become STALE_ATTEMPT.
            retried = activity is not None and current.temporal_activity == activity
            changed.append(superseded_attempt(current, statuses, now, retried_by_temporal=retried))
            # Attempts Temporal ran that never reported (a worker died under them): closed as lost.
            lost = [lost_attempt(current, number, statuses, now) for number in placed.lost]
            step = next_attempt(current, placed.attempt, Lifecycle.PENDING, statuses, now)
            notice = Notice(
                f"{task.task_id}:{task.version + 1}",
                NoticeKind.STEP_RETRYING,
                Severity.INFO,
                f"{step.display_name or step.operation_code} is being retried (attempt {placed.attempt})",
                operation_code=step.operation_code,
                step_id=step.step_id,
            )
        else:
            step = existing
        step = evolve(
            step,
            execution_id=execution_id,
            producer_id=cmd.producer_id,
            operation_definition_version=op.version,
            heartbeat_interval_seconds=cmd.heartbeat_interval_seconds or self.ctx.heartbeat_interval_seconds,
            heartbeat_timeout_seconds=cmd.heartbeat_timeout_seconds or self.ctx.heartbeat_timeout_seconds,
            activated_at=now,
            version=step.version + (1 if existing is not None else 0),
            updated_at=now,
            temporal_activity=activity,
            temporal_attempt=cmd.attempt if activity is not None else None,
        )
        before, task = task, evolve(task, version=task.version + 1, updated_at=now)
        # Staged, written once at the end with whatever the STARTED changes: only changed columns
        # (heartbeat columns of the cached state may be older than the rows').
        for prev in changed:
            group.write_step(current, prev)  # superseded: no heartbeat deadline any more
            group.revoke(prev.execution_id, "SUPERSEDED", now)
        for row in lost:
            group.insert_step(row)
        if existing is None:
            group.insert_step(step)
        else:
            group.write_step(existing, step)
        _record_activity(group, step, cmd.temporal_activity)
        group.write_task(before, task)
        frozen = self._freeze_operation(uow, op)
        for changed_step in [*changed, *lost, step]:
            view = view.changed(task, changed_step)
        activated = Change.of_service(
            task,
            view,
            EventType.STEP_ACTIVATED,
            caller.producer_id,
            {"producerId": cmd.producer_id},
            now,
            step=step,
            notice=notice,
            publish=False,
        )
        write_change(self.ctx, uow, group, activated)
        # A retry's notice rides on the activation's own messages: they go out whatever follows.
        bound = self._bound(
            task,
            step,
            view,
            cmd,
            created=True,
            now=now,
            uow=uow,
            group=group,
            messages=lambda: messages_of(self.ctx, uow, group, activated),
            keep=notice is not None,
        )
        return bound, frozen

    def register_execution(self, caller: EventCaller, cmd: c.RegisterExecution) -> ExecutionContext:
        """Register a dynamic step execution (design D8.9R9), idempotent per clientStepKey+attempt."""
        return self._one(
            self._check_registration(caller, cmd),
            cmd.task_id,
            lambda uow, group, view, now: self._stage_registration(uow, group, view, now, caller, cmd),
        )

    @staticmethod
    def _check_registration(caller: EventCaller, cmd: c.RegisterExecution) -> tuple[str, str]:
        """What a registration must satisfy before any lock; the (tenant, scope) it may touch."""
        check_key("clientStepKey", cmd.client_step_key)
        check_key("producerId", cmd.producer_id)
        check_heartbeat_settings(cmd.heartbeat_interval_seconds, cmd.heartbeat_timeout_seconds)
        if cmd.attempt < 1:
            raise Invalid("attempt must be >= 1")
        if isinstance(caller, ServicePrincipal):
            require_binder(caller, cmd.producer_id)
        # A parent execution may register children of itself only.
        elif cmd.parent_execution_id != caller.execution_id or cmd.task_id != caller.task_id:
            raise Forbidden("an execution may only register its own children", ErrorCode.PERMISSION_DENIED)
        return caller.tenant_id, caller.authority_scope

    def _stage_registration(
        self, uow: UnitOfWork, group: Group, view: TaskView, now: datetime, caller: EventCaller, cmd: Any
    ) -> Staged:
        registrar = caller.producer_id
        task = view.task
        steps = list(view.steps.attempts.values())
        existing = registered_before(steps, cmd)
        if existing is not None:
            return self._bound(task, existing, view, cmd, created=False, now=now, uow=uow, group=group), None
        defs = self.ctx.definitions_for(uow, task.tenant_id, task.authority_scope)
        decided = decide_registration(
            task,
            steps,
            cmd,
            policy=DynamicRegistrationPolicy.from_json(uow.tasks.registration_policy(task.task_id)),
            operations=defs.operations,
            statuses=defs.status_set(task.task_type, task.status_definition_version),
            heartbeats=HeartbeatDefaults(self.ctx.heartbeat_interval_seconds, self.ctx.heartbeat_timeout_seconds),
            execution_id=ids.new_execution_id(int(now.replace(tzinfo=UTC).timestamp() * 1000)),
            now=now,
        )
        step = decided.step
        for old, prev in decided.superseded:
            group.write_step(old, prev)
            group.revoke(prev.execution_id, "SUPERSEDED", now)
        group.insert_step(step)
        _record_activity(group, step, cmd.temporal_activity)
        before, task = task, decided.task
        group.write_task(before, task)
        frozen = self._freeze_operation(uow, decided.operation)
        for _, prev in decided.superseded:  # written just above
            view = view.changed(task, prev)
        view = view.changed(task, step)
        registered = Change.of_service(
            task,
            view,
            EventType.STEP_REGISTERED,
            registrar,
            {"parentExecutionId": cmd.parent_execution_id, "producerId": cmd.producer_id},
            now,
            step=step,
            publish=False,
        )
        write_change(self.ctx, uow, group, registered)
        bound = self._bound(
            task,
            step,
            view,
            cmd,
            created=True,
            now=now,
            uow=uow,
            group=group,
            messages=lambda: messages_of(self.ctx, uow, group, registered),
        )
        return bound, frozen

    def _bound(
        self,
        task: TaskState,
        step: StepState,
        view: TaskView,
        cmd: c.ActivateStep | c.RegisterExecution,
        *,
        created: bool,
        now: datetime,
        uow: UnitOfWork,
        group: Group,
        messages: Callable[[], list[Message]] | None = None,
        keep: bool = False,
    ) -> Bound:
        """The execution's context; with ``cmd.started``, its STEP_STARTED applied in the same
        transaction (one commit for a step change instead of two; the event keeps its own
        idempotency), then ``cmd.events`` in order, each with its own answer.

        ``messages``: builds the binding's own messages, called only when they go out. When the
        STARTED lands in the same transaction its messages carry the newer full state of the same
        channels, so the binding's are not built nor published (every message is a full state: a
        channel skipping a version loses nothing; the binding stays in the timeline) — unless
        ``keep`` (they carry a notice)."""
        context, claims, handle = self._context(task, step, now=now, created=created)
        group.issue(handle, new_execution=created)
        result: EventAnswer | None = None
        if messages and (cmd.started is None or keep):
            group.outbox += messages()  # ahead of the STARTED's: a channel's messages go in version order
            messages = None
        if cmd.started is not None:
            result, view = self._apply_riding(uow, group, claims, cmd.started.as_event(), view)
        if messages and not (result is not None and result["accepted"] and not result["duplicate"]):
            group.outbox += messages()  # the STARTED wrote nothing: the binding's own messages go
        answers: list[EventAnswer] = []
        for event in cmd.events:
            answer, view = self._apply_riding(uow, group, claims, event, view)
            answers.append(answer)
        if result is not None or answers:
            context = replace(context, started=result, events=tuple(answers))
        changed = created or cmd.started is not None or bool(cmd.events)
        return Bound(context, view if changed else None)

    def _apply_riding(
        self, uow: UnitOfWork, group: Group, claims: ExecutionClaims, event: c.ReportEvent, view: TaskView
    ) -> tuple[EventAnswer, TaskView]:
        """An event sent with its execution's binding, applied as its handle would have it; its
        answer, and the task's view after it."""
        outcome = self.events.apply_in(uow, group, claims, event, view)
        answer = refused(event.event_id, outcome) if isinstance(outcome, DomainError) else outcome
        return answer, group.views.get(view.task.task_id, view)

    def _context(
        self, task: TaskState, step: StepState, *, created: bool, now: datetime
    ) -> tuple[ExecutionContext, ExecutionClaims, HandleRecord]:
        """Issue a token and a fresh handle for the execution (the handle's row is the caller's to write)."""
        assert step.execution_id is not None and step.producer_id is not None
        expires_at = now + self.ctx.token_ttl
        claims = ExecutionClaims(
            workflow_id=task.workflow_id,
            task_id=task.task_id,
            step_id=step.step_id,
            step_attempt=step.attempt,
            execution_id=step.execution_id,
            operation_code=step.operation_code,
            producer_id=step.producer_id,
            tenant_id=task.tenant_id,
            authority_scope=task.authority_scope,
            bucket_id=task.bucket_id,
            expires_at=expires_at,
            allowed_event_types=_WORKER_EVENTS,
        )
        handle = ids.new_execution_handle(task.bucket_id)
        return (
            ExecutionContext(
                workflow_id=task.workflow_id,
                task_id=task.task_id,
                step_id=step.step_id,
                operation_code=step.operation_code,
                step_attempt=step.attempt,
                execution_id=step.execution_id,
                producer_id=step.producer_id,
                heartbeat_interval_seconds=step.heartbeat_interval_seconds,
                heartbeat_timeout_seconds=step.heartbeat_timeout_seconds,
                execution_token=self.ctx.tokens.issue(claims),
                execution_handle=handle,
                task_version=task.version,
                step_version=step.version,
                created=created,
                expires_at=expires_at,
            ),
            claims,
            HandleRecord(
                ids.handle_hash(handle),
                step.execution_id,
                step.task_id,
                step.step_id,
                step.attempt,
                step.producer_id,
                expires_at,
                now,
            ),
        )

    def _freeze_operation(self, uow: UnitOfWork, op: OperationDefinition) -> OperationKey | None:
        """Freeze the definition a step now uses (design P16); once committed, later activations skip the write."""
        key = op.key
        if key in self._frozen:
            return None
        uow.definitions.freeze_operation(key, self.ctx.now())
        return key


# What a user reads on an attempt Temporal ran that never reached the status service.
def _activity_key(activity: c.TemporalActivity | None) -> str | None:
    if activity is None:
        return None
    return ids.temporal_activity_key(activity.namespace, activity.workflow_id, activity.run_id, activity.activity_id)


def _record_activity(group: Group, step: StepState, activity: c.TemporalActivity | None) -> None:
    """Which Temporal activity runs this execution (the reconciler asks Temporal before STALE);
    written with the group's other rows, one statement for all its bindings."""
    if activity is not None and step.execution_id is not None:
        group.activities.append(
            ActivityRecord(
                step.execution_id,
                step.task_id,
                activity.namespace,
                activity.workflow_id,
                activity.run_id,
                activity.activity_id,
            )
        )
