"""The workflow aggregate (R15): a pure fold of its tasks' committed state."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from status.domain.lifecycle import Health, Lifecycle
from status.domain.model import TaskState


def fold(tasks: Sequence[Mapping[str, Any]]) -> tuple[Lifecycle, Health, dict[str, Any]]:
    """The aggregate of a workflow's tasks: counts per lifecycle, progress, health.

    Purely descriptive: the workflow is SUCCEEDED only when every task is, and
    a FAILED task with others still running leaves it RUNNING + DEGRADED; the
    projector never decides what the work does next (SPEC §1).

    Once every task has ended, the workflow's ending is the gravest of theirs:
    FAILED if one failed, else TIMED_OUT if one timed out, else CANCELLED (some
    were cancelled, the rest succeeded); ``counts`` says how many ended each way.
    """
    counts = Counter(task["lifecycle_status"] for task in tasks)
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
    if any(task["health"] == Health.STALE.value for task in tasks if task["lifecycle_status"] == "RUNNING"):
        health = Health.STALE
    elif counts[Lifecycle.FAILED.value] or any(task["health"] == Health.DEGRADED.value for task in tasks):
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
