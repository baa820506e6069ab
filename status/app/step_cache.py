"""A version-validated cache of each task's current state, step states and viewers.

Projections need every step of a task (progress, current step, the detail
list) and the users who see it, but an event changes one step.  Reading and
locking all step rows on every event made its cost grow with the task; instead
the event path locks the task row reading only its version (and the event's
dedup entry), and when the cache holds the task *at that version* it reads no
other row: PyMySQL parses every column descriptor of every result in Python,
so a wide row costs more CPU than the round trip that fetched it.

Why a version is enough: every change to a task's columns, to a step's
columns other than heartbeat bookkeeping, to the set of steps or to the
task's grants goes through a transaction that holds the task row lock
and bumps ``task.version``.  Plain heartbeats change step rows without a
version, but only ``last_heartbeat_*`` and the deadline, which no projection
shows; the event path writes only the columns an event changed, so it never
writes back a cached heartbeat value.  So an entry whose version equals the
locked row's is exactly what a full read would return.  Entries are written only after their transaction committed, so a
rollback never leaves a version behind that the database does not hold; other
processes writing the same task just make the entry miss.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from status.domain.model import StepState, TaskState
from status.domain.stepset import StepSet


@dataclass(frozen=True)
class TaskView:
    """A task, its steps, its USER viewers and the PROJECT/ROLE groups granted it, at one ``task.version``."""

    task: TaskState
    steps: StepSet
    viewers: tuple[str, ...]
    groups: tuple[tuple[str, str], ...] = ()

    @property
    def version(self) -> int:
        return self.task.version

    def changed(self, task: TaskState, step: StepState | None) -> TaskView:
        """The view after a change to the task and at most one step."""
        return TaskView(task, self.steps if step is None else self.steps.with_step(step), self.viewers, self.groups)


def view_of(
    task: TaskState, steps: Iterable[StepState], viewers: Iterable[str], groups: Iterable[tuple[str, str]] = ()
) -> TaskView:
    return TaskView(task, StepSet.of(steps), tuple(viewers), tuple(groups))


class StepCache:
    def __init__(self, capacity: int = 4096) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[str, TaskView] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, task_id: str, version: int) -> TaskView | None:
        with self._lock:
            view = self._entries.get(task_id)
            if view is None or view.version != version:
                return None
            self._entries.move_to_end(task_id)
            return view

    def put(self, task_id: str, view: TaskView) -> None:
        """Remember a committed view (never one of an open transaction)."""
        with self._lock:
            current = self._entries.get(task_id)
            if current is not None and current.version > view.version:
                return  # a later commit already stored a newer view
            self._entries[task_id] = view
            self._entries.move_to_end(task_id)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)

    def drop(self, task_id: str) -> None:
        with self._lock:
            self._entries.pop(task_id, None)
