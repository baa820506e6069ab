"""Reads of the public API (design D7): snapshots, timelines, lists — always ACL-checked.

A task the user can't see answers exactly like a task that does not exist
(no probing by id).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from status.app.context import AppContext
from status.app.cursors import decode_cursor, encode_cursor
from status.app.ports import Stores
from status.app.shards import read_each
from status.domain import ids, shapes
from status.domain.aggregate import trimmed
from status.domain.auth import UserPrincipal
from status.domain.errors import ErrorCode, Invalid, NotFound
from status.domain.lifecycle import EventType
from status.domain.model import StepState, TaskState, WorkflowState
from status.domain.projections import History, iso, task_snapshot, user_summary, workflow_summary

STATUS_FILTERS = ("running", "failed", "needs_action", "done")
MAX_TITLE_QUERY = 100


class Queries:
    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    def tenancy(self, task_id: str) -> tuple[str, str] | None:
        """(tenant, authority scope) of a task, for an operator's command line (no access check)."""
        with self.ctx.shards.reading(ids.bucket_hint(task_id)) as stores:
            return stores.tasks.tenancy(task_id)

    @staticmethod
    def can_see_task(stores: Stores, user: UserPrincipal, task_id: str) -> bool:
        return stores.reads.can_see(user, task_id)

    def visible(self, user: UserPrincipal, task_ids: Sequence[str]) -> list[str]:
        """Those of ``task_ids`` the user sees, in the order given (one read per shard)."""
        seen: set[str] = set()

        def read(stores: Stores, group: tuple[int, ...]) -> None:
            seen.update(task_ids[i] for i in group if stores.reads.can_see(user, task_ids[i]))

        read_each(self.ctx.shards, [ids.bucket_hint(task_id) for task_id in task_ids], read)
        return [task_id for task_id in task_ids if task_id in seen]

    def workflow(self, workflow_id: str) -> WorkflowState | None:
        """A workflow as stored (no access check: callers check visibility)."""
        with self.ctx.shards.reading(ids.workflow_bucket(workflow_id)) as stores:
            return stores.reads.workflow(workflow_id)

    def get_task(self, user: UserPrincipal, task_id: str) -> shapes.TaskSnapshot:
        """The snapshot, or NOT_FOUND when the task doesn't exist *or* isn't visible (no probing)."""
        with self.ctx.shards.reading(ids.bucket_hint(task_id)) as stores:
            task = stores.reads.visible_task(user, task_id)
            if task is None:
                raise NotFound("task not found", ErrorCode.NOT_FOUND)
            steps = stores.tasks.steps_of(task_id)
            return task_snapshot(task, steps, self.ctx.now(), self.ctx.durations.for_task(stores, task, steps))

    def task_events(self, user: UserPrincipal, task_id: str, after_version: int, limit: int) -> dict[str, Any]:
        """The committed timeline after ``after_version`` (design P18); says when history was purged."""
        limit = max(1, min(limit, 500))
        with self.ctx.shards.reading(ids.bucket_hint(task_id)) as stores:
            if not stores.reads.can_see(user, task_id):
                raise NotFound("task not found", ErrorCode.NOT_FOUND)
            rows, oldest, current = stores.reads.events_after(task_id, after_version, limit + 1)
        # Truncated when versions after ``after_version`` existed but are gone: the oldest kept is
        # later than the next one asked for, or (all of it purged) nothing is kept of a task that
        # has moved past ``after_version``.
        truncated = oldest > after_version + 1 if oldest is not None else current > after_version
        events = [
            {
                "eventId": r.event_id,
                "eventType": r.event_type,
                "taskVersion": str(r.task_version),
                "stepId": r.step_id,
                "stepAttempt": r.step_attempt,
                "operationCode": r.operation_code,
                "stepVersion": str(r.step_version) if r.step_version is not None else None,
                "lifecycleStatus": r.lifecycle_status,
                "businessStatus": r.business_status,
                "health": r.health,
                "dataSchema": r.data_schema,
                "errorCode": r.error_code,
                "durationMs": r.duration_ms,
                "occurredAt": iso(r.occurred_at),
                "committedAt": iso(r.committed_at),
                # A correction shows as one: what an operator changed (who and why stay in the audit).
                **(
                    {"correction": {"changes": (r.payload or {}).get("changes", [])}}
                    if r.event_type == EventType.ADMIN_CORRECTION.value
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
        tasks: dict[str, TaskState] = {}
        steps: dict[str, list[StepState]] = {}
        history: dict[str, History | None] = {}

        def read(stores: Stores, group: tuple[int, ...]) -> None:
            seen = {task.task_id: task for task in stores.reads.visible_tasks(user, [wanted[i] for i in group])}
            newer = [tid for tid, task in seen.items() if task.version > known.get(tid, 0)]
            steps.update(stores.tasks.steps_of_tasks(newer))
            history.update((tid, self.ctx.durations.for_task(stores, seen[tid], steps[tid])) for tid in newer)
            tasks.update(seen)

        read_each(self.ctx.shards, [ids.bucket_hint(tid) for tid in wanted], read)
        tasks = {tid: tasks[tid] for tid in wanted if tid in tasks}  # the caller's order
        changed = [tid for tid in tasks if tid in steps]
        now = self.ctx.now()
        return {
            "tasks": [task_snapshot(tasks[tid], steps[tid], now, history[tid]) for tid in changed],
            "unchanged": [tid for tid in tasks if tid not in changed],
            "notFound": [tid for tid in wanted if tid not in tasks],
            "asOf": iso(now),
        }

    def my_tasks(
        self,
        user: UserPrincipal,
        cursor: str | None,
        limit: int,
        status: str | None = None,
        title: str | None = None,
    ) -> dict[str, Any]:
        """The user's visible tasks, newest first, keyset-paginated; ``status`` narrows the list to
        ``running``, ``failed``, ``needs_action`` or ``done`` tasks, ``title`` to those whose title
        contains it (case-insensitive; at most MAX_TITLE_QUERY characters)."""
        limit = max(1, min(limit, 100))
        if status is not None and status not in STATUS_FILTERS:
            raise Invalid(f"status must be one of {', '.join(STATUS_FILTERS)}")
        title = title.strip() if title else None
        if title is not None and len(title) > MAX_TITLE_QUERY:
            raise Invalid(f"q (a title search) is at most {MAX_TITLE_QUERY} characters")
        before = decode_cursor(cursor) if cursor else None
        # Each shard's first page in list order, merged: the page's tasks are among them (a keyset
        # page, so one shard's rows never push another's out of order).
        rows: list[TaskState] = []
        steps: dict[str, list[StepState]] = {}
        history: dict[str, History | None] = {}
        for name, database in self.ctx.shards.every():
            with database.reading() as stores:
                page = stores.reads.page_of_tasks(user, status, before, limit + 1, title or None)
                page = [x for x in page if self.ctx.shards.holds(name, x.bucket_id)]
                steps.update(stores.tasks.steps_of_tasks([task.task_id for task in page[:limit]]))
                history.update(
                    (x.task_id, self.ctx.durations.for_task(stores, x, steps[x.task_id])) for x in page[:limit]
                )
                rows += page
        rows.sort(key=lambda x: (x.created_at, x.task_id), reverse=True)
        tasks = rows[:limit]
        now = self.ctx.now()
        next_cursor = encode_cursor(tasks[-1].created_at, tasks[-1].task_id) if len(rows) > limit else None
        summaries = [user_summary(x, steps[x.task_id], now, None, history[x.task_id]) for x in tasks]
        return {"tasks": summaries, "nextCursor": next_cursor}

    def _seen_workflow(
        self, stores: Stores, user: UserPrincipal, workflow_id: str, *, with_tasks: bool
    ) -> tuple[WorkflowState, list[TaskState]] | None:
        """The workflow as the user may see it, and its tasks they see (read only when needed: for
        the tasks, or to trim a non-owner's aggregate); None unless they see it."""
        workflow = stores.reads.workflow(workflow_id)
        if workflow is None or workflow.tenant_id != user.tenant_id:
            return None
        owner = workflow.owner_id == user.user_id
        tasks = stores.reads.visible_tasks_of_workflow(user, workflow_id) if with_tasks or not owner else []
        if not owner and not tasks:
            return None
        if not owner:
            workflow = trimmed(workflow, tasks)
        return workflow, tasks

    def workflow_summaries(self, user: UserPrincipal, workflow_ids: Sequence[str]) -> dict[str, Any]:
        """Many workflow summaries in one read (a page's list: one request, not one per workflow);
        those the user does not see are ``notFound``, as one GET would answer them."""
        wanted = list(dict.fromkeys(workflow_ids))
        summaries: dict[str, shapes.WorkflowSummaryMessage] = {}
        now = self.ctx.now()

        def read(stores: Stores, group: tuple[int, ...]) -> None:
            for i in group:
                seen = self._seen_workflow(stores, user, wanted[i], with_tasks=False)
                if seen is not None:
                    summaries[wanted[i]] = workflow_summary(seen[0], now)

        read_each(self.ctx.shards, [ids.workflow_bucket(workflow_id) for workflow_id in wanted], read)
        return {
            "workflows": [summaries[w] for w in wanted if w in summaries],
            "notFound": [w for w in wanted if w not in summaries],
        }

    def get_workflow(
        self, user: UserPrincipal, workflow_id: str, *, with_tasks: bool
    ) -> shapes.WorkflowSummaryMessage | shapes.WorkflowTasks:
        """The workflow summary and its ACL-trimmed tasks; NOT_FOUND unless the user sees it."""
        with self.ctx.shards.reading(ids.workflow_bucket(workflow_id)) as stores:
            seen = self._seen_workflow(stores, user, workflow_id, with_tasks=with_tasks)
            if seen is None:
                raise NotFound("workflow not found", ErrorCode.NOT_FOUND)
            workflow, tasks = seen
            result = workflow_summary(workflow, self.ctx.now())
            if not with_tasks:
                return result
            steps = stores.tasks.steps_of_tasks([task.task_id for task in tasks])
            now = self.ctx.now()
            summaries = [
                user_summary(x, steps[x.task_id], now, None, self.ctx.durations.for_task(stores, x, steps[x.task_id]))
                for x in tasks
            ]
            return {"workflow": result, "tasks": summaries}

    def snapshot(self, task_id: str) -> shapes.TaskSnapshot | None:
        """The current detail state of a task (no access check: callers check visibility)."""
        with self.ctx.shards.reading(ids.bucket_hint(task_id)) as stores:
            task = stores.tasks.load(task_id)
            if task is None:
                return None
            steps = stores.tasks.steps_of(task_id)
            return task_snapshot(task, steps, self.ctx.now(), self.ctx.durations.for_task(stores, task, steps))
