"""Storage reads behind ``status.app.overdue``: tasks still RUNNING (or STALE) and their running attempts."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from status.app.ports import RunningAttempt
from status.domain.lifecycle import Lifecycle
from status.infra import tables as t


class SqlOverdueStore:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def running_since(
        self, started_before: datetime, limit: int, tenant_scope: tuple[str, str] | None = None
    ) -> list[RunningAttempt]:
        """Running tasks that started before ``started_before`` (oldest first), with their running
        attempts; of one tenant's scope when given (filtered here, before the limit)."""
        conn = self._conn
        task, step = t.task, t.task_step
        running_step = sa.and_(
            step.c.task_id == task.c.id,
            step.c.lifecycle_status == Lifecycle.RUNNING.value,
            step.c.superseded.is_(sa.false()),
        )
        rows = conn.execute(
            sa.select(
                task.c.id,
                task.c.tenant_id,
                task.c.authority_scope,
                task.c.title,
                task.c.task_type,
                task.c.started_at,
                task.c.health,
                step.c.step_id,
                step.c.operation_code,
                step.c.operation_definition_version,
                step.c.started_at,
            )
            .select_from(task.outerjoin(step, running_step))
            .where(
                task.c.lifecycle_status == Lifecycle.RUNNING.value,
                task.c.started_at < started_before,
                *(
                    (task.c.tenant_id == tenant_scope[0], task.c.authority_scope == tenant_scope[1])
                    if tenant_scope is not None
                    else ()
                ),
            )
            .order_by(task.c.started_at, task.c.id)
            .limit(limit)
        ).all()
        return [RunningAttempt(*row) for row in rows]
