"""Task and step rows, execution handles, and the insert-only rows of a change."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from status.app.ports import GroupReads
from status.app.records import ChangeRecord, DedupRecord, EventRecord, HandleRecord, NotificationRecord
from status.domain.auth import StoredHandle
from status.domain.messages import Aggregate, Message
from status.domain.model import StepState, TaskState
from status.infra import tables as t
from status.infra.inserts import Inserter
from status.infra.prepared import PreparedRead, listed, rows_together
from status.infra.stores import sql
from status.infra.stores.bulk import changed_columns, update_rows

_HANDLE = t.task_execution_handle


_INSERT_HANDLES = Inserter(_HANDLE)
_HANDLES = PreparedRead(
    lambda n: sa.select(
        _HANDLE.c.handle_hash,
        _HANDLE.c.task_id,
        _HANDLE.c.step_id,
        _HANDLE.c.step_attempt,
        _HANDLE.c.execution_id,
        _HANDLE.c.producer_id,
        _HANDLE.c.expires_at,
        _HANDLE.c.revoked_at,
        _HANDLE.c.revoke_reason,
    ).where(listed(_HANDLE.c.handle_hash, n))
)
# Locked in id order, so concurrent groups never deadlock-loop.
_LOCK_VERSIONS = PreparedRead(
    lambda n: (
        sa.select(t.task.c.id, t.task.c.version, t.task.c.detail_watched_until)
        .where(listed(t.task.c.id, n))
        .order_by(t.task.c.id)
        .with_for_update()
    )
)
_DEDUP = t.task_event_dedup
_DEDUPS = PreparedRead(
    lambda n: sa.select(_DEDUP.c.tenant_id, _DEDUP.c.event_id, _DEDUP.c.payload_hash, _DEDUP.c.result).where(
        _DEDUP.c.tenant_id == sa.bindparam("_tenant"), listed(_DEDUP.c.event_id, n)
    )
)

# A group's tasks the view cache does not hold (status/app/step_cache.py): read by id, as the
# group's other reads are (status/infra/prepared.py).
_TASKS = PreparedRead(lambda n: sa.select(t.task).where(listed(t.task.c.id, n)))
_TASK_COLUMNS = tuple(column.name for column in t.task.columns)
_ACL = t.task_acl
_GRANTS = PreparedRead(
    lambda n: sa.select(_ACL.c.task_id, _ACL.c.principal_type, _ACL.c.principal_id).where(
        listed(_ACL.c.task_id, n), _ACL.c.revoked_at.is_(None)
    )
)


def handles_by_hash(conn: sa.Connection, hashes: Iterable[str]) -> dict[str, StoredHandle]:
    """Execution handles by hash: task, step, attempt, execution, producer, expiry, revocation."""
    wanted = sorted(set(hashes))
    if not wanted:
        return {}
    return {row[0]: StoredHandle(*row[1:]) for row in _HANDLES.rows(conn, {}, wanted)}


class SqlTaskStore:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    # ------------------------------------------------------------ a group of events, as a set
    def lock_versions(self, task_ids: Sequence[str]) -> dict[str, int]:
        """Lock these tasks in one statement (id order, so concurrent groups never deadlock-loop);
        the version of each that exists."""
        return self.lock_and_probe(task_ids, ()).versions

    def dedup_entries(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], tuple[str, Any]]:
        """Stored results of these (tenant, eventId)s: (payload hash, result); one read per tenant
        (a group's events are almost always one tenant's)."""
        return self.lock_and_probe((), keys).stored

    def lock_and_probe(
        self, task_ids: Sequence[str], keys: Iterable[tuple[str, str]], hashes: Iterable[str] = ()
    ) -> GroupReads:
        """Lock these tasks (id order), look up these (tenant, eventId)s' stored results and read
        these handles — after the locks, so a revocation committed before them is seen — as one
        query."""
        locking = sorted(set(task_ids))
        by_tenant: dict[str, set[str]] = {}
        for tenant, event_id in keys:
            by_tenant.setdefault(tenant, set()).add(event_id)
        tenants = sorted(by_tenant)
        wanted = sorted(set(hashes))
        reads: list[tuple[PreparedRead, dict[str, Any], Sequence[Any]]] = (
            [(_LOCK_VERSIONS, {}, locking)] if locking else []
        )
        reads += [(_DEDUPS, {"_tenant": tenant}, sorted(by_tenant[tenant])) for tenant in tenants]
        reads += [(_HANDLES, {}, wanted)] if wanted else []
        found = iter(rows_together(self._conn, reads))
        locked = next(found) if locking else []
        stored = {
            (tenant, event_id): (payload_hash, result)
            for _ in tenants
            for tenant, event_id, payload_hash, result in next(found)
        }
        return GroupReads(
            versions={task_id: int(version) for task_id, version, _ in locked},
            watched_until={task_id: until for task_id, _, until in locked},
            stored=stored,
            handles={row[0]: StoredHandle(*row[1:]) for row in next(found)} if wanted else {},
        )

    def watch_detail(self, task_id: str, until: datetime) -> None:
        task = t.task
        self._conn.execute(
            sa.update(task)
            .where(
                task.c.id == task_id,
                sa.or_(task.c.detail_watched_until.is_(None), task.c.detail_watched_until < until),
            )
            .values(detail_watched_until=until)
        )

    def views_of(
        self, task_ids: Sequence[str]
    ) -> tuple[dict[str, TaskState], dict[str, list[StepState]], dict[str, list[tuple[str, str]]]]:
        """These tasks' rows, their steps and their unrevoked grants (principal type, id), as one query."""
        if not task_ids:
            return {}, {}, {}
        listed = list(task_ids)
        tasks, steps, grants = rows_together(
            self._conn, [(_TASKS, {}, listed), (sql.STEPS_OF_TASKS, {}, listed), (_GRANTS, {}, listed)]
        )
        loaded = {row[0]: sql.task_from_row(dict(zip(_TASK_COLUMNS, row, strict=True))) for row in tasks}
        by_task: dict[str, list[StepState]] = {task_id: [] for task_id in loaded}
        for row in steps:
            step = sql.step_from_row(dict(zip(sql.STEP_COLUMNS, row, strict=True)))
            by_task.setdefault(step.task_id, []).append(step)
        granted: dict[str, list[tuple[str, str]]] = {task_id: [] for task_id in loaded}
        for task_id, principal_type, principal_id in grants:
            granted.setdefault(task_id, []).append((principal_type, principal_id))
        return loaded, by_task, granted

    def load_many(self, task_ids: Sequence[str]) -> dict[str, TaskState]:
        if not task_ids:
            return {}
        rows = (dict(zip(_TASK_COLUMNS, row, strict=True)) for row in _TASKS.rows(self._conn, {}, list(task_ids)))
        return {row["id"]: sql.task_from_row(row) for row in rows}

    def acl_grants_of(self, task_ids: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
        """Unrevoked grants as (principal type, principal id), per task."""
        grants: dict[str, list[tuple[str, str]]] = {task_id: [] for task_id in task_ids}
        if grants:
            for task_id, principal_type, principal_id in _GRANTS.rows(self._conn, {}, list(grants)):
                grants[task_id].append((principal_type, principal_id))
        return grants

    def insert_steps(self, steps: Sequence[StepState]) -> None:
        """New step attempts, as a group leaves them (one multi-row INSERT)."""
        if steps:
            self._conn.execute(
                sql.INSERT_STEP,
                [
                    {"task_id": s.task_id, "step_id": s.step_id, "attempt": s.attempt, **sql.step_values(s)}
                    for s in steps
                ],
            )

    def insert_handles(self, rows: Sequence[HandleRecord]) -> None:
        """Fresh execution handles (their fields: ``task_execution_handle``'s columns)."""
        if rows:
            _INSERT_HANDLES(self._conn, rows)

    def write_tasks(self, rows: Sequence[tuple[TaskState | None, TaskState]]) -> None:
        """Final states of a group's tasks — (as read, as decided) — in one statement: each row's
        changed columns only."""
        update_rows(
            self._conn,
            t.task,
            ["id"],
            [
                (
                    {"id": after.task_id},
                    changed_columns(sql.task_values(before) if before else None, sql.task_values(after)),
                )
                for before, after in rows
            ],
        )

    def write_steps(self, rows: Sequence[tuple[StepState | None, StepState]]) -> None:
        """Final states of a group's step attempts, in one statement (each row's changed columns only)."""
        update_rows(
            self._conn,
            t.task_step,
            ["task_id", "step_id", "attempt"],
            [
                (
                    {"task_id": after.task_id, "step_id": after.step_id, "attempt": after.attempt},
                    changed_columns(sql.step_values(before) if before else None, sql.step_values(after)),
                )
                for before, after in rows
            ],
        )

    def revoke_many(self, reasons: Mapping[str, str], now: datetime) -> None:
        """Revoke the live handles of these executions (execution id -> reason): one statement per reason."""
        by_reason: dict[str, list[str]] = {}
        for execution_id, reason in reasons.items():
            by_reason.setdefault(reason, []).append(execution_id)
        h = t.task_execution_handle
        for reason, execution_ids in sorted(by_reason.items()):
            self._conn.execute(
                sa.update(h)
                .where(h.c.execution_id.in_(sorted(execution_ids)), h.c.revoked_at.is_(None))
                .values(revoked_at=now, revoke_reason=reason)
            )

    def lock(self, task_id: str) -> TaskState | None:
        return sql.lock_task(self._conn, task_id)

    def lock_version(self, task_id: str, event_id: str) -> tuple[int, str | None, Any, datetime | None] | None:
        row = sql.lock_task_version(self._conn, task_id, event_id)
        return (int(row[0]), row[1], row[2], row[3]) if row is not None else None

    def load(self, task_id: str) -> TaskState | None:
        return sql.load_task(self._conn, task_id)

    def steps_of(self, task_id: str, *, lock: bool = False) -> list[StepState]:
        return sql.steps_of(self._conn, task_id, lock=lock)

    def steps_of_tasks(self, task_ids: Sequence[str]) -> dict[str, list[StepState]]:
        return sql.steps_of_tasks(self._conn, task_ids)

    def update(self, task: TaskState, before: TaskState | None = None) -> None:
        sql.update_task(self._conn, task, before)

    def update_step(self, step: StepState, before: StepState | None = None) -> None:
        sql.update_step(self._conn, step, before)

    def insert_step(self, step: StepState) -> None:
        sql.insert_step(self._conn, step)

    def tenancy(self, task_id: str) -> tuple[str, str] | None:
        """(tenant, authority scope) of a task, unlocked; None when there is no such task."""
        row = self._conn.execute(
            sa.select(t.task.c.tenant_id, t.task.c.authority_scope).where(t.task.c.id == task_id)
        ).first()
        return (row[0], row[1]) if row is not None else None

    def lock_tenancy(self, task_id: str) -> tuple[str, str, str] | None:
        """(tenant, authority scope, lifecycle) of a task, its row locked."""
        conn = self._conn
        row = conn.execute(
            sa.select(t.task.c.tenant_id, t.task.c.authority_scope, t.task.c.lifecycle_status)
            .where(t.task.c.id == task_id)
            .with_for_update()
        ).first()
        return (row[0], row[1], row[2]) if row is not None else None

    def registration_policy(self, task_id: str) -> Any:
        """The task's dynamic registration policy as stored (JSON, or None: the workflow's)."""
        return self._conn.execute(
            sa.select(t.task.c.dynamic_registration_policy).where(t.task.c.id == task_id)
        ).scalar()

    def acl_grants(self, task_id: str) -> list[tuple[str, str]]:
        return sql.acl_grants(self._conn, task_id)

    def handles(self, hashes: Iterable[str]) -> dict[str, StoredHandle]:
        return handles_by_hash(self._conn, hashes)

    def revoke_handles(self, execution_id: str | None, reason: str, now: datetime) -> None:
        sql.revoke_handles(self._conn, execution_id, reason, now)


class SqlLogStore:
    def __init__(self, conn: sa.Connection, wrote: Callable[[str], None]) -> None:
        self._conn = conn
        self._wrote = wrote

    def insert_events(self, rows: Sequence[EventRecord]) -> None:
        sql.insert_events(self._conn, rows)

    def insert_dedups(self, rows: Sequence[DedupRecord]) -> None:
        sql.insert_dedups(self._conn, rows)

    def insert_changes(self, rows: Sequence[ChangeRecord]) -> None:
        if rows:
            sql.insert_changes(self._conn, rows)
            self._wrote("feed")

    def insert_notifications(self, rows: Sequence[NotificationRecord]) -> None:
        sql.insert_notifications(self._conn, rows)

    def insert_outbox(self, messages: Sequence[Message]) -> None:
        if messages:
            sql.insert_outbox(self._conn, messages)
            self._wrote("outbox")

    def outbox_holds(self, aggregate: Aggregate) -> bool:
        ob = t.task_outbox
        found = self._conn.execute(
            sa.select(ob.c.id).where(
                ob.c.aggregate_type == aggregate.kind,
                ob.c.aggregate_id == aggregate.id,
                ob.c.aggregate_version == aggregate.version,
                ob.c.channel == aggregate.home,
            )
        ).first()
        return found is not None

    def outbox_rows_of(self, aggregate_type: str, aggregate_id: str) -> int:
        ob = t.task_outbox
        return int(
            self._conn.execute(
                sa.select(sa.func.count())
                .select_from(ob)
                .where(ob.c.aggregate_type == aggregate_type, ob.c.aggregate_id == aggregate_id)
            ).scalar_one()
        )
