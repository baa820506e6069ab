"""The stores' SQL: row <-> domain mapping and the statements the stores share (write and read paths).

All functions take an open ``Connection`` inside a unit of work; none commits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from status.app.records import ChangeRecord, DedupRecord, EventRecord, NotificationRecord
from status.domain.lifecycle import Health, Lifecycle
from status.domain.messages import Message
from status.domain.model import Progress, StepError, StepState, TaskState, WorkflowState
from status.infra import outbox_rows
from status.infra import tables as t
from status.infra.inserts import Inserter
from status.infra.prepared import PreparedRead, listed


# ------------------------------------------------------------------ mapping
def task_from_row(row: Mapping[Any, Any]) -> TaskState:
    return TaskState(
        task_id=row["id"],
        workflow_id=row["workflow_id"],
        client_task_key=row["client_task_key"],
        tenant_id=row["tenant_id"],
        owner_id=row["owner_id"],
        authority_scope=row["authority_scope"],
        bucket_id=row["bucket_id"],
        title=row["title"],
        lifecycle=Lifecycle(row["lifecycle_status"]),
        business_status=row["business_status"],
        version=int(row["version"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        attempt=row["attempt"],
        coordinator_source_seq=int(row["coordinator_source_seq"]),
        health=Health(row["health"]),
        product_id=row["product_id"],
        task_type=row["task_type"],
        project_id=row["project_id"],
        status_definition_version=row["status_definition_version"],
        operation_definition_version=row["operation_definition_version"],
        summary_schema=row["summary_schema"],
        summary_data=row["summary_data"],
        failure=StepError(
            category=row["failure_category"] or "UNKNOWN",
            code=row["failure_code"],
            user_message=row["failure_message"] or "",
            retryable=row["failure_retryable"],
            diagnostics_ref=row["failure_diagnostics_ref"],
        )
        if row["failure_code"] is not None
        else None,
        failed_step_id=row["failed_step_id"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        duration_ms=row["duration_ms"],
        dynamic_step_count=row["dynamic_step_count"],
        stuck_since=row["workflow_stuck_since"],
        end_reason=row["end_reason"],
    )


def task_values(task: TaskState) -> dict[str, Any]:
    """Mutable columns of a task (identity columns never change)."""
    return {
        "title": task.title,
        "lifecycle_status": task.lifecycle.value,
        "business_status": task.business_status,
        "version": task.version,
        "attempt": task.attempt,
        "coordinator_source_seq": task.coordinator_source_seq,
        "health": task.health.value,
        "product_id": task.product_id,
        "task_type": task.task_type,
        "project_id": task.project_id,
        "status_definition_version": task.status_definition_version,
        "operation_definition_version": task.operation_definition_version,
        "summary_schema": task.summary_schema,
        "summary_data": task.summary_data,
        **_failure_values(task.failure),
        "failed_step_id": task.failed_step_id,
        "started_at": task.started_at,
        "finished_at": task.finished_at,
        "duration_ms": task.duration_ms,
        "dynamic_step_count": task.dynamic_step_count,
        "workflow_stuck_since": task.stuck_since,
        "end_reason": task.end_reason,
        "updated_at": task.updated_at,
    }


def _failure_values(failure: StepError | None) -> dict[str, Any]:
    return {
        "failure_category": failure.category if failure else None,
        "failure_code": failure.code if failure else None,
        "failure_message": failure.user_message if failure else None,
        "failure_retryable": failure.retryable if failure else None,
        "failure_diagnostics_ref": failure.diagnostics_ref if failure else None,
    }


def step_from_row(row: Mapping[Any, Any]) -> StepState:
    progress = None
    if row["progress_current"] is not None:
        progress = Progress(row["progress_current"], row["progress_total"], row["progress_unit"])
    error = None
    if row["error_code"] is not None:
        error = StepError(
            category=row["error_category"] or "UNKNOWN",
            code=row["error_code"],
            user_message=row["error_message"] or "",
            retryable=row["error_retryable"],
            diagnostics_ref=row["diagnostics_ref"],
        )
    return StepState(
        task_id=row["task_id"],
        step_id=row["step_id"],
        attempt=row["attempt"],
        client_step_key=row["client_step_key"],
        operation_code=row["operation_code"],
        operation_definition_version=row["operation_definition_version"],
        service_name=row["service_name"],
        lifecycle=Lifecycle(row["lifecycle_status"]),
        business_status=row["business_status"],
        version=int(row["version"]),
        step_kind=row["step_kind"],
        display_name=row["display_name"],
        step_order=row["step_order"],
        parent_execution_id=row["parent_execution_id"],
        depth=row["depth"],
        producer_id=row["producer_id"],
        execution_id=row["execution_id"],
        superseded=bool(row["superseded"]),
        source_seq=int(row["source_seq"]),
        health=Health(row["health"]),
        heartbeat_interval_seconds=row["heartbeat_interval_seconds"],
        heartbeat_timeout_seconds=row["heartbeat_timeout_seconds"],
        last_heartbeat_seq=int(row["last_heartbeat_seq"]),
        last_heartbeat_at=row["last_heartbeat_at"],
        stale_since=row["stale_since"],
        progress=progress,
        phase_code=row["phase_code"],
        phase_label=row["phase_label"],
        data_schema=row["data_schema"],
        state_data=row["state_data"],
        activated_at=row["activated_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        duration_ms=row["duration_ms"],
        error=error,
        failure_policy=row["failure_policy"],
        updated_at=row["updated_at"],
        temporal_activity=row["temporal_activity"],
        temporal_attempt=row["temporal_attempt"],
    )


def step_values(step: StepState) -> dict[str, Any]:
    deadline = None
    if step.lifecycle is Lifecycle.RUNNING and step.heartbeat_timeout_seconds and step.last_heartbeat_at is not None:
        deadline = step.last_heartbeat_at + timedelta(seconds=step.heartbeat_timeout_seconds)
    err = step.error
    return {
        "client_step_key": step.client_step_key,
        "step_kind": step.step_kind,
        "display_name": step.display_name,
        "step_order": step.step_order,
        "parent_execution_id": step.parent_execution_id,
        "depth": step.depth,
        "operation_code": step.operation_code,
        "operation_definition_version": step.operation_definition_version,
        "service_name": step.service_name,
        "producer_id": step.producer_id,
        "execution_id": step.execution_id,
        "superseded": step.superseded,
        "failure_policy": step.failure_policy,
        "source_seq": step.source_seq,
        "version": step.version,
        "lifecycle_status": step.lifecycle.value,
        "business_status": step.business_status,
        "health": step.health.value,
        "heartbeat_interval_seconds": step.heartbeat_interval_seconds,
        "heartbeat_timeout_seconds": step.heartbeat_timeout_seconds,
        "last_heartbeat_seq": step.last_heartbeat_seq,
        "last_heartbeat_at": step.last_heartbeat_at,
        "heartbeat_deadline_at": deadline,
        "stale_since": step.stale_since,
        "progress_current": step.progress.current if step.progress else None,
        "progress_total": step.progress.total if step.progress else None,
        "progress_unit": step.progress.unit if step.progress else None,
        "phase_code": step.phase_code,
        "phase_label": step.phase_label,
        "data_schema": step.data_schema,
        "state_data": step.state_data,
        "activated_at": step.activated_at,
        "started_at": step.started_at,
        "finished_at": step.finished_at,
        "duration_ms": step.duration_ms,
        "error_category": err.category if err else None,
        "error_code": err.code if err else None,
        "error_message": err.user_message if err else None,
        "error_retryable": err.retryable if err else None,
        "diagnostics_ref": err.diagnostics_ref if err else None,
        "updated_at": step.updated_at,
        "temporal_activity": step.temporal_activity,
        "temporal_attempt": step.temporal_attempt,
    }


def workflow_from_row(row: Mapping[Any, Any]) -> WorkflowState:
    return WorkflowState(
        workflow_id=row["id"],
        tenant_id=row["tenant_id"],
        owner_id=row["owner_id"],
        authority_scope=row["authority_scope"],
        client_workflow_key=row["client_workflow_key"],
        title=row["title"],
        lifecycle=Lifecycle(row["lifecycle_status"]),
        version=int(row["version"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        workflow_type=row["workflow_type"],
        health=Health(row["health"]),
        task_count=row["task_count"],
        aggregate=row["aggregate"] or {},
        started_at=row["started_at"],
        finished_at=row["finished_at"],
    )


# ------------------------------------------------------------------ statements
# The hot path's statements are built once with bind parameters, so each call
# only binds values: building ``.values({...})`` per call costs more CPU than
# the database round trip it describes.
_LOCK_TASK = sa.select(t.task).where(t.task.c.id == sa.bindparam("_id")).with_for_update()
_LOAD_TASK = sa.select(t.task).where(t.task.c.id == sa.bindparam("_id"))
# The event path's first statement: lock the task reading only its version (a cached
# state at that version is current) plus the event's dedup entry, in one round trip.
_LOCK_TASK_VERSION = PreparedRead(
    lambda _: (
        sa.select(
            t.task.c.version,
            t.task_event_dedup.c.payload_hash,
            t.task_event_dedup.c.result,
            t.task.c.detail_watched_until,
        )
        .select_from(
            t.task.outerjoin(
                t.task_event_dedup,
                sa.and_(
                    t.task_event_dedup.c.tenant_id == t.task.c.tenant_id,
                    t.task_event_dedup.c.event_id == sa.bindparam("_event_id"),
                ),
            )
        )
        .where(t.task.c.id == sa.bindparam("_id"))
        .with_for_update()
    )
)
_STEPS = sa.select(t.task_step).where(t.task_step.c.task_id == sa.bindparam("_task_id"))
_LOCK_STEPS = _STEPS.with_for_update()
_LOCK_STEP = (
    sa.select(t.task_step)
    .where(
        t.task_step.c.task_id == sa.bindparam("_task_id"),
        t.task_step.c.step_id == sa.bindparam("_step_id"),
        t.task_step.c.attempt == sa.bindparam("_attempt"),
    )
    .with_for_update()
)
_UPDATE_TASK = sa.update(t.task).where(t.task.c.id == sa.bindparam("_id"))
_UPDATE_STEP = sa.update(t.task_step).where(
    t.task_step.c.task_id == sa.bindparam("_task_id"),
    t.task_step.c.step_id == sa.bindparam("_step_id"),
    t.task_step.c.attempt == sa.bindparam("_attempt"),
)
INSERT_STEP = _INSERT_STEP = sa.insert(t.task_step)
_INSERT_OUTBOX = Inserter(t.task_outbox)
_ACL_GRANTS = sa.select(t.task_acl.c.principal_type, t.task_acl.c.principal_id).where(
    t.task_acl.c.task_id == sa.bindparam("_task_id"),
    t.task_acl.c.revoked_at.is_(None),
)


def lock_task(conn: sa.Connection, task_id: str) -> TaskState | None:
    row = conn.execute(_LOCK_TASK, {"_id": task_id}).mappings().first()
    return task_from_row(row) if row else None


def lock_task_version(conn: sa.Connection, task_id: str, event_id: str) -> Any:
    """Lock a task; (version, dedup payload hash, dedup result, detail watched until) — the dedup
    entry of ``event_id`` in the task's tenant — or None when there is no such task."""
    rows = _LOCK_TASK_VERSION.rows(conn, {"_id": task_id, "_event_id": event_id})
    return rows[0] if rows else None


def load_task(conn: sa.Connection, task_id: str) -> TaskState | None:
    row = conn.execute(_LOAD_TASK, {"_id": task_id}).mappings().first()
    return task_from_row(row) if row else None


def steps_of(conn: sa.Connection, task_id: str, *, lock: bool = False) -> list[StepState]:
    # With lock=True: the task row is already locked, so this adds no contention
    # between reporters; it orders us against the heartbeat light path.
    query = _LOCK_STEPS if lock else _STEPS
    return [step_from_row(r) for r in conn.execute(query, {"_task_id": task_id}).mappings()]


STEPS_OF_TASKS = PreparedRead(lambda n: sa.select(t.task_step).where(listed(t.task_step.c.task_id, n)))
STEP_COLUMNS = tuple(column.name for column in t.task_step.columns)


def steps_of_tasks(conn: sa.Connection, task_ids: Sequence[str]) -> dict[str, list[StepState]]:
    """The steps of several tasks in one read (lists, batch snapshots, a group's tasks not cached)."""
    steps: dict[str, list[StepState]] = {task_id: [] for task_id in task_ids}
    if steps:
        for row in STEPS_OF_TASKS.rows(conn, {}, list(steps)):
            r = dict(zip(STEP_COLUMNS, row, strict=True))
            steps[r["task_id"]].append(step_from_row(r))
    return steps


def update_task(conn: sa.Connection, task: TaskState, before: TaskState | None = None) -> None:
    """Write a task's mutable columns; with ``before``, only the ones that changed."""
    values = task_values(task)
    if before is not None:
        old = task_values(before)
        values = {k: v for k, v in values.items() if old[k] != v}
        if not values:
            return
    conn.execute(_UPDATE_TASK, {"_id": task.task_id, **values})


def update_step(conn: sa.Connection, step: StepState, before: StepState | None = None) -> None:
    """Write a step's mutable columns; with ``before``, only the ones that changed."""
    values = step_values(step)
    if before is not None:
        old = step_values(before)
        values = {k: v for k, v in values.items() if old[k] != v}
        if not values:
            return
    conn.execute(_UPDATE_STEP, {"_task_id": step.task_id, "_step_id": step.step_id, "_attempt": step.attempt, **values})


def lock_step(conn: sa.Connection, task_id: str, step_id: str, attempt: int) -> StepState | None:
    """One step attempt, locked (the task row is already locked by the caller)."""
    row = conn.execute(_LOCK_STEP, {"_task_id": task_id, "_step_id": step_id, "_attempt": attempt}).mappings().first()
    return step_from_row(row) if row else None


def insert_step(conn: sa.Connection, step: StepState) -> None:
    conn.execute(
        _INSERT_STEP, {"task_id": step.task_id, "step_id": step.step_id, "attempt": step.attempt, **step_values(step)}
    )


def insert_outbox(conn: sa.Connection, messages: Sequence[Message]) -> None:
    """Each change's messages as one outbox row (``status.infra.outbox_rows``), one multi-row INSERT."""
    if messages:
        _INSERT_OUTBOX(conn, outbox_rows.pack(messages))


_INSERT_CHANGE = Inserter(t.workflow_change)
_INSERT_EVENT = Inserter(t.task_event_log)
_INSERT_DEDUP = Inserter(t.task_event_dedup)
_INSERT_NOTIFICATION = Inserter(t.user_notification)


_REVOKE_HANDLES = (
    sa.update(t.task_execution_handle)
    .where(
        t.task_execution_handle.c.execution_id == sa.bindparam("_execution_id"),
        t.task_execution_handle.c.revoked_at.is_(None),
    )
    .values(revoked_at=sa.bindparam("_now"), revoke_reason=sa.bindparam("_reason"))
)


def revoke_handles(conn: sa.Connection, execution_id: str | None, reason: str, now: datetime) -> None:
    """Revoke every live handle of an execution (its step finished, or a newer attempt superseded it)."""
    if execution_id is not None:
        conn.execute(_REVOKE_HANDLES, {"_execution_id": execution_id, "_now": now, "_reason": reason})


def insert_notifications(conn: sa.Connection, rows: Sequence[NotificationRecord]) -> None:
    """Stored notifications (one multi-row INSERT)."""
    if rows:
        _INSERT_NOTIFICATION(conn, rows)


def insert_changes(conn: sa.Connection, rows: Sequence[ChangeRecord]) -> None:
    """Workflow projector feed rows (one multi-row INSERT)."""
    if rows:
        _INSERT_CHANGE(conn, rows)


def insert_events(conn: sa.Connection, rows: Sequence[EventRecord]) -> None:
    """Event-log rows (one multi-row INSERT)."""
    if rows:
        _INSERT_EVENT(conn, rows)


def insert_dedups(conn: sa.Connection, rows: Sequence[DedupRecord]) -> None:
    """Idempotency results (one multi-row INSERT)."""
    if rows:
        _INSERT_DEDUP(conn, rows)


def acl_grants(conn: sa.Connection, task_id: str) -> list[tuple[str, str]]:
    """The task's unrevoked grants as (principal type, principal id): USER, PROJECT and ROLE."""
    return [(row[0], row[1]) for row in conn.execute(_ACL_GRANTS, {"_task_id": task_id})]


def visible_task_filter(tenant_id: str, user_id: str, projects: Iterable[str], roles: Iterable[str]) -> Any:
    """SQL condition: the user owns the task or holds an unrevoked grant (design D3)."""
    grants = [sa.and_(t.task_acl.c.principal_type == "USER", t.task_acl.c.principal_id == user_id)]
    if projects:
        grants.append(sa.and_(t.task_acl.c.principal_type == "PROJECT", t.task_acl.c.principal_id.in_(list(projects))))
    if roles:
        grants.append(sa.and_(t.task_acl.c.principal_type == "ROLE", t.task_acl.c.principal_id.in_(list(roles))))
    granted = (
        sa.select(t.task_acl.c.task_id)
        .where(t.task_acl.c.task_id == t.task.c.id, t.task_acl.c.revoked_at.is_(None), sa.or_(*grants))
        .exists()
    )
    return sa.and_(t.task.c.tenant_id == tenant_id, sa.or_(t.task.c.owner_id == user_id, granted))
