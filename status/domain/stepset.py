"""The step attempts of one task, with what projections need kept current per change.

Projections run on every event.  Recomputing progress, the current step and
the detail list from every attempt made an event's cost grow with the task
(an agent task with 1,000 dynamic steps paid for 1,000 attempts per progress
tick).  A ``StepSet`` is immutable; ``with_step`` returns the set after one
attempt changed, updating the latest attempt per step, the latest attempts
of KNOWN steps (progress), the running ones (current step) and the order in
which attempts last changed (the detail window) — so the summary costs the
same whatever the number of steps, and the detail message carries a bounded
window of attempts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from status.domain.definitions import FailurePolicy
from status.domain.lifecycle import Health, Lifecycle
from status.domain.model import StepState

StepKey = tuple[str, int]

# The detail message shows every attempt of a task up to this many; past it, the
# non-terminal ones and then the most recently changed, and says how many it left out.
DETAIL_WINDOW = 50


def _will_run_again(step: StepState) -> bool:
    """A failed attempt whose error says it will be retried: its step is still ahead, not behind
    (the task's ETA counts it like a pending step until the next attempt starts)."""
    return (
        step.lifecycle is Lifecycle.FAILED
        and step.error is not None
        and bool(step.error.retryable)
        and step.failure_policy != "WAIT_FOR_USER"
    )


def _display_key(step: StepState) -> tuple[int, str, int]:
    return (step.step_order, step.step_id, step.attempt)


@dataclass(frozen=True)
class StepSet:
    attempts: dict[StepKey, StepState] = field(default_factory=dict)
    latest: dict[str, StepState] = field(default_factory=dict)  # step id -> its latest attempt
    known: dict[str, StepState] = field(default_factory=dict)  # the same, KNOWN steps only (progress)
    recent: dict[StepKey, None] = field(default_factory=dict)  # attempts, least recently changed first
    unfinished: dict[StepKey, None] = field(default_factory=dict)  # non-terminal attempts, same order
    waiting: dict[str, None] = field(default_factory=dict)  # steps whose latest attempt failed waiting for the user
    # Kept as attempts change, so an event's cost follows what is running, not how many steps wait:
    active: dict[StepKey, None] = field(default_factory=dict)  # unfinished attempts past PENDING
    stale: dict[StepKey, None] = field(default_factory=dict)  # unfinished attempts that are STALE
    # operation -> latest attempts still ahead: PENDING, or failed and about to be retried
    pending_ops: dict[str, int] = field(default_factory=dict)
    known_done: list[int] = field(default_factory=lambda: [0])  # latest KNOWN attempts SUCCEEDED (a cell)
    added_done: list[int] = field(default_factory=lambda: [0])  # latest DYNAMIC attempts SUCCEEDED (a cell)

    @classmethod
    def of(cls, steps: Iterable[StepState]) -> StepSet:
        ordered = sorted(steps, key=lambda s: (s.updated_at is not None, s.updated_at or 0, _display_key(s)))
        result = cls()
        for step in ordered:
            result = result._add(step)
        return result

    def __len__(self) -> int:
        return len(self.attempts)

    def get(self, step_id: str, attempt: int) -> StepState | None:
        return self.attempts.get((step_id, attempt))

    def with_step(self, step: StepState) -> StepSet:
        """The set after ``step`` (a new or changed attempt) — the original is untouched."""
        return StepSet(
            dict(self.attempts),
            dict(self.latest),
            dict(self.known),
            dict(self.recent),
            dict(self.unfinished),
            dict(self.waiting),
            dict(self.active),
            dict(self.stale),
            dict(self.pending_ops),
            [self.known_done[0]],
            [self.added_done[0]],
        )._add(step)

    def _add(self, step: StepState) -> StepSet:
        # Only ever called on a set nobody else holds yet (``of`` and ``with_step``).
        key = (step.step_id, step.attempt)
        self.attempts[key] = step
        self.recent.pop(key, None)
        self.recent[key] = None
        self.unfinished.pop(key, None)
        self.active.pop(key, None)
        self.stale.pop(key, None)
        if not step.lifecycle.terminal:
            self.unfinished[key] = None
            if step.lifecycle is not Lifecycle.PENDING:
                self.active[key] = None
            if step.health is Health.STALE:
                self.stale[key] = None
        latest = self.latest.get(step.step_id)
        if latest is None or step.attempt >= latest.attempt:
            if latest is not None:
                self._count(latest, -1)
            self._count(step, +1)
            self.latest[step.step_id] = step
            if step.step_kind == "KNOWN":
                self.known[step.step_id] = step
            self.waiting.pop(step.step_id, None)
            if step.lifecycle is Lifecycle.FAILED and step.failure_policy == "WAIT_FOR_USER":
                self.waiting[step.step_id] = None
        return self

    def _count(self, latest: StepState, delta: int) -> None:
        """Add (or take back) a latest attempt's share of the counters."""
        if latest.lifecycle is Lifecycle.PENDING or _will_run_again(latest):
            left = self.pending_ops.get(latest.operation_code, 0) + delta
            if left:
                self.pending_ops[latest.operation_code] = left
            else:
                self.pending_ops.pop(latest.operation_code, None)
        if latest.lifecycle is Lifecycle.SUCCEEDED:
            if latest.step_kind == "KNOWN":
                self.known_done[0] += delta
            else:
                self.added_done[0] += delta

    def all(self) -> list[StepState]:
        """Every attempt in display order."""
        return sorted(self.attempts.values(), key=_display_key)

    def attempts_of(self, step_id: str) -> list[StepState]:
        """A step's attempts, oldest first (as many look-ups as it has attempts, not the task's)."""
        latest = self.latest.get(step_id)
        if latest is None:
            return []
        found = (self.attempts.get((step_id, number)) for number in range(1, latest.attempt + 1))
        return [s for s in found if s is not None]

    def active_current(self) -> list[StepState]:
        """Latest attempts past PENDING that have not finished (bounded by what runs, not by size)."""
        found = (self.attempts[key] for key in self.active)
        return [s for s in found if self.latest[s.step_id] is s]

    def open_latest(self) -> list[StepState]:
        """What an ending task leaves unfinished: the latest attempt of every step that is RUNNING or
        still PENDING (not reached, or a local activity's activation still on its way)."""
        return [s for s in self.latest.values() if not s.lifecycle.terminal and not s.superseded]

    def operation_of(self, step_id: str | None) -> str | None:
        """A step's operation, if the step is known (a TASK_FAILED notice names it)."""
        latest = self.latest.get(step_id) if step_id is not None else None
        return latest.operation_code if latest is not None else None

    def current_stale(self) -> bool:
        """Whether a step's current attempt is STALE (the task's health stays STALE with it)."""
        return any(s.health is Health.STALE for s in self.latest.values() if not s.superseded)

    def current_degraded(self) -> bool:
        """Whether a step's current attempt failed and the task went on with a warning."""
        return any(
            s.lifecycle is Lifecycle.FAILED and s.failure_policy == FailurePolicy.CONTINUE_WITH_WARNING.value
            for s in self.latest.values()
            if not s.superseded
        )

    def stale_current(self) -> list[StepState]:
        """Unfinished attempts that are STALE."""
        return [self.attempts[key] for key in self.stale]

    def open_operations(self) -> set[str]:
        """Operations of the latest attempts still pending or running (what an ETA needs history of)."""
        return {s.operation_code for s in self.active_current()} | set(self.pending_ops)

    @property
    def added(self) -> int:
        """How many steps were registered while running (DYNAMIC), counting each step once."""
        return len(self.latest) - len(self.known)

    def running(self) -> list[StepState]:
        """Latest attempts that are RUNNING, in display order."""
        return sorted(
            (s for s in self.active_current() if s.lifecycle is Lifecycle.RUNNING),
            key=lambda s: (s.step_order, s.step_id),
        )

    def stale_besides(self, step_id: str, attempt: int) -> bool:
        """Whether an unfinished attempt other than this one is STALE (task health)."""
        return any(key != (step_id, attempt) for key in self.stale)

    def window(self, limit: int = DETAIL_WINDOW) -> tuple[list[StepState], int]:
        """At most ``limit`` attempts in display order, and how many were left out.

        Unfinished attempts first (what the user is waiting for), then the most
        recently changed; earlier finished attempts are in the task snapshot.
        """
        if len(self.attempts) <= limit:
            return self.all(), 0
        chosen: dict[StepKey, StepState] = {}
        for key in reversed(self.unfinished):
            chosen[key] = self.attempts[key]
            if len(chosen) == limit:
                break
        for key in reversed(self.recent):
            if len(chosen) >= limit:
                break
            chosen.setdefault(key, self.attempts[key])
        return sorted(chosen.values(), key=_display_key), len(self.attempts) - len(chosen)
