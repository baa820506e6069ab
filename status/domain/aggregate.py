"""The workflow aggregate (design D8.15): a pure fold of its tasks' committed state."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from status.domain.lifecycle import Health, Lifecycle
from status.domain.model import TaskState, WorkflowState


def fold(tasks: Sequence[tuple[Lifecycle, Health]]) -> tuple[Lifecycle, Health, dict[str, Any]]:
    """The aggregate of a workflow's tasks (each task's lifecycle and health): counts per
    lifecycle, progress, health.

    Purely descriptive: the workflow is SUCCEEDED only when every task is, and
    a FAILED task with others still running leaves it RUNNING + DEGRADED; the
    projector never decides what the work does next (design D1).

    Once every task has ended, the workflow's ending is the gravest of theirs:
    FAILED if one failed, else TIMED_OUT if one timed out, else CANCELLED (some
    were cancelled, the rest succeeded); ``counts`` says how many ended each way.
    """
    counts = Counter(lifecycle.value for lifecycle, _ in tasks)
    total = len(tasks)
    finished = sum(counts[s.value] for s in Lifecycle if s.terminal)
    percent = round(100 * finished / total, 2) if total else None
    if total == 0:
        lifecycle = Lifecycle.PENDING
    elif counts[Lifecycle.SUCCEEDED.value] == total:
        lifecycle = Lifecycle.SUCCEEDED
    elif finished == total:
        lifecycle = next(
            ending
            for ending in (Lifecycle.FAILED, Lifecycle.TIMED_OUT, Lifecycle.CANCELLED)
            if counts[ending.value] or ending is Lifecycle.CANCELLED
        )
    elif counts[Lifecycle.PENDING.value] == total:
        lifecycle = Lifecycle.PENDING
    else:
        lifecycle = Lifecycle.RUNNING
    health = Health.HEALTHY
    if any(health is Health.STALE for lifecycle, health in tasks if lifecycle is Lifecycle.RUNNING):
        health = Health.STALE
    elif counts[Lifecycle.FAILED.value] or any(health is Health.DEGRADED for _, health in tasks):
        health = Health.DEGRADED
    aggregate = {
        "taskCount": total,
        "counts": {s.value: counts[s.value] for s in Lifecycle},
        "finishedTasks": finished,
        "percent": percent,
    }
    return lifecycle, health, aggregate


def affects_workflow(before: TaskState, after: TaskState) -> bool:
    """Whether a task's change can move its workflow's aggregate (a function of its tasks' lifecycle and health).

    Progress, business status and step changes never do, so they need no projector work.
    """
    return before.lifecycle != after.lifecycle or before.health != after.health


def trimmed(workflow: WorkflowState, visible: Sequence[TaskState]) -> WorkflowState:
    """The workflow as seen by someone who sees only ``visible`` of its tasks (a grantee).

    Every fact a task contributes is folded again from the visible tasks alone:
    lifecycle, health and counts, but also ``startedAt``, ``finishedAt`` and the
    version.  The trap is the fields that are not the aggregate: the workflow's
    own ``started_at`` dates a hidden task's start, and its version counts every
    hidden task's change (a grantee could watch it move and learn that
    something they cannot see is running).  The trimmed version is the sum of
    the visible tasks' versions: it grows with every change they can see and
    with every task they are granted, and with nothing else.
    """
    lifecycle, health, aggregate = fold([(x.lifecycle, x.health) for x in visible])
    starts = [x.started_at for x in visible if x.started_at is not None]
    ends = [x.finished_at for x in visible if x.finished_at is not None]
    return replace(
        workflow,
        lifecycle=lifecycle,
        health=health,
        aggregate=aggregate,
        task_count=len(visible),
        version=sum(x.version for x in visible),
        started_at=min(starts) if starts else None,
        finished_at=max(ends) if lifecycle.terminal and ends else None,
        updated_at=max((x.updated_at for x in visible), default=workflow.updated_at),
    )
