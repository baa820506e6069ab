"""``StatusService``: every command of the status service, one method each.

HTTP, batch endpoints, the reconciler and tests all call these methods, so no
adapter grows rules of its own (SPEC AC11).  Each state change runs in one
unit of work and writes current state, the immutable event, the dedup result
and the outbox rows before COMMIT (SPEC R1, AC17); nothing is published here.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from status.app import commands as c
from status.app.definitions import DefinitionCache, Definitions, default_document, save_definitions
from status.domain import ids
from status.domain.auth import ExecutionClaims, Role, ServicePrincipal, UserPrincipal
from status.domain.definitions import (
    ANY,
    DynamicRegistrationPolicy,
    FailurePolicy,
    OperationDefinition,
    SchemaValidator,
    Severity,
    find_operation,
)
from status.domain.errors import (
    Conflict,
    DomainError,
    ErrorCode,
    Forbidden,
    Invalid,
    NotFound,
    TooLarge,
)
from status.domain.lifecycle import TASK_EVENT_TYPES, WORKER_EVENT_TYPES, EventType, Health, Lifecycle
from status.domain.model import StepState, TaskState, WorkflowState
from status.domain.projections import (
    SYSTEM_CHANNEL,
    Projection,
    detail_channel,
    iso,
    project_broadcast,
    project_channel,
    system_broadcast,
    task_detail,
    task_removed,
    task_snapshot,
    tenant_channel,
    user_channel,
    user_summary,
    workflow_channel,
    workflow_summary,
)
from status.domain.rules import (
    Notice,
    Outcome,
    StepEvent,
    TaskEvent,
    apply_step_event,
    apply_task_event,
    bound_fields_match,
)
from status.infra import repository as repo
from status.infra import tables as t
from status.infra.tokens import ExecutionTokens
from status.infra.uow import UnitOfWork, run_in_transaction

HEALTH_PRODUCER = "task-status/health"
_INSERT_EVENT = sa.insert(t.task_event_log)
_INSERT_DEDUP = sa.insert(t.task_event_dedup)
MAX_TITLE = 255
KEY_RE_LIMIT = 128


def _hash(content: Any) -> str:
    return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def _check_key(name: str, value: str, limit: int = KEY_RE_LIMIT) -> None:
    if not value or len(value) > limit or any(ch.isspace() or ord(ch) < 32 for ch in value):
        raise Invalid(f"{name} must be 1–{limit} printable characters without spaces")


@dataclass(frozen=True)
class ExecutionContext:
    """What activation/registration returns (seed §3.3)."""

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

    def to_json(self) -> dict[str, Any]:
        return {
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


@dataclass(frozen=True)
class _Resolved:
    """The execution an event or heartbeat is bound to, and any credential problem found."""

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


EventCaller = ExecutionClaims | ServicePrincipal


class StatusService:
    def __init__(
        self,
        engine: sa.Engine,
        *,
        execution_tokens: ExecutionTokens,
        validator: SchemaValidator,
        execution_token_ttl_seconds: int = 24 * 3600,
        max_data_bytes: int = 16 * 1024,
        default_heartbeat_interval_seconds: int = 15,
        default_heartbeat_timeout_seconds: int = 60,
        clock: Callable[[], datetime] = repo.utcnow,
    ) -> None:
        self.engine = engine
        self._tokens = execution_tokens
        self._validator = validator
        self._token_ttl = timedelta(seconds=execution_token_ttl_seconds)
        self._max_data_bytes = max_data_bytes
        self._hb_interval = default_heartbeat_interval_seconds
        self._hb_timeout = default_heartbeat_timeout_seconds
        self._clock = clock
        self.definitions = DefinitionCache()

    def now(self) -> datetime:
        return repo.now_ms(self._clock())

    # ================================================================ definitions
    def install_default_definitions(self) -> dict[str, int]:
        """Idempotently store the shipped defaults (tenant/scope "*")."""
        return self.put_definitions(None, default_document())

    def put_definitions(self, caller: ServicePrincipal | None, document: dict[str, Any]) -> dict[str, int]:
        """Store versioned definitions for the caller's tenant/scope (None: the global defaults)."""
        if caller is not None and not caller.has(Role.ADMIN):
            raise Forbidden("defining operations needs the ADMIN role")
        tenant, scope = (caller.tenant_id, caller.authority_scope) if caller else (ANY, ANY)

        def work(uow: UnitOfWork) -> dict[str, int]:
            result = save_definitions(uow.conn, document, tenant, scope)
            uow.commit()
            return result

        result = run_in_transaction(self.engine, work)
        self.definitions.invalidate()
        return result

    def _definitions(self, conn: sa.Connection, tenant_id: str, scope: str) -> Definitions:
        return self.definitions.get(conn, tenant_id, scope)

    def _operation(
        self, defs: Definitions, code: str, task_type: str | None, version: int | None = None
    ) -> OperationDefinition:
        candidates = defs.operations if version is None else [d for d in defs.operations if d.version == version]
        op = find_operation(candidates, code, task_type)
        if op is None:
            raise Invalid(f"operation {code!r} has no definition", ErrorCode.OPERATION_MISMATCH)
        return op

    # ================================================================ outbox
    def _task_outbox(
        self,
        conn: sa.Connection,
        task: TaskState,
        steps: Sequence[StepState],
        *,
        notice: Notice | None,
        trigger: dict[str, Any] | None,
        must_deliver: bool,
        event_id: str,
        broadcast: bool,
    ) -> list[dict[str, Any]]:
        """The outbox rows of one task change (one per channel, full state + version).

        Also appends the change to the workflow projector's feed (R15): an
        insert-only row, so task commits never lock the workflow.
        """
        now = self.now()
        repo.record_task_change(conn, task.workflow_id, task.task_id, task.version, now)
        summary = user_summary(task, steps, now, notice)
        rows = []

        def row(channel: str, projection: str, payload: dict[str, Any], deliver: bool) -> dict[str, Any]:
            return {
                "aggregate_type": "TASK",
                "aggregate_id": task.task_id,
                "aggregate_version": task.version,
                "channel": channel,
                "projection": projection,
                "must_deliver": deliver,
                "event_id": event_id,
                "payload": payload,
                "status": "PENDING",
                "available_at": now,
                "created_at": now,
            }

        users = [task.owner_id, *[u for u in repo.acl_users(conn, task.task_id) if u != task.owner_id]]
        for user in users:
            rows.append(row(user_channel(task.tenant_id, user), Projection.USER_SUMMARY, summary, must_deliver))
        rows.append(
            row(
                detail_channel(task.tenant_id, task.task_id),
                Projection.TASK_DETAIL,
                task_detail(task, steps, now, trigger),
                must_deliver,
            )
        )
        if broadcast and task.project_id:
            rows.append(
                row(
                    project_channel(task.tenant_id, task.project_id),
                    Projection.PROJECT_BROADCAST,
                    project_broadcast(task, steps, now),
                    must_deliver,
                )
            )
        return rows

    def _workflow_outbox(self, workflow: WorkflowState, users: Sequence[str]) -> list[dict[str, Any]]:
        now = self.now()
        payload = workflow_summary(workflow, now)
        channels = [workflow_channel(workflow.tenant_id, workflow.workflow_id)]
        channels += [user_channel(workflow.tenant_id, u) for u in dict.fromkeys(users)]
        return [
            {
                "aggregate_type": "WORKFLOW",
                "aggregate_id": workflow.workflow_id,
                "aggregate_version": workflow.version,
                "channel": ch,
                "projection": Projection.WORKFLOW_SUMMARY,
                "must_deliver": True,
                "event_id": None,
                "payload": payload,
                "status": "PENDING",
                "available_at": now,
                "created_at": now,
            }
            for ch in channels
        ]

    def _log_event(
        self,
        conn: sa.Connection,
        *,
        event_id: str,
        task: TaskState,
        step: StepState | None,
        event_type: str,
        producer_id: str,
        source_seq: int,
        occurred_at: datetime,
        received_at: datetime,
        duration_ms: int | None = None,
        data_schema: str | None = None,
        error_code: str | None = None,
        payload: dict[str, Any] | None = None,
    ) -> None:
        conn.execute(
            _INSERT_EVENT,
            dict(
                event_id=event_id,
                workflow_id=task.workflow_id,
                task_id=task.task_id,
                task_version=task.version,
                step_id=step.step_id if step else None,
                operation_code=step.operation_code if step else None,
                execution_id=step.execution_id if step else None,
                step_version=step.version if step else None,
                task_attempt=task.attempt,
                step_attempt=step.attempt if step else None,
                producer_id=producer_id,
                source_seq=source_seq,
                event_type=event_type,
                lifecycle_status=(step.lifecycle if step else task.lifecycle).value,
                business_status=step.business_status if step else task.business_status,
                health=(step.health if step else task.health).value,
                data_schema=data_schema,
                error_code=error_code,
                occurred_at=occurred_at,
                received_at=received_at,
                committed_at=self.now(),
                duration_ms=duration_ms,
                payload=payload,
            ),
        )

    def _service_event(
        self,
        conn: sa.Connection,
        task: TaskState,
        steps: Sequence[StepState],
        event_type: EventType,
        producer_id: str,
        payload: dict[str, Any],
        *,
        step: StepState | None = None,
        notice: Notice | None = None,
        must_deliver: bool = True,
        broadcast: bool = False,
    ) -> list[dict[str, Any]]:
        """Log a change the service itself made (creation, activation, classification, access)
        at the task's current version, and return its outbox rows."""
        now = self.now()
        event_id = f"sys:{task.task_id}:{task.version}"
        self._log_event(
            conn,
            event_id=event_id,
            task=task,
            step=step,
            event_type=event_type.value,
            producer_id=producer_id,
            source_seq=0,
            occurred_at=now,
            received_at=now,
            payload=payload,
        )
        trigger: dict[str, Any] = {"eventId": event_id, "eventType": event_type.value, "committedAt": iso(now)}
        if step is not None:
            trigger |= {"stepId": step.step_id, "operationCode": step.operation_code}
        return self._task_outbox(
            conn,
            task,
            steps,
            notice=notice,
            trigger=trigger,
            must_deliver=must_deliver,
            event_id=event_id,
            broadcast=broadcast,
        )

    # ================================================================ workflows and tasks
    def create_workflow(self, caller: ServicePrincipal, cmd: c.CreateWorkflow) -> dict[str, Any]:
        """Create a workflow and its initial tasks idempotently, in one transaction (seed §3.1)."""
        self._require(caller, Role.COORDINATOR)
        _check_key("clientWorkflowKey", cmd.client_workflow_key)
        _check_key("ownerId", cmd.owner_id, 64)
        self._check_title(cmd.title)
        keys = [nt.client_task_key for nt in cmd.initial_tasks]
        if len(keys) != len(set(keys)):
            raise Invalid("initialTasks have duplicate clientTaskKeys")
        request_hash = _hash(
            {
                "owner": cmd.owner_id,
                "title": cmd.title,
                "type": cmd.workflow_type,
                "policy": cmd.dynamic_registration_policy,
            }
        )

        def work(uow: UnitOfWork) -> dict[str, Any]:
            conn, now = uow.conn, self.now()
            wf = t.workflow
            existing = (
                conn.execute(
                    sa.select(wf)
                    .where(
                        wf.c.tenant_id == caller.tenant_id,
                        wf.c.authority_scope == caller.authority_scope,
                        wf.c.client_workflow_key == cmd.client_workflow_key,
                    )
                    .with_for_update()
                )
                .mappings()
                .first()
            )
            if existing is not None:
                if existing["request_hash"] != request_hash:
                    raise Conflict("clientWorkflowKey was used with different content", ErrorCode.IDEMPOTENCY_CONFLICT)
                workflow = repo.workflow_from_row(existing)
                created = False
            else:
                workflow = WorkflowState(
                    workflow_id=ids.new_workflow_id(int(now.replace(tzinfo=UTC).timestamp() * 1000)),
                    tenant_id=caller.tenant_id,
                    owner_id=cmd.owner_id,
                    authority_scope=caller.authority_scope,
                    client_workflow_key=cmd.client_workflow_key,
                    title=cmd.title,
                    lifecycle=Lifecycle.PENDING,
                    version=1,
                    created_at=now,
                    updated_at=now,
                    workflow_type=cmd.workflow_type,
                )
                conn.execute(
                    sa.insert(wf).values(
                        id=workflow.workflow_id,
                        tenant_id=workflow.tenant_id,
                        owner_id=workflow.owner_id,
                        authority_scope=workflow.authority_scope,
                        coordinator_id=caller.producer_id,
                        client_workflow_key=workflow.client_workflow_key,
                        workflow_type=workflow.workflow_type,
                        title=workflow.title,
                        lifecycle_status=workflow.lifecycle.value,
                        version=1,
                        task_count=0,
                        aggregate={},
                        dynamic_registration_policy=cmd.dynamic_registration_policy,
                        request_hash=request_hash,
                        created_at=now,
                        updated_at=now,
                    )
                )
                created = True
            results, outbox = [], []
            for new_task in cmd.initial_tasks:
                result, rows, added = self._add_task(conn, caller, workflow, new_task, cmd.dynamic_registration_policy)
                results.append(result)
                outbox += rows
                if added:
                    workflow = replace(workflow, task_count=workflow.task_count + 1)
            if created or any(r["created"] for r in results):
                if not created:
                    workflow = replace(workflow, version=workflow.version + 1, updated_at=now)
                conn.execute(
                    sa.update(wf)
                    .where(wf.c.id == workflow.workflow_id)
                    .values(version=workflow.version, task_count=workflow.task_count, updated_at=now)
                )
                outbox += self._workflow_outbox(workflow, [workflow.owner_id])
            repo.insert_outbox(conn, outbox)
            uow.commit()
            return {
                "workflowId": workflow.workflow_id,
                "workflowVersion": str(workflow.version),
                "created": created,
                "tasks": results,
            }

        return run_in_transaction(self.engine, work)

    def add_task(self, caller: ServicePrincipal, workflow_id: str, new_task: c.NewTask) -> dict[str, Any]:
        """Add a task to a workflow idempotently by ``clientTaskKey``."""
        self._require(caller, Role.COORDINATOR)

        def work(uow: UnitOfWork) -> dict[str, Any]:
            conn = uow.conn
            row = (
                conn.execute(sa.select(t.workflow).where(t.workflow.c.id == workflow_id).with_for_update())
                .mappings()
                .first()
            )
            if row is None or (row["tenant_id"], row["authority_scope"]) != (caller.tenant_id, caller.authority_scope):
                raise NotFound(f"workflow {workflow_id} does not exist", ErrorCode.UNKNOWN_WORKFLOW)
            workflow = repo.workflow_from_row(row)
            result, outbox, added = self._add_task(conn, caller, workflow, new_task, row["dynamic_registration_policy"])
            if added:
                now = self.now()
                workflow = replace(
                    workflow, version=workflow.version + 1, task_count=workflow.task_count + 1, updated_at=now
                )
                conn.execute(
                    sa.update(t.workflow)
                    .where(t.workflow.c.id == workflow_id)
                    .values(version=workflow.version, task_count=workflow.task_count, updated_at=now)
                )
                outbox += self._workflow_outbox(workflow, [workflow.owner_id])
            repo.insert_outbox(conn, outbox)
            uow.commit()
            return {**result, "workflowId": workflow.workflow_id, "workflowVersion": str(workflow.version)}

        return run_in_transaction(self.engine, work)

    def _add_task(
        self,
        conn: sa.Connection,
        caller: ServicePrincipal,
        workflow: WorkflowState,
        new_task: c.NewTask,
        workflow_policy: dict[str, Any] | None,
    ) -> tuple[dict[str, Any], list[dict[str, Any]], bool]:
        _check_key("clientTaskKey", new_task.client_task_key)
        self._check_title(new_task.title)
        owner = new_task.owner_id or workflow.owner_id
        _check_key("ownerId", owner, 64)
        for name, value, limit in (
            ("productId", new_task.product_id, 64),
            ("taskType", new_task.task_type, 128),
            ("projectId", new_task.project_id, 64),
        ):
            if value is not None:
                _check_key(name, value, limit)
        step_ids = [s.step_id for s in new_task.known_steps]
        if len(step_ids) != len(set(step_ids)):
            raise Invalid("knownSteps have duplicate stepIds")
        policy = new_task.dynamic_registration_policy or workflow_policy
        DynamicRegistrationPolicy.from_json(policy)  # validates the shape
        request_hash = _hash(
            {
                "title": new_task.title,
                "owner": owner,
                "type": new_task.task_type,
                "product": new_task.product_id,
                "project": new_task.project_id,
                "steps": [vars(s) for s in new_task.known_steps],
                "policy": policy,
            }
        )
        existing = (
            conn.execute(
                sa.select(t.task.c.id, t.task.c.version, t.task.c.request_hash).where(
                    t.task.c.workflow_id == workflow.workflow_id, t.task.c.client_task_key == new_task.client_task_key
                )
            )
            .mappings()
            .first()
        )
        if existing is not None:
            if existing["request_hash"] != request_hash:
                raise Conflict("clientTaskKey was used with different content", ErrorCode.IDEMPOTENCY_CONFLICT)
            return (
                {
                    "clientTaskKey": new_task.client_task_key,
                    "taskId": existing["id"],
                    "taskVersion": str(existing["version"]),
                    "created": False,
                },
                [],
                False,
            )
        now = self.now()
        defs = self._definitions(conn, caller.tenant_id, caller.authority_scope)
        status_version = defs.latest_status_version(new_task.task_type) if new_task.task_type else None
        statuses = defs.status_set(new_task.task_type, status_version)
        task = TaskState(
            task_id=ids.new_task_id(caller.tenant_id, owner, int(now.replace(tzinfo=UTC).timestamp() * 1000)),
            workflow_id=workflow.workflow_id,
            client_task_key=new_task.client_task_key,
            tenant_id=caller.tenant_id,
            owner_id=owner,
            authority_scope=caller.authority_scope,
            bucket_id=0,
            title=new_task.title,
            lifecycle=Lifecycle.PENDING,
            business_status=statuses.resolve(None, Lifecycle.PENDING, None).code,
            version=1,
            created_at=now,
            updated_at=now,
            product_id=new_task.product_id,
            task_type=new_task.task_type,
            project_id=new_task.project_id,
            status_definition_version=status_version,
        )
        task = replace(task, bucket_id=ids.bucket_hint(task.task_id) or 0)
        conn.execute(
            sa.insert(t.task).values(
                id=task.task_id,
                workflow_id=task.workflow_id,
                client_task_key=task.client_task_key,
                tenant_id=task.tenant_id,
                owner_id=task.owner_id,
                authority_scope=task.authority_scope,
                bucket_id=task.bucket_id,
                request_hash=request_hash,
                created_at=now,
                dynamic_registration_policy=policy,
                **{k: v for k, v in repo.task_values(task).items()},
            )
        )
        steps = []
        for order, known in enumerate(new_task.known_steps):
            _check_key("stepId", known.step_id)
            op = self._operation(defs, known.operation_code, task.task_type)
            policy_name = known.failure_policy or op.failure_policy.value
            FailurePolicy(policy_name)
            step = StepState(
                task_id=task.task_id,
                step_id=known.step_id,
                attempt=1,
                client_step_key=known.step_id,
                operation_code=known.operation_code,
                operation_definition_version=op.version,
                service_name=known.expected_producer or "*",
                lifecycle=Lifecycle.PENDING,
                business_status=statuses.resolve(None, Lifecycle.PENDING, None).code,
                version=1,
                display_name=known.display_name or op.display_name,
                step_order=order,
                failure_policy=policy_name,
                updated_at=now,
            )
            repo.insert_step(conn, step)
            steps.append(step)
        outbox = self._service_event(
            conn, task, steps, EventType.TASK_CREATED, caller.producer_id, {"knownSteps": step_ids}, broadcast=True
        )
        return (
            {"clientTaskKey": new_task.client_task_key, "taskId": task.task_id, "taskVersion": "1", "created": True},
            outbox,
            True,
        )

    # ================================================================ executions
    def activate_step(self, caller: ServicePrincipal, cmd: c.ActivateStep) -> ExecutionContext:
        """Create attempt N of a known step and bind an execution (idempotent per attempt)."""
        self._require(caller, Role.COORDINATOR)
        _check_key("producerId", cmd.producer_id)
        if cmd.attempt < 1:
            raise Invalid("attempt must be >= 1")
        self._check_heartbeat_settings(cmd.heartbeat_interval_seconds, cmd.heartbeat_timeout_seconds)

        def work(uow: UnitOfWork) -> ExecutionContext:
            conn, now = uow.conn, self.now()
            task = self._lock_task_for(conn, caller, cmd.task_id)
            steps = repo.steps_of(conn, task.task_id, lock=True)
            attempts = sorted((s for s in steps if s.step_id == cmd.step_id), key=lambda s: s.attempt)
            if not attempts or attempts[0].step_kind != "KNOWN":
                raise NotFound(f"step {cmd.step_id} is not a known step of this task", ErrorCode.UNKNOWN_STEP)
            current = attempts[-1]
            existing = next((s for s in attempts if s.attempt == cmd.attempt), None)
            if existing is not None and existing.execution_id is not None:
                if existing.producer_id != cmd.producer_id:
                    raise Forbidden("this attempt is bound to another producer", ErrorCode.PRODUCER_MISMATCH)
                return self._context(conn, task, existing, created=False, now=now, uow=uow)
            if cmd.attempt < current.attempt or (existing is None and cmd.attempt != current.attempt + 1):
                raise Conflict(
                    f"attempt {cmd.attempt} is not the next attempt of {cmd.step_id} (current {current.attempt})",
                    ErrorCode.STALE_ATTEMPT,
                )
            # A finished task still takes late reports of work that ran before it finished
            # (a worker's outbox may deliver after the coordinator's TASK_COMPLETED); its own
            # lifecycle never changes again (R2).
            defs = self._definitions(conn, task.tenant_id, task.authority_scope)
            op = self._operation(defs, current.operation_code, task.task_type, current.operation_definition_version)
            op.check_producer(cmd.producer_id)
            statuses = defs.status_set(task.task_type, task.status_definition_version)
            execution_id = ids.new_execution_id(int(now.replace(tzinfo=UTC).timestamp() * 1000))
            changed: list[StepState] = []
            notice = None
            if existing is None:
                # A newer attempt supersedes the previous one: its late events become STALE_ATTEMPT.
                previous = replace(current, superseded=True)
                if not previous.lifecycle.terminal:
                    previous = replace(
                        previous,
                        lifecycle=Lifecycle.TIMED_OUT,
                        business_status=statuses.resolve(None, Lifecycle.TIMED_OUT, None).code,
                        health=Health.HEALTHY,
                        finished_at=now,
                        version=previous.version + 1,
                        updated_at=now,
                    )
                changed.append(previous)
                step = replace(
                    current,
                    attempt=cmd.attempt,
                    lifecycle=Lifecycle.PENDING,
                    business_status=statuses.resolve(None, Lifecycle.PENDING, None).code,
                    health=Health.HEALTHY,
                    version=1,
                    source_seq=0,
                    last_heartbeat_seq=0,
                    last_heartbeat_at=None,
                    stale_since=None,
                    progress=None,
                    phase_code=None,
                    phase_label=None,
                    data_schema=None,
                    state_data=None,
                    started_at=None,
                    finished_at=None,
                    duration_ms=None,
                    error=None,
                )
                notice = Notice(
                    id=f"{task.task_id}:{task.version + 1}",
                    kind="RETRYING",
                    severity=Severity.INFO,
                    title=f"{step.display_name or step.operation_code} is being retried (attempt {cmd.attempt})",
                    step_id=step.step_id,
                )
            else:
                step = existing
            step = replace(
                step,
                execution_id=execution_id,
                producer_id=cmd.producer_id,
                operation_definition_version=op.version,
                heartbeat_interval_seconds=cmd.heartbeat_interval_seconds or self._hb_interval,
                heartbeat_timeout_seconds=cmd.heartbeat_timeout_seconds or self._hb_timeout,
                activated_at=now,
                version=step.version + (1 if existing is not None else 0),
                updated_at=now,
            )
            task = replace(task, version=task.version + 1, updated_at=now)
            for prev in changed:
                repo.update_step(conn, prev)  # superseded: no heartbeat deadline any more
                self._revoke_handles(conn, prev.execution_id, "SUPERSEDED", now)
            if existing is None:
                repo.insert_step(conn, step)
            else:
                repo.update_step(conn, step)
            repo.update_task(conn, task)
            self._freeze_operation(conn, op)
            all_steps = [
                s for s in steps if (s.step_id, s.attempt) not in {(x.step_id, x.attempt) for x in [*changed, step]}
            ]
            all_steps += [*changed, step]
            repo.insert_outbox(
                conn,
                self._service_event(
                    conn,
                    task,
                    all_steps,
                    EventType.STEP_ACTIVATED,
                    caller.producer_id,
                    {"producerId": cmd.producer_id},
                    step=step,
                    notice=notice,
                ),
            )
            return self._context(conn, task, step, created=True, now=now, uow=uow)

        return run_in_transaction(self.engine, work)

    def register_execution(self, caller: EventCaller, cmd: c.RegisterExecution) -> ExecutionContext:
        """Register a dynamic step execution (seed §3.1.1, R9), idempotent per clientStepKey+attempt."""
        _check_key("clientStepKey", cmd.client_step_key)
        _check_key("producerId", cmd.producer_id)
        self._check_heartbeat_settings(cmd.heartbeat_interval_seconds, cmd.heartbeat_timeout_seconds)
        if cmd.attempt < 1:
            raise Invalid("attempt must be >= 1")
        if isinstance(caller, ServicePrincipal):
            self._require(caller, Role.COORDINATOR)
            tenant, scope = caller.tenant_id, caller.authority_scope
            registrar = caller.producer_id
        else:
            # A parent execution may register children of itself only.
            if cmd.parent_execution_id != caller.execution_id or cmd.task_id != caller.task_id:
                raise Forbidden("an execution may only register its own children", ErrorCode.PERMISSION_DENIED)
            tenant, scope, registrar = caller.tenant_id, caller.authority_scope, caller.producer_id

        def work(uow: UnitOfWork) -> ExecutionContext:
            conn, now = uow.conn, self.now()
            task = repo.lock_task(conn, cmd.task_id)
            if task is None or (task.tenant_id, task.authority_scope) != (tenant, scope):
                raise NotFound(f"task {cmd.task_id} does not exist", ErrorCode.UNKNOWN_TASK)
            steps = repo.steps_of(conn, task.task_id, lock=True)
            existing = next(
                (s for s in steps if s.client_step_key == cmd.client_step_key and s.attempt == cmd.attempt), None
            )
            if existing is not None:
                if (existing.operation_code, existing.producer_id, existing.parent_execution_id) != (
                    cmd.operation_code,
                    cmd.producer_id,
                    cmd.parent_execution_id,
                ):
                    raise Conflict(
                        "clientStepKey was registered with different content", ErrorCode.IDEMPOTENCY_CONFLICT
                    )
                return self._context(conn, task, existing, created=False, now=now, uow=uow)
            policy_row = conn.execute(
                sa.select(t.task.c.dynamic_registration_policy).where(t.task.c.id == task.task_id)
            ).scalar()
            policy = DynamicRegistrationPolicy.from_json(policy_row)
            parent = None
            if cmd.parent_execution_id is not None:
                parent = next((s for s in steps if s.execution_id == cmd.parent_execution_id), None)
                if parent is None:
                    raise NotFound("parentExecutionId is not an execution of this task", ErrorCode.UNKNOWN_STEP)
                if parent.lifecycle.terminal:
                    raise Conflict("the parent execution has finished", ErrorCode.TERMINAL_STATE)
            dynamic = [s for s in steps if s.step_kind == "DYNAMIC"]
            minute_ago = now - timedelta(minutes=1)
            policy.check(
                operation_code=cmd.operation_code,
                parent_operation=parent.operation_code if parent else None,
                depth=(parent.depth + 1) if parent else 1,
                dynamic_steps=len({s.step_id for s in dynamic}),
                running_dynamic=sum(1 for s in dynamic if not s.lifecycle.terminal),
                registered_last_minute=sum(1 for s in dynamic if s.activated_at and s.activated_at >= minute_ago),
            )
            defs = self._definitions(conn, task.tenant_id, task.authority_scope)
            op = self._operation(defs, cmd.operation_code, task.task_type)
            op.check_producer(cmd.producer_id)
            policy_name = cmd.failure_policy or op.failure_policy.value
            try:
                FailurePolicy(policy_name)
            except ValueError as exc:
                raise Invalid(f"unknown failurePolicy {policy_name!r}") from exc
            statuses = defs.status_set(task.task_type, task.status_definition_version)
            step_id = f"dyn_{cmd.client_step_key}"
            if any(s.step_id == step_id and s.attempt >= cmd.attempt for s in steps):
                raise Conflict(f"attempt {cmd.attempt} of {step_id} is not new", ErrorCode.STALE_ATTEMPT)
            for prev in (s for s in steps if s.step_id == step_id and not s.superseded):
                conn.execute(
                    sa.update(t.task_step)
                    .where(
                        t.task_step.c.task_id == prev.task_id,
                        t.task_step.c.step_id == prev.step_id,
                        t.task_step.c.attempt == prev.attempt,
                    )
                    .values(superseded=True, heartbeat_deadline_at=None)
                )
                self._revoke_handles(conn, prev.execution_id, "SUPERSEDED", now)
            step = StepState(
                task_id=task.task_id,
                step_id=step_id,
                attempt=cmd.attempt,
                client_step_key=cmd.client_step_key,
                operation_code=cmd.operation_code,
                operation_definition_version=op.version,
                service_name=cmd.producer_id,
                lifecycle=Lifecycle.PENDING,
                business_status=statuses.resolve(None, Lifecycle.PENDING, None).code,
                version=1,
                step_kind="DYNAMIC",
                display_name=cmd.display_name or op.display_name,
                step_order=10_000 + len(dynamic),
                parent_execution_id=cmd.parent_execution_id,
                depth=(parent.depth + 1) if parent else 1,
                producer_id=cmd.producer_id,
                execution_id=ids.new_execution_id(int(now.replace(tzinfo=UTC).timestamp() * 1000)),
                heartbeat_interval_seconds=cmd.heartbeat_interval_seconds or self._hb_interval,
                heartbeat_timeout_seconds=cmd.heartbeat_timeout_seconds or self._hb_timeout,
                activated_at=now,
                failure_policy=policy_name,
                updated_at=now,
            )
            repo.insert_step(conn, step)
            task = replace(
                task, version=task.version + 1, dynamic_step_count=task.dynamic_step_count + 1, updated_at=now
            )
            repo.update_task(conn, task)
            self._freeze_operation(conn, op)
            repo.insert_outbox(
                conn,
                self._service_event(
                    conn,
                    task,
                    [*steps, step],
                    EventType.STEP_REGISTERED,
                    registrar,
                    {"parentExecutionId": cmd.parent_execution_id, "producerId": cmd.producer_id},
                    step=step,
                ),
            )
            return self._context(conn, task, step, created=True, now=now, uow=uow)

        return run_in_transaction(self.engine, work)

    def _context(
        self, conn: sa.Connection, task: TaskState, step: StepState, *, created: bool, now: datetime, uow: UnitOfWork
    ) -> ExecutionContext:
        """Issue a token and a fresh handle for the execution, then commit."""
        assert step.execution_id is not None and step.producer_id is not None
        expires_at = now + self._token_ttl
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
            allowed_event_types=frozenset(e.value for e in WORKER_EVENT_TYPES),
        )
        handle = ids.new_execution_handle()
        conn.execute(
            sa.insert(t.task_execution_handle).values(
                handle_hash=ids.handle_hash(handle),
                execution_id=step.execution_id,
                task_id=task.task_id,
                step_id=step.step_id,
                step_attempt=step.attempt,
                producer_id=step.producer_id,
                expires_at=expires_at,
                created_at=now,
            )
        )
        uow.commit()
        return ExecutionContext(
            workflow_id=task.workflow_id,
            task_id=task.task_id,
            step_id=step.step_id,
            operation_code=step.operation_code,
            step_attempt=step.attempt,
            execution_id=step.execution_id,
            producer_id=step.producer_id,
            heartbeat_interval_seconds=step.heartbeat_interval_seconds,
            heartbeat_timeout_seconds=step.heartbeat_timeout_seconds,
            execution_token=self._tokens.issue(claims),
            execution_handle=handle,
            task_version=task.version,
            step_version=step.version,
            created=created,
            expires_at=expires_at,
        )

    def _revoke_handles(self, conn: sa.Connection, execution_id: str | None, reason: str, now: datetime) -> None:
        if execution_id is None:
            return
        conn.execute(
            sa.update(t.task_execution_handle)
            .where(
                t.task_execution_handle.c.execution_id == execution_id, t.task_execution_handle.c.revoked_at.is_(None)
            )
            .values(revoked_at=now, revoke_reason=reason)
        )

    def _freeze_operation(self, conn: sa.Connection, op: OperationDefinition) -> None:
        od = t.task_operation_definition
        conn.execute(
            sa.update(od)
            .where(
                od.c.tenant_id == op.tenant_id,
                od.c.authority_scope == op.authority_scope,
                od.c.task_type_pattern == op.task_type_pattern,
                od.c.definition_version == op.version,
                od.c.operation_code == op.operation_code,
                od.c.frozen_at.is_(None),
            )
            .values(frozen_at=self.now())
        )

    # ================================================================ events
    def resolve_caller(self, bearer: str, service_tokens: Any) -> EventCaller:
        """An execution token or a service token (both verified by signature)."""
        from status.domain.errors import Unauthenticated

        try:
            return self._tokens.verify(bearer, self.now())
        except Unauthenticated:
            principal: ServicePrincipal = service_tokens.verify(bearer)
            return principal

    def report_event(self, caller: EventCaller, cmd: c.ReportEvent) -> dict[str, Any]:
        """One event through R1, in its own transaction."""
        return run_in_transaction(self.engine, lambda uow: self._report(uow, caller, cmd, commit=True))

    def report_events(self, caller: EventCaller, cmds: Sequence[c.ReportEvent]) -> list[dict[str, Any]]:
        """Many events in one transaction; each gets the result it would get alone (AC11).

        Events are applied grouped by task (their order within a task kept), so
        task locks are taken in one fixed order and concurrent batches never
        deadlock-loop.  Decisions happen before any write of an event, so a
        rejected item leaves nothing behind while the others commit together.
        If the database itself fails, the items fall back to one transaction each.
        """
        handle_tasks = self._handle_tasks([cmd.execution_handle for cmd in cmds if cmd.execution_handle])
        order = sorted(range(len(cmds)), key=lambda i: (self._task_key(caller, cmds[i], handle_tasks), i))

        def work(uow: UnitOfWork) -> list[dict[str, Any]]:
            results: list[dict[str, Any]] = [{} for _ in cmds]
            for i in order:
                try:
                    results[i] = self._report(uow, caller, cmds[i], commit=False)
                except DomainError as err:
                    results[i] = self._rejection(cmds[i], err)
            uow.commit()
            return results

        try:
            return run_in_transaction(self.engine, work)
        except (sa.exc.DBAPIError, DomainError):
            return [self._report_one(caller, cmd) for cmd in cmds]

    def _report_one(self, caller: EventCaller, cmd: c.ReportEvent) -> dict[str, Any]:
        try:
            return self.report_event(caller, cmd)
        except DomainError as err:
            return self._rejection(cmd, err)

    @staticmethod
    def _rejection(cmd: c.ReportEvent, err: DomainError) -> dict[str, Any]:
        return {
            "eventId": cmd.event_id,
            "accepted": False,
            "error": {"code": err.code.value, "message": err.message, "retryable": err.retryable},
        }

    def _handle_tasks(self, handles: Sequence[str]) -> dict[str, str]:
        if not handles:
            return {}
        by_hash = {ids.handle_hash(h): h for h in handles}
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(t.task_execution_handle.c.handle_hash, t.task_execution_handle.c.task_id).where(
                    t.task_execution_handle.c.handle_hash.in_(list(by_hash))
                )
            ).all()
        return {by_hash[h]: task_id for h, task_id in rows}

    @staticmethod
    def _task_key(caller: EventCaller, cmd: c.ReportEvent, handle_tasks: dict[str, str]) -> str:
        """The lock-order key of an event: the task it will lock."""
        if isinstance(caller, ExecutionClaims):
            return caller.task_id
        if cmd.execution_handle:
            return handle_tasks.get(cmd.execution_handle, "")
        return cmd.task_id or ""

    def _report(self, uow: UnitOfWork, caller: EventCaller, cmd: c.ReportEvent, *, commit: bool) -> dict[str, Any]:
        try:
            event_type = EventType(cmd.event_type)
        except ValueError as exc:
            raise Invalid(f"unknown eventType {cmd.event_type!r}") from exc
        _check_key("eventId", cmd.event_id)
        if cmd.source_seq < 1 and event_type is not EventType.STEP_HEALTH_CHANGED:
            raise Invalid("sourceSeq must be >= 1")
        self._check_data_size(cmd)
        conn, received_at = uow.conn, self.now()
        if event_type in TASK_EVENT_TYPES:
            return self._report_task_event(uow, caller, cmd, event_type, received_at, commit)
        if event_type not in {*WORKER_EVENT_TYPES, EventType.STEP_HEALTH_CHANGED}:
            raise Invalid(f"{event_type} cannot be reported")
        bound = self._resolve_execution(conn, caller, cmd, event_type, received_at)
        task = repo.lock_task(conn, bound.task_id)
        if task is None or (task.tenant_id, task.authority_scope) != (bound.tenant_id, bound.authority_scope):
            raise NotFound(f"task {bound.task_id} does not exist", ErrorCode.UNKNOWN_TASK)
        steps = repo.steps_of(conn, task.task_id, lock=True)
        step = next((s for s in steps if s.step_id == bound.step_id and s.attempt == bound.step_attempt), None)
        if step is None:
            raise NotFound(f"step {bound.step_id} attempt {bound.step_attempt} does not exist", ErrorCode.UNKNOWN_STEP)
        content_hash = _hash(
            {
                "task": task.task_id,
                "step": step.step_id,
                "attempt": step.attempt,
                "execution": bound.execution_id,
                **cmd.content(),
            }
        )
        duplicate = self._dedup(conn, cmd.event_id, content_hash)
        if duplicate is not None:
            return duplicate
        if bound.credential_problem is not None:
            raise bound.credential_problem
        # Execution and attempt must be current (R2: old attempts never change anything).
        if step.execution_id != bound.execution_id:
            raise Conflict("the execution is not the current one for this step", ErrorCode.STALE_EXECUTION)
        if step.superseded:
            raise Conflict("a newer attempt of this step exists", ErrorCode.STALE_ATTEMPT)
        if event_type is not EventType.STEP_HEALTH_CHANGED:
            if step.producer_id != bound.producer_id:
                raise Forbidden("the producer does not own this execution", ErrorCode.PRODUCER_MISMATCH)
            if bound.operation_code is not None and step.operation_code != bound.operation_code:
                raise Forbidden("the operation does not match the step", ErrorCode.OPERATION_MISMATCH)
            if bound.allowed_event_types is not None and event_type.value not in bound.allowed_event_types:
                raise Forbidden(f"{event_type} is not allowed by the execution token", ErrorCode.EVENT_TYPE_NOT_ALLOWED)
        defs = self._definitions(conn, task.tenant_id, task.authority_scope)
        op = self._operation(defs, step.operation_code, task.task_type, step.operation_definition_version)
        statuses = defs.status_set(task.task_type, task.status_definition_version)
        others_stale = any(
            s.health is Health.STALE
            and not s.lifecycle.terminal
            and (s.step_id, s.attempt) != (step.step_id, step.attempt)
            for s in steps
        )
        source_seq = cmd.source_seq if event_type is not EventType.STEP_HEALTH_CHANGED else step.version + 1
        event = StepEvent(
            event_id=cmd.event_id,
            event_type=event_type,
            source_seq=source_seq,
            producer_id=bound.producer_id,
            occurred_at=cmd.occurred_at,
            business_status=cmd.business_status,
            phase_code=cmd.phase_code,
            phase_label=cmd.phase_label,
            progress=cmd.progress,
            duration_ms=cmd.duration_ms,
            data=cmd.data,
            error=cmd.error,
            health=Health(cmd.health) if cmd.health in {h.value for h in Health} else None,
            reason=cmd.reason,
        )
        outcome = apply_step_event(
            task,
            step,
            event,
            operation=op,
            statuses=statuses,
            validator=self._validator,
            other_steps_stale=others_stale,
            now=received_at,
        )
        return self._commit_outcome(
            uow,
            outcome,
            steps,
            event_type,
            cmd,
            bound.producer_id,
            source_seq,
            content_hash,
            received_at,
            lifecycle_changed=outcome.task.lifecycle is not task.lifecycle,
            commit=commit,
        )

    def _report_task_event(
        self,
        uow: UnitOfWork,
        caller: EventCaller,
        cmd: c.ReportEvent,
        event_type: EventType,
        received_at: datetime,
        commit: bool,
    ) -> dict[str, Any]:
        # R4: only the Coordinator submits task-level events, with its service token.
        if not isinstance(caller, ServicePrincipal) or not caller.has(Role.COORDINATOR):
            raise Forbidden(f"{event_type} needs the COORDINATOR role", ErrorCode.EVENT_TYPE_NOT_ALLOWED)
        if cmd.task_id is None or cmd.task_attempt is None:
            raise Invalid("task events need taskId and taskAttempt")
        if cmd.producer_id is not None and cmd.producer_id != caller.producer_id:
            raise Forbidden("producerId does not match the credential", ErrorCode.PRODUCER_MISMATCH)
        conn = uow.conn
        task = repo.lock_task(conn, cmd.task_id)
        if task is None or (task.tenant_id, task.authority_scope) != (caller.tenant_id, caller.authority_scope):
            raise NotFound(f"task {cmd.task_id} does not exist", ErrorCode.UNKNOWN_TASK)
        if cmd.workflow_id is not None and cmd.workflow_id != task.workflow_id:
            raise NotFound(f"task {cmd.task_id} is not in workflow {cmd.workflow_id}", ErrorCode.UNKNOWN_TASK)
        content_hash = _hash({"task": task.task_id, **cmd.content()})
        duplicate = self._dedup(conn, cmd.event_id, content_hash)
        if duplicate is not None:
            return duplicate
        steps = repo.steps_of(conn, task.task_id)
        defs = self._definitions(conn, task.tenant_id, task.authority_scope)
        statuses = defs.status_set(task.task_type, task.status_definition_version)
        if cmd.summary is not None:
            raise Invalid("summary data is not accepted on task events yet", ErrorCode.SCHEMA_REJECTED)
        outcome = apply_task_event(
            task,
            TaskEvent(
                event_id=cmd.event_id,
                event_type=event_type,
                task_attempt=cmd.task_attempt,
                source_seq=cmd.source_seq,
                producer_id=caller.producer_id,
                occurred_at=cmd.occurred_at,
                business_status=cmd.business_status,
                duration_ms=cmd.duration_ms,
                failure_code=cmd.failure_code,
                failure_message=cmd.failure_message,
                failed_step_id=cmd.failed_step_id,
            ),
            statuses=statuses,
            now=received_at,
        )
        # Execution handles stay valid: a worker's outbox may still deliver the
        # steps' own late events; the task's lifecycle is final either way.
        return self._commit_outcome(
            uow,
            outcome,
            steps,
            event_type,
            cmd,
            caller.producer_id,
            cmd.source_seq,
            content_hash,
            received_at,
            lifecycle_changed=True,
            commit=commit,
        )

    def _commit_outcome(
        self,
        uow: UnitOfWork,
        outcome: Outcome,
        steps: Sequence[StepState],
        event_type: EventType,
        cmd: c.ReportEvent,
        producer_id: str,
        source_seq: int,
        content_hash: str,
        received_at: datetime,
        *,
        lifecycle_changed: bool,
        commit: bool,
    ) -> dict[str, Any]:
        conn, task, step = uow.conn, outcome.task, outcome.step
        if step is not None:
            repo.update_step(conn, step)
            if step.lifecycle.terminal:
                self._revoke_handles(conn, step.execution_id, "STEP_TERMINAL", received_at)
        repo.update_task(conn, task)
        committed_at = self.now()
        data = cmd.data
        self._log_event(
            conn,
            event_id=cmd.event_id,
            task=task,
            step=step,
            event_type=event_type.value,
            producer_id=producer_id,
            source_seq=source_seq,
            occurred_at=cmd.occurred_at,
            received_at=received_at,
            duration_ms=cmd.duration_ms,
            data_schema=data.schema if data else None,
            error_code=(cmd.error.code if cmd.error else cmd.failure_code),
            payload={k: v for k, v in cmd.content().items() if v is not None},
        )
        result = {
            "eventId": cmd.event_id,
            "accepted": True,
            "duplicate": False,
            "stale": False,
            "taskId": task.task_id,
            "stepId": step.step_id if step else None,
            "operationCode": step.operation_code if step else None,
            "taskVersion": str(task.version),
            "stepVersion": str(step.version) if step else None,
            "lifecycleStatus": (step or task).lifecycle.value,
            "businessStatus": (step or task).business_status,
            "taskLifecycleStatus": task.lifecycle.value,
            "committedAt": iso(committed_at),
        }
        conn.execute(
            _INSERT_DEDUP,
            dict(
                event_id=cmd.event_id,
                task_id=task.task_id,
                payload_hash=content_hash,
                result=result,
                created_at=committed_at,
            ),
        )
        new_steps = [s for s in steps if step is None or (s.step_id, s.attempt) != (step.step_id, step.attempt)]
        if step is not None:
            new_steps.append(step)
        trigger = {
            "eventId": cmd.event_id,
            "eventType": event_type.value,
            "stepId": step.step_id if step else None,
            "operationCode": step.operation_code if step else None,
            "durationMs": cmd.duration_ms,
            "data": {"schema": step.data_schema, "value": step.state_data} if step and data else None,
            "committedAt": iso(committed_at),
        }
        repo.insert_outbox(
            conn,
            self._task_outbox(
                conn,
                task,
                new_steps,
                notice=outcome.notice,
                trigger=trigger,
                must_deliver=outcome.must_deliver,
                event_id=cmd.event_id,
                broadcast=lifecycle_changed or outcome.must_deliver,
            ),
        )
        if commit:
            uow.commit()
        return result

    def _dedup(self, conn: sa.Connection, event_id: str, content_hash: str) -> dict[str, Any] | None:
        found = repo.dedup_lookup(conn, event_id)
        if found is None:
            return None
        if found["payload_hash"] != content_hash:
            raise Conflict("eventId was already used with different content", ErrorCode.EVENT_ID_CONFLICT)
        return {**dict(found["result"]), "duplicate": True}

    def _resolve_execution(
        self, conn: sa.Connection, caller: EventCaller, cmd: c.ReportEvent, event_type: EventType, now: datetime
    ) -> _Resolved:
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
            bound = {
                "taskId": caller.task_id,
                "workflowId": caller.workflow_id,
                "stepId": caller.step_id,
                "stepAttempt": caller.step_attempt,
                "executionId": caller.execution_id,
                "operationCode": caller.operation_code,
                "producerId": caller.producer_id,
            }
            self._match(bound, claimed)
            return _Resolved(
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
            if None in (cmd.task_id, cmd.step_id, cmd.step_attempt, cmd.execution_id):
                raise Invalid("health events name taskId, stepId, stepAttempt and executionId")
            assert cmd.task_id is not None
            return _Resolved(
                task_id=cmd.task_id,
                step_id=cmd.step_id,
                step_attempt=cmd.step_attempt,
                execution_id=cmd.execution_id,
                producer_id=HEALTH_PRODUCER,
                operation_code=None,
                tenant_id=caller.tenant_id,
                authority_scope=caller.authority_scope,
                allowed_event_types=None,
            )
        if cmd.execution_handle is None:
            raise Invalid("step events need an execution token or an executionHandle")
        handle = (
            conn.execute(
                sa.select(t.task_execution_handle).where(
                    t.task_execution_handle.c.handle_hash == ids.handle_hash(cmd.execution_handle)
                )
            )
            .mappings()
            .first()
        )
        if handle is None:
            raise Forbidden("the execution handle is not valid", ErrorCode.TOKEN_REVOKED)
        if handle["producer_id"] != caller.producer_id:
            raise Forbidden("the handle belongs to another producer", ErrorCode.PRODUCER_MISMATCH)
        bound = {
            "taskId": handle["task_id"],
            "stepId": handle["step_id"],
            "stepAttempt": handle["step_attempt"],
            "executionId": handle["execution_id"],
            "producerId": handle["producer_id"],
        }
        self._match(bound, claimed)
        problem: DomainError | None = None
        if handle["revoked_at"] is not None:
            problem = Forbidden(
                f"the execution handle was revoked ({handle['revoke_reason']})", ErrorCode.TOKEN_REVOKED
            )
        elif handle["expires_at"] <= now:
            problem = Forbidden("the execution handle has expired", ErrorCode.TOKEN_EXPIRED)
        return _Resolved(
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

    @staticmethod
    def _match(bound: dict[str, Any], claimed: dict[str, Any]) -> None:
        if claimed.get("taskId") is not None and claimed["taskId"] != bound.get("taskId"):
            raise Forbidden("taskId does not match the execution context", ErrorCode.PERMISSION_DENIED)
        if claimed.get("stepId") is not None and claimed["stepId"] != bound.get("stepId"):
            raise Forbidden("stepId does not match the execution context", ErrorCode.PERMISSION_DENIED)
        bound_fields_match(bound, {k: v for k, v in claimed.items() if k not in ("taskId", "stepId")})

    # ================================================================ heartbeats
    def record_heartbeats(self, caller: ServicePrincipal, items: Sequence[c.Heartbeat]) -> dict[str, Any]:
        """R6: plain heartbeats touch only last_heartbeat_*; no version, event or message."""
        self._require(caller, Role.WORKER)
        now = self.now()
        results: list[dict[str, Any] | None] = [None] * len(items)
        recover: list[tuple[int, str, str, int, str]] = []

        def work(uow: UnitOfWork) -> None:
            conn = uow.conn
            resolved = self._resolve_heartbeats(conn, caller, items, now, results)
            # Fixed lock order (task, step, attempt) so concurrent batches never deadlock-loop.
            for index, (task_id, step_id, attempt, execution_id) in sorted(resolved.items(), key=lambda kv: kv[1]):
                hb = items[index]
                ts = t.task_step
                updated = conn.execute(
                    sa.update(ts)
                    .where(
                        ts.c.task_id == task_id,
                        ts.c.step_id == step_id,
                        ts.c.attempt == attempt,
                        ts.c.execution_id == execution_id,
                        ts.c.lifecycle_status == Lifecycle.RUNNING.value,
                        ts.c.health == Health.HEALTHY.value,
                        ts.c.superseded.is_(sa.false()),
                        ts.c.last_heartbeat_seq < hb.heartbeat_seq,
                    )
                    .values(
                        last_heartbeat_seq=hb.heartbeat_seq,
                        last_heartbeat_at=now,
                        heartbeat_deadline_at=self._deadline_expr(now),
                    )
                ).rowcount
                if updated:
                    results[index] = {
                        "executionId": execution_id,
                        "accepted": True,
                        "health": "HEALTHY",
                        "reason": None,
                    }
                    continue
                row = (
                    conn.execute(
                        sa.select(ts.c.lifecycle_status, ts.c.health, ts.c.superseded, ts.c.last_heartbeat_seq).where(
                            ts.c.task_id == task_id, ts.c.step_id == step_id, ts.c.attempt == attempt
                        )
                    )
                    .mappings()
                    .first()
                )
                results[index] = self._heartbeat_rejection(execution_id, hb, row)
                if row is not None and row["health"] == Health.STALE.value and results[index] is None:
                    recover.append((index, task_id, step_id, attempt, execution_id))
            uow.commit()

        run_in_transaction(self.engine, work)
        # STALE -> HEALTHY goes through the full event transaction, exactly once (R6).
        for index, task_id, step_id, attempt, execution_id in recover:
            results[index] = self._recover_health(task_id, step_id, attempt, execution_id, items[index], caller)
        return {"results": results, "receivedAt": iso(now)}

    def _deadline_expr(self, now: datetime) -> Any:
        ts = t.task_step
        if self.engine.dialect.name == "sqlite":
            return sa.func.strftime(
                "%Y-%m-%d %H:%M:%f",
                now.isoformat(sep=" "),
                "+" + sa.cast(ts.c.heartbeat_timeout_seconds, sa.String) + " seconds",
            )
        return sa.func.timestampadd(sa.literal_column("SECOND"), ts.c.heartbeat_timeout_seconds, now)

    def _resolve_heartbeats(
        self,
        conn: sa.Connection,
        caller: ServicePrincipal,
        items: Sequence[c.Heartbeat],
        now: datetime,
        results: list[dict[str, Any] | None],
    ) -> dict[int, tuple[str, str, int, str]]:
        resolved: dict[int, tuple[str, str, int, str]] = {}
        hashes = {ids.handle_hash(h.execution_handle) for h in items if h.execution_handle}
        handles = {}
        if hashes:
            for row in conn.execute(
                sa.select(t.task_execution_handle).where(t.task_execution_handle.c.handle_hash.in_(hashes))
            ).mappings():
                handles[row["handle_hash"]] = row
        tenant_of: dict[str, tuple[str, str]] = {}
        for index, hb in enumerate(items):

            def reject(code: ErrorCode, execution_id: str | None = hb.execution_id, _i: int = index) -> None:
                results[_i] = {"executionId": execution_id, "accepted": False, "health": None, "reason": code.value}

            if hb.heartbeat_seq < 1:
                reject(ErrorCode.VALIDATION_FAILED)
                continue
            if hb.execution_handle:
                handle = handles.get(ids.handle_hash(hb.execution_handle))
                if handle is None:
                    reject(ErrorCode.TOKEN_REVOKED)
                    continue
                if handle["producer_id"] != caller.producer_id:
                    reject(ErrorCode.PRODUCER_MISMATCH, handle["execution_id"])
                    continue
                if handle["expires_at"] <= now:
                    reject(ErrorCode.TOKEN_EXPIRED, handle["execution_id"])
                    continue
                key = (handle["task_id"], handle["step_id"], handle["step_attempt"], handle["execution_id"])
            elif hb.execution_token:
                try:
                    claims = self._tokens.verify(hb.execution_token, now)
                except DomainError as err:
                    reject(err.code)
                    continue
                if claims.producer_id != caller.producer_id:
                    reject(ErrorCode.PRODUCER_MISMATCH, claims.execution_id)
                    continue
                if (claims.tenant_id, claims.authority_scope) != (caller.tenant_id, caller.authority_scope):
                    reject(ErrorCode.UNKNOWN_TASK, claims.execution_id)
                    continue
                key = (claims.task_id, claims.step_id, claims.step_attempt, claims.execution_id)
            else:
                reject(ErrorCode.UNAUTHENTICATED)
                continue
            if hb.execution_id is not None and hb.execution_id != key[3]:
                reject(ErrorCode.STALE_EXECUTION, hb.execution_id)
                continue
            if key[0] not in tenant_of:
                owner = conn.execute(
                    sa.select(t.task.c.tenant_id, t.task.c.authority_scope).where(t.task.c.id == key[0])
                ).first()
                tenant_of[key[0]] = (owner[0], owner[1]) if owner else ("", "")
            if tenant_of[key[0]] != (caller.tenant_id, caller.authority_scope):
                reject(ErrorCode.UNKNOWN_TASK, key[3])
                continue
            resolved[index] = key
        return resolved

    @staticmethod
    def _heartbeat_rejection(execution_id: str, hb: c.Heartbeat, row: Any) -> dict[str, Any] | None:
        """Why the light update touched nothing; None means "STALE: recover through an event"."""

        def no(code: ErrorCode, health: str | None = None) -> dict[str, Any]:
            return {"executionId": execution_id, "accepted": False, "health": health, "reason": code.value}

        if row is None:
            return no(ErrorCode.UNKNOWN_STEP)
        if row["superseded"]:
            return no(ErrorCode.STALE_ATTEMPT)
        if Lifecycle(row["lifecycle_status"]).terminal:
            return no(ErrorCode.TERMINAL_STATE)
        if row["lifecycle_status"] != Lifecycle.RUNNING.value:
            return no(ErrorCode.INVALID_TRANSITION)
        if hb.heartbeat_seq == row["last_heartbeat_seq"]:
            # A duplicate seq is an idempotent success (R6).
            return {"executionId": execution_id, "accepted": True, "health": row["health"], "reason": "DUPLICATE"}
        if hb.heartbeat_seq < row["last_heartbeat_seq"]:
            return no(ErrorCode.SOURCE_SEQ_REGRESSION, row["health"])
        if row["health"] == Health.STALE.value:
            return None
        return no(ErrorCode.INVALID_TRANSITION, row["health"])

    def _recover_health(
        self, task_id: str, step_id: str, attempt: int, execution_id: str, hb: c.Heartbeat, caller: ServicePrincipal
    ) -> dict[str, Any]:
        cmd = c.ReportEvent(
            event_id=f"health:{execution_id}:hb:{hb.heartbeat_seq}",
            event_type=EventType.STEP_HEALTH_CHANGED.value,
            source_seq=0,
            occurred_at=self.now(),
            task_id=task_id,
            step_id=step_id,
            step_attempt=attempt,
            execution_id=execution_id,
            health=Health.HEALTHY.value,
            reason="HEARTBEAT_RESUMED",
        )
        health_caller = ServicePrincipal(
            HEALTH_PRODUCER, caller.tenant_id, caller.authority_scope, frozenset({Role.HEALTH})
        )
        try:
            self.report_event(health_caller, cmd)
        except DomainError as err:
            if err.code is not ErrorCode.INVALID_TRANSITION:  # someone else recovered it first
                return {"executionId": execution_id, "accepted": False, "health": None, "reason": err.code.value}
        # The heartbeat itself now lands on the light path.
        ts = t.task_step

        def work(uow: UnitOfWork) -> None:
            uow.conn.execute(
                sa.update(ts)
                .where(
                    ts.c.task_id == task_id,
                    ts.c.step_id == step_id,
                    ts.c.attempt == attempt,
                    ts.c.last_heartbeat_seq < hb.heartbeat_seq,
                )
                .values(
                    last_heartbeat_seq=hb.heartbeat_seq,
                    last_heartbeat_at=self.now(),
                    heartbeat_deadline_at=self._deadline_expr(self.now()),
                )
            )
            uow.commit()

        run_in_transaction(self.engine, work)
        return {"executionId": execution_id, "accepted": True, "health": "HEALTHY", "reason": "RECOVERED"}

    def mark_stale(self, *, tenant_scope: tuple[str, str] | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """R7: overdue RUNNING+HEALTHY executions become STALE through the event transaction.

        Candidates are read without locks; each is re-checked under the task
        lock taken with SKIP LOCKED, so several reconcilers never collide and a
        reporter holding the task wins.
        """
        now = self.now()
        ts = t.task_step
        with self.engine.connect() as conn:
            candidates = conn.execute(
                sa.select(
                    ts.c.task_id,
                    ts.c.step_id,
                    ts.c.attempt,
                    ts.c.execution_id,
                    t.task.c.tenant_id,
                    t.task.c.authority_scope,
                )
                .join(t.task, t.task.c.id == ts.c.task_id)
                .where(
                    ts.c.lifecycle_status == Lifecycle.RUNNING.value,
                    ts.c.health == Health.HEALTHY.value,
                    ts.c.heartbeat_deadline_at <= now,
                    ts.c.superseded.is_(sa.false()),
                )
                .order_by(ts.c.heartbeat_deadline_at)
                .limit(limit)
            ).all()
        results = []
        for task_id, step_id, attempt, execution_id, tenant, scope in candidates:
            if tenant_scope is not None and (tenant, scope) != tenant_scope:
                continue
            caller = ServicePrincipal(HEALTH_PRODUCER, tenant, scope, frozenset({Role.HEALTH}))
            deadline = self.now()
            cmd = c.ReportEvent(
                event_id=f"health:{execution_id}:stale:{deadline.isoformat()}",
                event_type=EventType.STEP_HEALTH_CHANGED.value,
                source_seq=0,
                occurred_at=deadline,
                task_id=task_id,
                step_id=step_id,
                step_attempt=attempt,
                execution_id=execution_id,
                health=Health.STALE.value,
                reason="HEARTBEAT_TIMEOUT",
            )

            def work(
                uow: UnitOfWork,
                cmd: c.ReportEvent = cmd,
                caller: ServicePrincipal = caller,
                task_id: str = task_id,
                step_id: str = step_id,
                attempt: int = attempt,
            ) -> dict[str, Any] | None:
                locked = uow.conn.execute(
                    sa.select(t.task.c.id).where(t.task.c.id == task_id).with_for_update(skip_locked=True)
                ).first()
                if locked is None:
                    return None  # another reconciler or a reporter has it; next pass re-checks
                still_overdue = uow.conn.execute(
                    sa.select(ts.c.task_id).where(
                        ts.c.task_id == task_id,
                        ts.c.step_id == step_id,
                        ts.c.attempt == attempt,
                        ts.c.lifecycle_status == Lifecycle.RUNNING.value,
                        ts.c.health == Health.HEALTHY.value,
                        ts.c.heartbeat_deadline_at <= self.now(),
                    )
                ).first()
                if still_overdue is None:
                    return None
                return self._report(uow, caller, cmd, commit=True)

            try:
                outcome = run_in_transaction(self.engine, work)
            except DomainError:
                continue
            if outcome is not None:
                results.append(outcome)
        return results

    # ================================================================ helpers
    @staticmethod
    def _require(caller: ServicePrincipal, role: Role) -> None:
        if not caller.has(role):
            raise Forbidden(f"this needs the {role} role")

    @staticmethod
    def _check_title(title: str) -> None:
        if not title or len(title) > MAX_TITLE:
            raise Invalid(f"title must be 1–{MAX_TITLE} characters")

    @staticmethod
    def _check_heartbeat_settings(interval: int | None, timeout: int | None) -> None:
        if interval is not None and not 1 <= interval <= 3600:
            raise Invalid("heartbeatIntervalSeconds must be 1–3600")
        if timeout is not None and not 2 <= timeout <= 86400:
            raise Invalid("heartbeatTimeoutSeconds must be 2–86400")
        if interval is not None and timeout is not None and timeout < 2 * interval:
            raise Invalid("heartbeatTimeoutSeconds must cover at least two intervals")

    def _check_data_size(self, cmd: c.ReportEvent) -> None:
        for body in (cmd.data, cmd.summary):
            if body is not None and len(json.dumps(body.value, default=str)) > self._max_data_bytes:
                raise TooLarge(f"data is larger than {self._max_data_bytes} bytes; send a resultRef instead")

    def _lock_task_for(self, conn: sa.Connection, caller: ServicePrincipal, task_id: str) -> TaskState:
        task = repo.lock_task(conn, task_id)
        if task is None or (task.tenant_id, task.authority_scope) != (caller.tenant_id, caller.authority_scope):
            raise NotFound(f"task {task_id} does not exist", ErrorCode.UNKNOWN_TASK)
        return task

    # ================================================================ classification and access
    def classify(self, caller: ServicePrincipal, cmd: c.Classify) -> dict[str, Any]:
        """Bind productId / taskType / definition version (R11); each change is an event."""
        self._require(caller, Role.COORDINATOR)
        for name, value, limit in (("productId", cmd.product_id, 64), ("taskType", cmd.task_type, 128)):
            if value is not None:
                _check_key(name, value, limit)
        if not cmd.fields:
            raise Invalid("send at least one of productId, taskType, statusDefinitionVersion")

        def work(uow: UnitOfWork) -> dict[str, Any]:
            conn, now = uow.conn, self.now()
            task = self._lock_task_for(conn, caller, cmd.task_id)
            if cmd.expected_version is not None and cmd.expected_version != task.version:
                raise Conflict(
                    f"the task is at version {task.version}, not {cmd.expected_version}",
                    ErrorCode.VERSION_PRECONDITION_FAILED,
                )
            defs = self._definitions(conn, task.tenant_id, task.authority_scope)
            changes: dict[str, Any] = {}
            if "productId" in cmd.fields and cmd.product_id != task.product_id:
                changes["product_id"] = cmd.product_id  # a label: changes freely, audited by the event
            new_type = task.task_type
            if "taskType" in cmd.fields and cmd.task_type != task.task_type:
                if task.task_type is not None:
                    raise Conflict("taskType is frozen once set", ErrorCode.DEFINITION_FROZEN)
                new_type = cmd.task_type
                changes["task_type"] = new_type
            version = task.status_definition_version
            if "statusDefinitionVersion" in cmd.fields and cmd.status_definition_version != version:
                if version is not None:
                    raise Conflict("the status definition version is frozen once bound", ErrorCode.DEFINITION_FROZEN)
                version = cmd.status_definition_version
            elif version is None and new_type is not None and "taskType" in changes:
                version = defs.latest_status_version(new_type)
            if version != task.status_definition_version:
                if new_type is None or (new_type, version) not in defs.statuses:
                    raise Invalid(f"no status definition {new_type} v{version}", ErrorCode.UNKNOWN_BUSINESS_STATUS)
                statuses = defs.status_set(new_type, version)
                # The current business status must exist in the bound definition.
                if task.business_status not in statuses.statuses:
                    raise Invalid(
                        f"business status {task.business_status} is not in {new_type} v{version}",
                        ErrorCode.UNKNOWN_BUSINESS_STATUS,
                    )
                changes["status_definition_version"] = version
            if not changes:
                uow.commit()
                return {"taskId": task.task_id, "taskVersion": str(task.version), "changed": False}
            before = {
                "productId": task.product_id,
                "taskType": task.task_type,
                "statusDefinitionVersion": task.status_definition_version,
            }
            task = replace(task, **changes, version=task.version + 1, updated_at=now)
            repo.update_task(conn, task)
            self._freeze_statuses(conn, task)
            after = {
                "productId": task.product_id,
                "taskType": task.task_type,
                "statusDefinitionVersion": task.status_definition_version,
            }
            repo.insert_outbox(
                conn,
                self._service_event(
                    conn,
                    task,
                    repo.steps_of(conn, task.task_id),
                    EventType.TASK_CLASSIFIED,
                    caller.producer_id,
                    {"before": before, "after": after},
                    must_deliver=False,
                ),
            )
            uow.commit()
            return {"taskId": task.task_id, "taskVersion": str(task.version), "changed": True}

        return run_in_transaction(self.engine, work)

    def _freeze_statuses(self, conn: sa.Connection, task: TaskState) -> None:
        if task.task_type is None or task.status_definition_version is None:
            return
        sd = t.task_status_definition
        conn.execute(
            sa.update(sd)
            .where(
                sd.c.task_type == task.task_type,
                sd.c.definition_version == task.status_definition_version,
                sd.c.frozen_at.is_(None),
            )
            .values(frozen_at=self.now())
        )

    def grant_access(
        self, caller: ServicePrincipal, task_id: str, principal_type: str, principal_id: str, permission: str = "VIEW"
    ) -> dict[str, Any]:
        """Grant a principal access; the new user's summary channel gets the current state (seed §5)."""
        return self._change_access(caller, task_id, principal_type, principal_id, permission, grant=True)

    def revoke_access(
        self, caller: ServicePrincipal, task_id: str, principal_type: str, principal_id: str
    ) -> dict[str, Any]:
        """Revoke access; the user's summary channel gets a ``task.removed`` tombstone (AC26)."""
        return self._change_access(caller, task_id, principal_type, principal_id, "VIEW", grant=False)

    def _change_access(
        self,
        caller: ServicePrincipal,
        task_id: str,
        principal_type: str,
        principal_id: str,
        permission: str,
        *,
        grant: bool,
    ) -> dict[str, Any]:
        if not (caller.has(Role.COORDINATOR) or caller.has(Role.ADMIN)):
            raise Forbidden("changing access needs the COORDINATOR or ADMIN role")
        if principal_type not in ("USER", "PROJECT", "ROLE"):
            raise Invalid("principalType must be USER, PROJECT or ROLE")
        if permission not in ("VIEW", "OPERATE", "ADMIN"):
            raise Invalid("permission must be VIEW, OPERATE or ADMIN")
        _check_key("principalId", principal_id, 64)

        def work(uow: UnitOfWork) -> dict[str, Any]:
            conn, now = uow.conn, self.now()
            task = self._lock_task_for(conn, caller, task_id)
            acl = t.task_acl
            key = (acl.c.task_id == task_id, acl.c.principal_type == principal_type, acl.c.principal_id == principal_id)
            row = conn.execute(sa.select(acl).where(*key)).mappings().first()
            active = row is not None and row["revoked_at"] is None
            if grant and active and row is not None and row["permission"] == permission:
                uow.commit()
                return {"taskId": task_id, "taskVersion": str(task.version), "changed": False}
            if not grant and not active:
                uow.commit()
                return {"taskId": task_id, "taskVersion": str(task.version), "changed": False}
            if grant and row is None:
                conn.execute(
                    sa.insert(acl).values(
                        task_id=task_id,
                        principal_type=principal_type,
                        principal_id=principal_id,
                        tenant_id=task.tenant_id,
                        permission=permission,
                        created_at=now,
                    )
                )
            elif grant:
                conn.execute(sa.update(acl).where(*key).values(permission=permission, revoked_at=None))
            else:
                conn.execute(sa.update(acl).where(*key).values(revoked_at=now))
            task = replace(task, version=task.version + 1, updated_at=now)
            repo.update_task(conn, task)
            change = {
                "principalType": principal_type,
                "principalId": principal_id,
                "change": "GRANT" if grant else "REVOKE",
                "permission": permission,
            }
            rows = self._service_event(
                conn, task, repo.steps_of(conn, task.task_id), EventType.TASK_ACCESS_CHANGED, caller.producer_id, change
            )
            if not grant and principal_type == "USER" and principal_id != task.owner_id:
                rows.append(
                    {**rows[0], "channel": user_channel(task.tenant_id, principal_id), "payload": task_removed(task)}
                )
            repo.insert_outbox(conn, rows)
            uow.commit()
            return {"taskId": task_id, "taskVersion": str(task.version), "changed": True}

        return run_in_transaction(self.engine, work)

    # ================================================================ broadcasts (R12, seed §6.6)
    def broadcast(
        self,
        caller: ServicePrincipal,
        *,
        broadcast_id: str,
        audience: str,
        level: str,
        text: str,
        project_id: str | None = None,
        user_ids: Sequence[str] = (),
    ) -> dict[str, Any]:
        """A notice to a wider audience; the wider it goes, the smaller the payload (text only).

        ``SYSTEM`` needs ADMIN; ``TENANT``/``PROJECT``/``USERS`` stay inside the caller's tenant.
        ``USERS`` fans out to each user's summary channel in batches of 500 (one
        Centrifugo broadcast call each).  Idempotent by ``broadcastId``.
        """
        _check_key("broadcastId", broadcast_id)
        if audience == "SYSTEM" and not caller.has(Role.ADMIN):
            raise Forbidden("system broadcasts need the ADMIN role")
        if not (caller.has(Role.COORDINATOR) or caller.has(Role.ADMIN)):
            raise Forbidden("broadcasts need the COORDINATOR or ADMIN role")
        if level not in ("INFO", "WARNING", "ERROR") or not 0 < len(text) <= 500:
            raise Invalid("level must be INFO, WARNING or ERROR and text 1–500 characters")
        now = self.now()
        payload = system_broadcast(broadcast_id, level, text, now)
        if audience == "SYSTEM":
            targets = [(SYSTEM_CHANNEL, Projection.SYSTEM_BROADCAST, payload)]
        elif audience == "TENANT":
            targets = [(tenant_channel(caller.tenant_id), Projection.TENANT_BROADCAST, payload)]
        elif audience == "PROJECT" and project_id:
            _check_key("projectId", project_id, 64)
            targets = [(project_channel(caller.tenant_id, project_id), Projection.PROJECT_BROADCAST, payload)]
        elif audience == "USERS" and user_ids:
            if len(user_ids) > 100_000:
                raise Invalid("at most 100000 users per broadcast")
            for user_id in user_ids:
                _check_key("userId", user_id, 64)
            channels = [user_channel(caller.tenant_id, u) for u in dict.fromkeys(user_ids)]
            targets = [
                (
                    f"fanout:{broadcast_id}:{i // 500}",
                    Projection.USER_FANOUT,
                    {"channels": channels[i : i + 500], "data": payload},
                )
                for i in range(0, len(channels), 500)
            ]
        else:
            raise Invalid("audience must be SYSTEM, TENANT, PROJECT (with projectId) or USERS (with userIds)")
        rows = [
            {
                "aggregate_type": "BROADCAST",
                "aggregate_id": f"{caller.tenant_id}:{broadcast_id}",
                "aggregate_version": 1,
                "channel": channel,
                "projection": projection,
                "must_deliver": True,
                "event_id": None,
                "payload": body,
                "status": "PENDING",
                "available_at": now,
                "created_at": now,
            }
            for channel, projection, body in targets
        ]

        def work(uow: UnitOfWork) -> dict[str, Any]:
            ob = t.task_outbox
            seen = uow.conn.execute(
                sa.select(sa.func.count())
                .select_from(ob)
                .where(ob.c.aggregate_type == "BROADCAST", ob.c.aggregate_id == rows[0]["aggregate_id"])
            ).scalar_one()
            if not seen:
                repo.insert_outbox(uow.conn, rows)
            uow.commit()
            return {"broadcastId": broadcast_id, "messages": len(rows), "duplicate": bool(seen)}

        return run_in_transaction(self.engine, work)

    # ================================================================ reads (public API)
    def _visible(self, user: UserPrincipal) -> Any:
        return repo.visible_task_filter(user.tenant_id, user.user_id, user.project_ids, user.role_ids)

    def can_see_task(self, conn: sa.Connection, user: UserPrincipal, task_id: str) -> bool:
        return (
            conn.execute(sa.select(t.task.c.id).where(t.task.c.id == task_id, self._visible(user))).first() is not None
        )

    def get_task(self, user: UserPrincipal, task_id: str) -> dict[str, Any]:
        """The snapshot, or NOT_FOUND when the task doesn't exist *or* isn't visible (no probing)."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(t.task).where(t.task.c.id == task_id, self._visible(user))).mappings().first()
            if row is None:
                raise NotFound("task not found", ErrorCode.NOT_FOUND)
            task = repo.task_from_row(row)
            return task_snapshot(task, repo.steps_of(conn, task_id), self.now())

    def task_events(self, user: UserPrincipal, task_id: str, after_version: int, limit: int) -> dict[str, Any]:
        """The committed timeline after ``after_version`` (AC18); says when history was purged."""
        limit = max(1, min(limit, 500))
        with self.engine.connect() as conn:
            if not self.can_see_task(conn, user, task_id):
                raise NotFound("task not found", ErrorCode.NOT_FOUND)
            log = t.task_event_log
            rows = (
                conn.execute(
                    sa.select(log)
                    .where(log.c.task_id == task_id, log.c.task_version > after_version)
                    .order_by(log.c.task_version)
                    .limit(limit + 1)
                )
                .mappings()
                .all()
            )
            oldest = conn.execute(sa.select(sa.func.min(log.c.task_version)).where(log.c.task_id == task_id)).scalar()
        truncated = oldest is not None and oldest > after_version + 1
        events = [
            {
                "eventId": r["event_id"],
                "eventType": r["event_type"],
                "taskVersion": str(r["task_version"]),
                "stepId": r["step_id"],
                "stepAttempt": r["step_attempt"],
                "operationCode": r["operation_code"],
                "stepVersion": str(r["step_version"]) if r["step_version"] is not None else None,
                "lifecycleStatus": r["lifecycle_status"],
                "businessStatus": r["business_status"],
                "health": r["health"],
                "dataSchema": r["data_schema"],
                "errorCode": r["error_code"],
                "durationMs": r["duration_ms"],
                "occurredAt": iso(r["occurred_at"]),
                "committedAt": iso(r["committed_at"]),
            }
            for r in rows[:limit]
        ]
        return {
            "taskId": task_id,
            "events": events,
            "historyTruncated": truncated,
            "oldestAvailableVersion": str(oldest) if oldest is not None else None,
            "hasMore": len(rows) > limit,
        }

    def batch_get(self, user: UserPrincipal, task_ids: Sequence[str], known: dict[str, int]) -> dict[str, Any]:
        """Snapshots of the tasks whose version is newer than the caller's (two-level recovery)."""
        wanted = list(dict.fromkeys(task_ids))
        if len(wanted) > 100:
            raise Invalid("at most 100 taskIds per request")
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t.task).where(t.task.c.id.in_(wanted), self._visible(user))).mappings().all()
            tasks = {r["id"]: repo.task_from_row(r) for r in rows}
            changed = [tid for tid, task in tasks.items() if task.version > known.get(tid, 0)]
            steps: dict[str, list[StepState]] = {tid: [] for tid in changed}
            if changed:
                for r in conn.execute(sa.select(t.task_step).where(t.task_step.c.task_id.in_(changed))).mappings():
                    steps[r["task_id"]].append(repo.step_from_row(r))
        now = self.now()
        return {
            "tasks": [task_snapshot(tasks[tid], steps[tid], now) for tid in changed],
            "unchanged": [tid for tid in tasks if tid not in changed],
            "notFound": [tid for tid in wanted if tid not in tasks],
            "asOf": iso(now),
        }

    def my_tasks(self, user: UserPrincipal, cursor: str | None, limit: int) -> dict[str, Any]:
        """The user's visible tasks, newest first, keyset-paginated."""
        limit = max(1, min(limit, 100))
        query = sa.select(t.task).where(self._visible(user))
        if cursor:
            created, task_id = _decode_cursor(cursor)
            query = query.where(
                sa.or_(t.task.c.created_at < created, sa.and_(t.task.c.created_at == created, t.task.c.id < task_id))
            )
        query = query.order_by(t.task.c.created_at.desc(), t.task.c.id.desc()).limit(limit + 1)
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
            tasks = [repo.task_from_row(r) for r in rows[:limit]]
            steps: dict[str, list[StepState]] = {task.task_id: [] for task in tasks}
            if tasks:
                for r in conn.execute(sa.select(t.task_step).where(t.task_step.c.task_id.in_(list(steps)))).mappings():
                    steps[r["task_id"]].append(repo.step_from_row(r))
        now = self.now()
        next_cursor = _encode_cursor(tasks[-1].created_at, tasks[-1].task_id) if len(rows) > limit else None
        return {"tasks": [user_summary(task, steps[task.task_id], now) for task in tasks], "nextCursor": next_cursor}

    def get_workflow(self, user: UserPrincipal, workflow_id: str, *, with_tasks: bool) -> dict[str, Any]:
        """The workflow summary and its ACL-trimmed tasks; NOT_FOUND unless the user sees it."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(t.workflow).where(t.workflow.c.id == workflow_id)).mappings().first()
            if row is None or row["tenant_id"] != user.tenant_id:
                raise NotFound("workflow not found", ErrorCode.NOT_FOUND)
            task_rows = (
                conn.execute(
                    sa.select(t.task)
                    .where(t.task.c.workflow_id == workflow_id, self._visible(user))
                    .order_by(t.task.c.created_at, t.task.c.id)
                )
                .mappings()
                .all()
            )
            if row["owner_id"] != user.user_id and not task_rows:
                raise NotFound("workflow not found", ErrorCode.NOT_FOUND)
            workflow = repo.workflow_from_row(row)
            result = workflow_summary(workflow, self.now())
            if with_tasks:
                tasks = [repo.task_from_row(r) for r in task_rows]
                steps: dict[str, list[StepState]] = {task.task_id: [] for task in tasks}
                if tasks:
                    for r in conn.execute(
                        sa.select(t.task_step).where(t.task_step.c.task_id.in_(list(steps)))
                    ).mappings():
                        steps[r["task_id"]].append(repo.step_from_row(r))
                now = self.now()
                result = {"workflow": result, "tasks": [user_summary(x, steps[x.task_id], now) for x in tasks]}
            return result

    def snapshot(self, task_id: str) -> dict[str, Any] | None:
        """The current detail state of a task (no access check: callers check visibility)."""
        with self.engine.connect() as conn:
            task = repo.load_task(conn, task_id)
            if task is None:
                return None
            return task_snapshot(task, repo.steps_of(conn, task_id), self.now())


def _encode_cursor(created_at: datetime, task_id: str) -> str:
    raw = json.dumps([created_at.isoformat(), task_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, task_id = json.loads(raw)
        return datetime.fromisoformat(created), str(task_id)
    except (ValueError, TypeError) as exc:
        raise Invalid("cursor is not valid") from exc
