"""A locked task's view: its row, steps and viewers at the locked version, from the cache or one read."""

from __future__ import annotations

from typing import Any

from status.app import outbox
from status.app.context import AppContext
from status.app.ports import Stores
from status.app.step_cache import TaskView, view_of
from status.domain.errors import ErrorCode, NotFound
from status.domain.model import TaskState


def locked_view(
    ctx: AppContext,
    uow: Stores,
    task_id: str,
    owner: tuple[str, str],
    *,
    event_id: str = "",
    staged: dict[str, TaskView] | None = None,
) -> tuple[TaskView, tuple[str, Any] | None]:
    """Lock a task; its view at the locked version, and ``event_id``'s stored dedup entry.

    The view comes from ``staged`` (this transaction's own changes), the cache,
    or — a miss — one read of the task row, its steps and its viewers.  A task
    of another tenant or scope (``owner``) does not exist for the caller.
    """
    row = uow.tasks.lock_version(task_id, event_id)
    if row is None:
        raise NotFound(f"task {task_id} does not exist", ErrorCode.UNKNOWN_TASK)
    version, stored_hash, stored_result, _ = row
    stored = (stored_hash, stored_result) if stored_hash is not None else None
    view = (staged or {}).get(task_id)
    if view is None or view.version != version:
        view = ctx.steps.get(task_id, version)
    if view is None:
        task = uow.tasks.load(task_id)
        assert task is not None  # locked above
        view = load_view(uow, task)
    if (view.task.tenant_id, view.task.authority_scope) != owner:
        raise NotFound(f"task {task_id} does not exist", ErrorCode.UNKNOWN_TASK)
    return view, stored


def load_view(uow: Stores, task: TaskState) -> TaskView:
    """Every step and USER viewer of a locked task, read once (a cache miss)."""
    grants = uow.tasks.acl_grants(task.task_id)
    return view_of(task, uow.tasks.steps_of(task.task_id), outbox.viewers_of(task, grants), outbox.groups_of(grants))
