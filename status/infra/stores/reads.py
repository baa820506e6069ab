"""The reads of the public API, each limited to what a user may see (design D3, D7)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from status.app.records import EventRecord
from status.domain.auth import UserPrincipal
from status.domain.definitions import FailurePolicy
from status.domain.lifecycle import Lifecycle
from status.domain.model import TaskState, WorkflowState
from status.infra import tables as t
from status.infra.stores import sql

_RUNNING = (Lifecycle.PENDING.value, Lifecycle.RUNNING.value)
_FAILED = (Lifecycle.FAILED.value, Lifecycle.TIMED_OUT.value)
_DONE = (Lifecycle.SUCCEEDED.value, Lifecycle.CANCELLED.value)


def _visible(user: UserPrincipal) -> Any:
    return sql.visible_task_filter(user.tenant_id, user.user_id, user.project_ids, user.role_ids)


def _status_filter(status: str) -> Any:
    """``running``, ``failed``, ``needs_action`` or ``done`` (the application checks the name)."""
    lifecycle = t.task.c.lifecycle_status
    if status == "running":
        return lifecycle.in_(_RUNNING)
    if status == "failed":
        return lifecycle.in_(_FAILED)
    if status == "done":
        return lifecycle.in_(_DONE)
    # needs_action: unfinished, with a step that failed and waits for the user (WAIT_FOR_USER).
    s = t.task_step
    waiting = (
        sa.select(s.c.task_id)
        .where(
            s.c.task_id == t.task.c.id,
            s.c.lifecycle_status == Lifecycle.FAILED.value,
            s.c.failure_policy == FailurePolicy.WAIT_FOR_USER.value,
            s.c.superseded.is_(sa.false()),
        )
        .exists()
    )
    return sa.and_(lifecycle.in_(_RUNNING), waiting)


class SqlReadStore:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def can_see(self, user: UserPrincipal, task_id: str) -> bool:
        query = sa.select(t.task.c.id).where(t.task.c.id == task_id, _visible(user))
        return self._conn.execute(query).first() is not None

    def visible_task(self, user: UserPrincipal, task_id: str) -> TaskState | None:
        row = self._conn.execute(sa.select(t.task).where(t.task.c.id == task_id, _visible(user))).mappings().first()
        return sql.task_from_row(row) if row is not None else None

    def visible_tasks(self, user: UserPrincipal, task_ids: list[str]) -> list[TaskState]:
        rows = self._conn.execute(sa.select(t.task).where(t.task.c.id.in_(task_ids), _visible(user))).mappings()
        return [sql.task_from_row(r) for r in rows]

    def events_after(self, task_id: str, after_version: int, limit: int) -> tuple[list[EventRecord], int | None, int]:
        """(up to ``limit`` event-log rows after a version, the oldest version kept, the task's version)."""
        log = t.task_event_log
        rows = [
            EventRecord(*row)
            for row in self._conn.execute(
                sa.select(*[log.c[name] for name in EventRecord._fields])
                .where(log.c.task_id == task_id, log.c.task_version > after_version)
                .order_by(log.c.task_version)
                .limit(limit)
            )
        ]
        oldest = self._conn.execute(sa.select(sa.func.min(log.c.task_version)).where(log.c.task_id == task_id)).scalar()
        current = self._conn.execute(sa.select(t.task.c.version).where(t.task.c.id == task_id)).scalar_one()
        return rows, oldest, int(current)

    def page_of_tasks(
        self,
        user: UserPrincipal,
        status: str | None,
        before: tuple[datetime, str] | None,
        limit: int,
        title: str | None = None,
    ) -> list[TaskState]:
        """The user's visible tasks, newest first, after the keyset position ``before``; ``title``:
        only those whose title contains it (case-insensitive, taken literally: no wildcards).

        Read as one branch per way of seeing a task — owned (``task_owner_created_idx``), granted
        to the user, to one of their projects, to one of their roles (``task_acl_principal_idx``)
        — each taking at most ``limit`` in list order, merged without duplicates: the page's first
        ``limit`` are among them. One condition with OR over all of them made the database scan
        the tenant's tasks for every list, a snapshot storm's cost growing with the tenant."""
        task, acl = t.task, t.task_acl
        narrowing = []
        if status is not None:
            narrowing.append(_status_filter(status))
        if title:
            narrowing.append(task.c.title.icontains(title, autoescape=True))
        if before is not None:
            created, task_id = before
            narrowing.append(
                sa.or_(task.c.created_at < created, sa.and_(task.c.created_at == created, task.c.id < task_id))
            )
        order = (task.c.created_at.desc(), task.c.id.desc())
        owned = sa.select(task.c.id, task.c.created_at).where(
            task.c.tenant_id == user.tenant_id, task.c.owner_id == user.user_id, *narrowing
        )
        branches = [owned.order_by(*order).limit(limit)]
        for principal_type, principals in (
            ("USER", [user.user_id]),
            ("PROJECT", list(user.project_ids)),
            ("ROLE", list(user.role_ids)),
        ):
            if principals:
                granted = (
                    sa.select(task.c.id, task.c.created_at)
                    .join(acl, acl.c.task_id == task.c.id)
                    .where(
                        acl.c.tenant_id == user.tenant_id,
                        acl.c.principal_type == principal_type,
                        acl.c.principal_id.in_(principals),
                        acl.c.revoked_at.is_(None),
                        task.c.tenant_id == user.tenant_id,
                        *narrowing,
                    )
                    .distinct()  # one task granted to two of the user's projects counts once
                )
                branches.append(granted.order_by(*order).limit(limit))
        seen = sa.union(*(sa.select(branch.subquery()) for branch in branches)).subquery()
        query = sa.select(task).join(seen, seen.c.id == task.c.id).order_by(*order).limit(limit)
        return [sql.task_from_row(r) for r in self._conn.execute(query).mappings()]

    def workflow(self, workflow_id: str) -> WorkflowState | None:
        row = self._conn.execute(sa.select(t.workflow).where(t.workflow.c.id == workflow_id)).mappings().first()
        return sql.workflow_from_row(row) if row is not None else None

    def visible_tasks_of_workflow(self, user: UserPrincipal, workflow_id: str) -> list[TaskState]:
        rows = self._conn.execute(
            sa.select(t.task)
            .where(t.task.c.workflow_id == workflow_id, _visible(user))
            .order_by(t.task.c.created_at, t.task.c.id)
        ).mappings()
        return [sql.task_from_row(r) for r in rows]
