"""Which step attempt an activation binds: Temporal's attempt numbers are the truth (design D4R2).

Pure decision over a step's attempts as stored. Temporal numbers the attempts of one activity
(``activity.info().attempt``); a step's attempts run on across everything that re-runs it — the
activity's retries, a workflow retry or continue-as-new that schedules the step again (a new
activity: its attempts start at 1 again), a workflow that schedules it twice. So the step's
number for an activation is the step's own, placed by Temporal's:

* the same activity and Temporal attempt as a stored attempt: that attempt (idempotent);
* the same activity, a later Temporal attempt: as many step attempts further on as Temporal went
  (attempt 3 after attempt 1 is two further; attempt 2 never reached the service — a worker died,
  a heartbeat timed out before the first report — and is closed as lost);
* another activity: after the step's newest attempt, by the activity's own attempt number (its
  first attempts may be lost too); the step's first attempt, created with the task and never
  bound, is the first attempt of the first activity;
* an older Temporal attempt than one stored for the same activity, or an activity whose step has
  moved on to a newer activity: refused (an old attempt never overwrites a newer one).

Activations that name no Temporal activity (a producer outside Temporal) keep their numbers as
given, with the same rules: the same number binds, a later one goes ahead, lost ones between.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from status.domain.definitions import StatusDefinitionSet
from status.domain.errors import Conflict, ErrorCode, Forbidden, NotFound
from status.domain.lifecycle import Health, Lifecycle
from status.domain.model import StepError, StepState, TaskState, evolve

# Attempts closed as lost are written as rows of their own; past this many only the newest are
# (an activity at attempt 500 whose reports never arrived must not write 500 rows in one event).
MAX_LOST_ROWS = 32


@dataclass(frozen=True)
class Placement:
    """Where an activation goes: the step attempt it binds (``existing`` when the row is there already),
    and the attempts between the current one and it that never reported: rows to write closed as
    lost, in the same version (the current attempt itself is superseded as any older attempt is)."""

    attempt: int
    existing: StepState | None
    lost: tuple[int, ...] = ()


def place_activation(
    attempts: Sequence[StepState], activity: str | None, temporal_attempt: int, step_id: str
) -> Placement:
    """The step attempt for Temporal attempt ``temporal_attempt`` of ``activity`` (None: no Temporal identity).

    ``attempts``: the step's stored attempts, oldest first (never empty: the first is created with
    the task).
    """
    current = attempts[-1]
    if activity is None:
        number = temporal_attempt
        same = next((s for s in attempts if s.attempt == number), None)
        if same is not None and (same.execution_id is not None or same is current):
            return Placement(number, same)
        if number < current.attempt or same is not None:
            raise _stale(step_id, temporal_attempt, current)
        return Placement(number, None, _lost(current, number))
    mine = [s for s in attempts if s.temporal_activity == activity]
    same = next((s for s in mine if s.temporal_attempt == temporal_attempt), None)
    if same is not None:
        return Placement(same.attempt, same)
    if mine:
        newest = max(mine, key=lambda s: s.temporal_attempt or 0)
        if newest is not current or temporal_attempt < (newest.temporal_attempt or 0):
            raise _stale(step_id, temporal_attempt, current)
        number = current.attempt + temporal_attempt - (newest.temporal_attempt or 0)
        return Placement(number, None, _lost(current, number))
    if current.execution_id is None and current.temporal_activity is None and not current.lifecycle.terminal:
        # The attempt created with the task, never bound: the first activity's first attempt.
        number = current.attempt - 1 + temporal_attempt
        if number == current.attempt:
            return Placement(number, current)
        return Placement(number, None, _lost(current, number))
    number = current.attempt + temporal_attempt
    return Placement(number, None, _lost(current, number))


@dataclass(frozen=True)
class Activation:
    """An activation decided: the same bound attempt again (``rebind``: answered as it was), or
    where a new binding goes (``placement``), and whether it supersedes the current attempt."""

    placement: Placement
    rebind: bool

    @property
    def supersedes(self) -> bool:
        return self.placement.existing is None


def decide_activation(
    task: TaskState,
    attempts: Sequence[StepState],
    activity: str | None,
    temporal_attempt: int,
    step_id: str,
    producer_id: str,
) -> Activation:
    """Whether and where attempt ``temporal_attempt`` of a known step is activated (``attempts``:
    the step's stored attempts, oldest first; none when the task has no such step).

    Refused: a step the task does not know (UNKNOWN_STEP), an attempt bound to another producer
    (PRODUCER_MISMATCH), an older attempt than the step's current one (STALE_ATTEMPT), and any
    new binding once the task has ended (TERMINAL_STATE: its end ended the step's attempts, and a
    late activation or an abandoned activity's retry would show the step running after the work
    stopped). The same activation of an attempt bound before is answered again, ended task or not.
    """
    if not attempts or attempts[0].step_kind != "KNOWN":
        raise NotFound(f"step {step_id} is not a known step of this task", ErrorCode.UNKNOWN_STEP)
    placed = place_activation(attempts, activity, temporal_attempt, step_id)
    existing = placed.existing
    if existing is not None and existing.execution_id is not None:
        if existing.producer_id != producer_id:
            raise Forbidden("this attempt is bound to another producer", ErrorCode.PRODUCER_MISMATCH)
        return Activation(placed, rebind=True)
    if task.lifecycle.terminal:
        raise Conflict(f"task {task.task_id} has ended; it takes no new attempts", ErrorCode.TERMINAL_STATE)
    return Activation(placed, rebind=False)


def _lost(current: StepState, number: int) -> tuple[int, ...]:
    """The attempt numbers strictly between the current attempt and ``number`` (the newest few)."""
    return tuple(range(max(current.attempt + 1, number - MAX_LOST_ROWS), number))


def _stale(step_id: str, temporal_attempt: int, current: StepState) -> Conflict:
    return Conflict(
        f"attempt {temporal_attempt} of {step_id} is older than its current attempt {current.attempt}",
        ErrorCode.STALE_ATTEMPT,
    )


# ---------------------------------------------------------------- the rows an activation writes
NEVER_REPORTED = StepError("TIMEOUT", "NEVER_REPORTED", "This attempt never reported.", retryable=True)
RESULT_AFTER_TIMEOUT = StepError(
    "TIMEOUT",
    "RESULT_AFTER_TIMEOUT",
    "This attempt finished after Temporal had timed it out; its result was discarded.",
    retryable=True,
)


def superseded_attempt(
    previous: StepState, statuses: StatusDefinitionSet, now: datetime, *, retried_by_temporal: bool = False
) -> StepState:
    """An attempt a newer one replaced: marked superseded, and TIMED_OUT unless it had finished
    (one that was never bound never reported: it says so).

    ``retried_by_temporal``: the newer attempt is a later Temporal attempt of the same activity.
    The trap is an attempt that reported success: Temporal runs an activity again only after an
    attempt failed or timed out, so a success followed by Temporal's retry is a result Temporal had
    already refused (the worker returned after the heartbeat or start-to-close timeout; the SDK
    logs "Activity not found on completion"). Temporal's verdict on an attempt is final: it is
    shown TIMED_OUT, as Temporal recorded it, not SUCCEEDED.
    """
    previous = evolve(previous, superseded=True)
    refused = retried_by_temporal and previous.lifecycle is Lifecycle.SUCCEEDED
    if previous.lifecycle.terminal and not refused:
        return previous
    return evolve(
        previous,
        lifecycle=Lifecycle.TIMED_OUT,
        business_status=statuses.resolve(None, Lifecycle.TIMED_OUT, None).code,
        health=Health.HEALTHY,
        finished_at=previous.finished_at if refused else now,
        version=previous.version + 1,
        updated_at=now,
        error=RESULT_AFTER_TIMEOUT
        if refused
        else previous.error or (NEVER_REPORTED if previous.execution_id is None else None),
    )


def next_attempt(
    current: StepState, number: int, lifecycle: Lifecycle, statuses: StatusDefinitionSet, now: datetime
) -> StepState:
    """Attempt ``number`` of the step as a fresh row: the step's identity, nothing of an attempt's state."""
    return evolve(
        current,
        attempt=number,
        lifecycle=lifecycle,
        business_status=statuses.resolve(None, lifecycle, None).code,
        health=Health.HEALTHY,
        superseded=False,
        version=1,
        source_seq=0,
        execution_id=None,
        last_heartbeat_seq=0,
        last_heartbeat_at=None,
        stale_since=None,
        progress=None,
        phase_code=None,
        phase_label=None,
        data_schema=None,
        state_data=None,
        activated_at=None,
        started_at=None,
        finished_at=now if lifecycle.terminal else None,
        duration_ms=None,
        error=None,
        temporal_activity=None,
        temporal_attempt=None,
        updated_at=now,
    )


def lost_attempt(current: StepState, number: int, statuses: StatusDefinitionSet, now: datetime) -> StepState:
    """Attempt ``number`` of the step, which Temporal ran and which never reported: TIMED_OUT, superseded."""
    lost = next_attempt(current, number, Lifecycle.TIMED_OUT, statuses, now)
    return evolve(lost, superseded=True, error=NEVER_REPORTED)
