"""Storage of Temporal run ownership: which run owns which open task, and how far the run follower
has read each namespace's closed runs. The SQL of ``status.app.runs`` lives here."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa

from status.app.ports import OwnedTask
from status.app.records import ActivityRecord
from status.domain.lifecycle import TERMINAL
from status.infra import tables as t
from status.infra.inserts import Inserter

_INSERT_ACTIVITIES = Inserter(t.task_step_temporal, keep_existing=True)
_OPEN = t.task.c.lifecycle_status.not_in([lifecycle.value for lifecycle in TERMINAL])


class SqlRunStore:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def set_owner(self, task_ids: Sequence[str], namespace: str, workflow_id: str, run_id: str | None) -> int:
        """Record the owning run of the open tasks among ``task_ids``; how many changed."""
        conn = self._conn
        if not task_ids:
            return 0
        result = conn.execute(
            sa.update(t.task)
            .where(t.task.c.id.in_(list(task_ids)), _OPEN)
            .values(temporal_namespace=namespace, temporal_workflow_id=workflow_id, temporal_run_id=run_id)
        )
        return int(result.rowcount)

    def open_tasks_of(self, namespace: str, workflow_ids: Sequence[str]) -> list[OwnedTask]:
        """The open tasks owned by any run of these Temporal workflow ids (one indexed read)."""
        conn = self._conn
        if not workflow_ids:
            return []
        rows = conn.execute(
            sa.select(
                t.task.c.id,
                t.task.c.tenant_id,
                t.task.c.authority_scope,
                t.task.c.attempt,
                t.task.c.temporal_workflow_id,
                t.task.c.temporal_run_id,
            ).where(
                t.task.c.temporal_namespace == namespace,
                t.task.c.temporal_workflow_id.in_(sorted(set(workflow_ids))),
                _OPEN,
            )
        ).all()
        return [OwnedTask(*row) for row in rows]

    def stuck_tasks(self, namespace: str) -> list[OwnedTask]:
        """The open tasks of this namespace shown as stuck (their run's workflow task kept failing):
        an index range over the few marked rows."""
        rows = self._conn.execute(
            sa.select(
                t.task.c.id,
                t.task.c.tenant_id,
                t.task.c.authority_scope,
                t.task.c.attempt,
                t.task.c.temporal_workflow_id,
                t.task.c.temporal_run_id,
            ).where(t.task.c.workflow_stuck_since.is_not(None), t.task.c.temporal_namespace == namespace, _OPEN)
        ).all()
        return [OwnedTask(*row) for row in rows]

    def work_key_of(
        self, tenant_id: str, scope: str, namespace: str, workflow_id: str, run_ids: Sequence[str]
    ) -> str | None:
        """The clientWorkflowKey of the status workflow whose open tasks these runs own (one indexed read)."""
        value = self._conn.execute(
            sa.select(t.workflow.c.client_workflow_key)
            .select_from(t.task.join(t.workflow, t.workflow.c.id == t.task.c.workflow_id))
            .where(
                t.task.c.temporal_namespace == namespace,
                t.task.c.temporal_workflow_id == workflow_id,
                t.task.c.temporal_run_id.in_(list(run_ids)),
                t.task.c.tenant_id == tenant_id,
                t.task.c.authority_scope == scope,
                _OPEN,
            )
            .limit(1)
        ).scalar()
        return str(value) if value is not None else None

    def hand_over(self, namespace: str, task_ids: Sequence[str], to_run_id: str) -> int:
        """The open tasks among ``task_ids`` now belong to ``to_run_id`` of the same workflow id."""
        conn = self._conn
        if not task_ids:
            return 0
        result = conn.execute(
            sa.update(t.task)
            .where(t.task.c.id.in_(list(task_ids)), t.task.c.temporal_namespace == namespace, _OPEN)
            .values(temporal_run_id=to_run_id)
        )
        return int(result.rowcount)

    def oldest_open_owned(self, namespace: str) -> datetime | None:
        """When the oldest open task owned by a run of ``namespace`` was created."""
        conn = self._conn
        value = conn.execute(
            sa.select(sa.func.min(t.task.c.created_at)).where(t.task.c.temporal_namespace == namespace, _OPEN)
        ).scalar()
        return value if isinstance(value, datetime) else None

    def watermark(self, namespace: str) -> datetime | None:
        conn = self._conn
        value = conn.execute(
            sa.select(t.temporal_close_watermark.c.close_time).where(
                t.temporal_close_watermark.c.namespace == namespace
            )
        ).scalar()
        return value if isinstance(value, datetime) else None

    def advance_watermark(self, namespace: str, close_time: datetime, now: datetime) -> None:
        """Move the watermark forward (never back: two followers may race)."""
        conn = self._conn
        table = t.temporal_close_watermark
        updated = conn.execute(
            sa.update(table)
            .where(table.c.namespace == namespace, table.c.close_time < close_time)
            .values(close_time=close_time, updated_at=now)
        ).rowcount
        if updated:
            return
        exists = conn.execute(sa.select(table.c.namespace).where(table.c.namespace == namespace)).first()
        if exists is None:
            try:
                with conn.begin_nested():
                    conn.execute(sa.insert(table).values(namespace=namespace, close_time=close_time, updated_at=now))
            except sa.exc.IntegrityError:  # another follower inserted it first; its value is as good
                pass

    def record_activities(self, rows: Sequence[ActivityRecord]) -> None:
        """The Temporal activity behind each execution, in one statement; an execution already
        recorded (a retried binding) keeps its row."""
        if not rows:
            return
        _INSERT_ACTIVITIES(self._conn, list({row.execution_id: row for row in rows}.values()))
