"""Past durations per (tenant, scope, task type, operation): the history ETAs are computed from.

Read from completed step attempts (the producers' own ``durationMs``) and kept in memory for a
minute, so an event costs no extra query once its operations are known; a success committed
through this process joins its key's sample in memory (while the sample is not full), so a
history that is still filling up costs no query per success either.  The read is bounded (the
newest ``SAMPLE`` successes) and uses ``task_step_duration_idx``.
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
        # key -> (read at, the sample's durations, their stats)
        self._entries: OrderedDict[Key, tuple[float, list[float], DurationStats | None]] = OrderedDict()
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
                return cached[2]
        sample = stores.durations.recent_durations(*key, SAMPLE)
        stats = DurationStats.of(sample)
        with self._lock:
            self._entries[key] = (now, sample, stats)
            self._entries.move_to_end(key)
            while len(self._entries) > CAPACITY:
                self._entries.popitem(last=False)
        return stats

    def completed(self, task: TaskState, step: StepState) -> None:
        """A step's success was committed here: while its operation's sample is not full, the
        duration joins it at once (each sample counts then; a query per success would cost the
        filling-up history one read per event); a full sample is refreshed by its TTL only, so a
        busy operation costs no query per event. Call after COMMIT (a rolled-back success never
        counts)."""
        if step.duration_ms is None or step.duration_ms < 0:
            return
        key = self._key(task, step.operation_code)
        with self._lock:
            cached = self._entries.get(key)
            if cached is not None and len(cached[1]) < SAMPLE:
                sample = [*cached[1], float(step.duration_ms)]
                self._entries[key] = (cached[0], sample, DurationStats.of(sample))
