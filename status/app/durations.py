"""Past durations per (tenant, scope, task type, operation): the history ETAs are computed from.

Read from completed step attempts (the producers' own ``durationMs``) and kept in memory for a
minute, so an event costs no extra query once its operations are known; a success reported
through this process refreshes its key at once.  The read is bounded (the newest
``SAMPLE`` successes) and uses ``task_step_duration_idx``.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

from status.app.ports import Stores
from status.domain.eta import DurationStats
from status.domain.model import StepState, TaskState
from status.domain.stepset import StepSet

SAMPLE = 50
TTL_SECONDS = 60.0
CAPACITY = 10_000

Key = tuple[str, str, str, str]  # tenant, scope, task type ("" for none), operation


class DurationHistory:
    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._entries: OrderedDict[Key, tuple[float, DurationStats | None]] = OrderedDict()
        self._lock = threading.Lock()
        self._monotonic = monotonic

    @staticmethod
    def _key(task: TaskState, operation_code: str) -> Key:
        return (task.tenant_id, task.authority_scope, task.task_type or "", operation_code)

    def for_task(
        self, stores: Stores, task: TaskState, steps: StepSet | Iterable[StepState]
    ) -> dict[str, DurationStats | None]:
        """Stats for the operations of the task's unfinished steps (what an ETA needs)."""
        if task.lifecycle.terminal:
            return {}
        if isinstance(steps, StepSet):
            wanted = steps.open_operations()  # kept by the set: no pass over every step
        else:
            wanted = {s.operation_code for s in steps if not s.lifecycle.terminal}
        return {op: self._stats(stores, task, op) for op in wanted}

    def _stats(self, stores: Stores, task: TaskState, operation_code: str) -> DurationStats | None:
        key = self._key(task, operation_code)
        now = self._monotonic()
        with self._lock:
            cached = self._entries.get(key)
            if cached is not None and now - cached[0] < TTL_SECONDS:
                self._entries.move_to_end(key)
                return cached[1]
        stats = DurationStats.of(stores.durations.recent_durations(*key, SAMPLE))
        with self._lock:
            self._entries[key] = (now, stats)
            self._entries.move_to_end(key)
            while len(self._entries) > CAPACITY:
                self._entries.popitem(last=False)
        return stats

    def completed(self, task: TaskState, step: StepState) -> None:
        """A step succeeded here: while its operation's history is still filling up, the next ETA
        reads it again (each sample counts then); a full sample is refreshed by its TTL only, so
        a busy operation costs no query per event."""
        key = self._key(task, step.operation_code)
        with self._lock:
            cached = self._entries.get(key)
            if cached is not None and (cached[1] is None or cached[1].count < SAMPLE):
                del self._entries[key]
