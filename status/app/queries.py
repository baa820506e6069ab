"""Reads of the public API (SPEC §7): snapshots, timelines, lists — always ACL-checked.

A task the user can't see answers exactly like a task that does not exist
(no probing by id).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import sqlalchemy as sa

from status.app.context import AppContext
from status.app.cursors import decode_cursor, encode_cursor
from status.domain.aggregate import fold
from status.domain.auth import UserPrincipal
from status.domain.definitions import FailurePolicy
from status.domain.errors import ErrorCode, Invalid, NotFound
from status.domain.lifecycle import EventType, Lifecycle
from status.domain.projections import iso, task_snapshot, user_summary, workflow_summary
from status.infra import repository as repo
from status.infra import tables as t


class Queries:
    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    def _visible(self, user: UserPrincipal) -> Any:
        return repo.visible_task_filter(user.tenant_id, user.user_id, user.project_ids, user.role_ids)

    def can_see_task(self, conn: sa.Connection, user: UserPrincipal, task_id: str) -> bool:
        return (
            conn.execute(sa.select(t.task.c.id).where(t.task.c.id == task_id, self._visible(user))).first() is not None
        )

    def get_task(self, user: UserPrincipal, task_id: str) -> dict[str, Any]:
        """The snapshot, or NOT_FOUND when the task doesn't exist *or* isn't visible (no probing)."""
        with self.ctx.engine.connect() as conn:
            row = conn.execute(sa.select(t.task).where(t.task.c.id == task_id, self._visible(user))).mappings().first()
            if row is None:
                raise NotFound("task not found", ErrorCode.NOT_FOUND)
            task = repo.task_from_row(row)
            steps = repo.steps_of(conn, task_id)
            return task_snapshot(task, steps, self.ctx.now(), self.ctx.durations.for_task(conn, task, steps))

    def task_events(self, user: UserPrincipal, task_id: str, after_version: int, limit: int) -> dict[str, Any]:
        """The committed timeline after ``after_version`` (AC18); says when history was purged."""
        limit = max(1, min(limit, 500))
        with self.ctx.engine.connect() as conn:
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
            current = conn.execute(sa.select(t.task.c.version).where(t.task.c.id == task_id)).scalar_one()
        # Truncated when versions after ``after_version`` existed but are gone: the oldest kept is
        # later than the next one asked for, or (all of it purged) nothing is kept of a task that
        # has moved past ``after_version``.
        truncated = oldest > after_version + 1 if oldest is not None else current > after_version
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
                # A correction shows as one: what an operator changed (who and why stay in the audit).
                **(
                    {"correction": {"changes": (r["payload"] or {}).get("changes", [])}}
                    if r["event_type"] == EventType.ADMIN_CORRECTION.value
                    else {}
                ),
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
        with self.ctx.engine.connect() as conn:
            rows = conn.execute(sa.select(t.task).where(t.task.c.id.in_(wanted), self._visible(user))).mappings().all()
            tasks = {r["id"]: repo.task_from_row(r) for r in rows}
            changed = [tid for tid, task in tasks.items() if task.version > known.get(tid, 0)]
            steps = repo.steps_of_tasks(conn, changed)
            history = {tid: self.ctx.durations.for_task(conn, tasks[tid], steps[tid]) for tid in changed}
        now = self.ctx.now()
        return {
            "tasks": [task_snapshot(tasks[tid], steps[tid], now, history[tid]) for tid in changed],
            "unchanged": [tid for tid in tasks if tid not in changed],
            "notFound": [tid for tid in wanted if tid not in tasks],
            "asOf": iso(now),
        }

    def my_tasks(
        self, user: UserPrincipal, cursor: str | None, limit: int, status: str | None = None
    ) -> dict[str, Any]:
        """The user's visible tasks, newest first, keyset-paginated; ``status`` narrows the list to
        ``running``, ``failed``, ``needs_action`` or ``done`` tasks."""
        limit = max(1, min(limit, 100))
        query = sa.select(t.task).where(self._visible(user))
        if status is not None:
            query = query.where(_status_filter(status))
        if cursor:
            created, task_id = decode_cursor(cursor)
            query = query.where(
                sa.or_(t.task.c.created_at < created, sa.and_(t.task.c.created_at == created, t.task.c.id < task_id))
            )
        query = query.order_by(t.task.c.created_at.desc(), t.task.c.id.desc()).limit(limit + 1)
        with self.ctx.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
            tasks = [repo.task_from_row(r) for r in rows[:limit]]
            steps = repo.steps_of_tasks(conn, [task.task_id for task in tasks])
            history = {x.task_id: self.ctx.durations.for_task(conn, x, steps[x.task_id]) for x in tasks}
        now = self.ctx.now()
        next_cursor = encode_cursor(tasks[-1].created_at, tasks[-1].task_id) if len(rows) > limit else None
        summaries = [user_summary(x, steps[x.task_id], now, None, history[x.task_id]) for x in tasks]
        return {"tasks": summaries, "nextCursor": next_cursor}

    def get_workflow(self, user: UserPrincipal, workflow_id: str, *, with_tasks: bool) -> dict[str, Any]:
        """The workflow summary and its ACL-trimmed tasks; NOT_FOUND unless the user sees it."""
        with self.ctx.engine.connect() as conn:
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
            owner = row["owner_id"] == user.user_id
            if not owner and not task_rows:
                raise NotFound("workflow not found", ErrorCode.NOT_FOUND)
            workflow = repo.workflow_from_row(row)
            if not owner:
                # Someone who sees some of the tasks sees an aggregate over those only: the
                # workflow's own aggregate would tell them about tasks they cannot see.
                lifecycle, health, aggregate = fold([dict(r) for r in task_rows])
                workflow = replace(
                    workflow, lifecycle=lifecycle, health=health, aggregate=aggregate, task_count=len(task_rows)
                )
            result = workflow_summary(workflow, self.ctx.now())
            if with_tasks:
                tasks = [repo.task_from_row(r) for r in task_rows]
                steps = repo.steps_of_tasks(conn, [task.task_id for task in tasks])
                now = self.ctx.now()
                summaries = [
                    user_summary(x, steps[x.task_id], now, None, self.ctx.durations.for_task(conn, x, steps[x.task_id]))
                    for x in tasks
                ]
                result = {"workflow": result, "tasks": summaries}
            return result

    def snapshot(self, task_id: str) -> dict[str, Any] | None:
        """The current detail state of a task (no access check: callers check visibility)."""
        with self.ctx.engine.connect() as conn:
            task = repo.load_task(conn, task_id)
            if task is None:
                return None
            steps = repo.steps_of(conn, task_id)
            return task_snapshot(task, steps, self.ctx.now(), self.ctx.durations.for_task(conn, task, steps))


_RUNNING = (Lifecycle.PENDING.value, Lifecycle.RUNNING.value)
_FAILED = (Lifecycle.FAILED.value, Lifecycle.TIMED_OUT.value)
_DONE = (Lifecycle.SUCCEEDED.value, Lifecycle.CANCELLED.value)
STATUS_FILTERS = ("running", "failed", "needs_action", "done")


def _status_filter(status: str) -> Any:
    lifecycle = t.task.c.lifecycle_status
    if status == "running":
        return lifecycle.in_(_RUNNING)
    if status == "failed":
        return lifecycle.in_(_FAILED)
    if status == "done":
        return lifecycle.in_(_DONE)
    if status == "needs_action":
        # Unfinished, with a step that failed and waits for the user (WAIT_FOR_USER).
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
    raise Invalid(f"status must be one of {', '.join(STATUS_FILTERS)}")
