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

import sqlalchemy as sa

from status.domain.eta import DurationStats
from status.domain.lifecycle import Lifecycle
from status.domain.model import StepState, TaskState
from status.domain.stepset import StepSet
from status.infra import tables as t

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
        self, conn: sa.Connection, task: TaskState, steps: StepSet | Iterable[StepState]
    ) -> dict[str, DurationStats | None]:
        """Stats for the operations of the task's unfinished steps (what an ETA needs)."""
        if task.lifecycle.terminal:
            return {}
        if isinstance(steps, StepSet):
            wanted = steps.open_operations()  # kept by the set: no pass over every step
        else:
            wanted = {s.operation_code for s in steps if not s.lifecycle.terminal}
        return {op: self._stats(conn, task, op) for op in wanted}

    def _stats(self, conn: sa.Connection, task: TaskState, operation_code: str) -> DurationStats | None:
        key = self._key(task, operation_code)
        now = self._monotonic()
        with self._lock:
            cached = self._entries.get(key)
            if cached is not None and now - cached[0] < TTL_SECONDS:
                self._entries.move_to_end(key)
                return cached[1]
        stats = DurationStats.of(self._load(conn, key))
        with self._lock:
            self._entries[key] = (now, stats)
            self._entries.move_to_end(key)
            while len(self._entries) > CAPACITY:
                self._entries.popitem(last=False)
        return stats

    @staticmethod
    def _load(conn: sa.Connection, key: Key) -> list[float]:
        tenant, scope, task_type, operation_code = key
        s, k = t.task_step, t.task
        type_filter = k.c.task_type.is_(None) if task_type == "" else k.c.task_type == task_type
        query = (
            sa.select(s.c.duration_ms)
            .join(k, k.c.id == s.c.task_id)
            .where(
                s.c.operation_code == operation_code,
                s.c.lifecycle_status == Lifecycle.SUCCEEDED.value,
                s.c.duration_ms.is_not(None),
                k.c.tenant_id == tenant,
                k.c.authority_scope == scope,
                type_filter,
            )
            .order_by(s.c.finished_at.desc())
            .limit(SAMPLE)
        )
        return [float(d) for d in conn.scalars(query)]

    def completed(self, task: TaskState, step: StepState) -> None:
        """A step succeeded here: while its operation's history is still filling up, the next ETA
        reads it again (each sample counts then); a full sample is refreshed by its TTL only, so
        a busy operation costs no query per event."""
        key = self._key(task, step.operation_code)
        with self._lock:
            cached = self._entries.get(key)
            if cached is not None and (cached[1] is None or cached[1].count < SAMPLE):
                del self._entries[key]
