"""ETA rules with deterministic durations (status.domain.eta)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from status.domain.eta import DurationStats, Estimate, step_estimate, task_estimate
from status.domain.lifecycle import Lifecycle
from status.domain.model import Progress, StepState
from status.domain.stepset import StepSet

NOW = datetime(2026, 11, 30, 12, 0, 0)


def _step(step_id: str, lifecycle: Lifecycle, *, elapsed_s: float = 0, progress: Progress | None = None) -> StepState:
    return StepState(
        task_id="t",
        step_id=step_id,
        attempt=1,
        client_step_key=step_id,
        operation_code="DOCUMENT.PARSE",
        operation_definition_version=1,
        service_name="*",
        lifecycle=lifecycle,
        business_status=lifecycle.value,
        version=1,
        started_at=NOW - timedelta(seconds=elapsed_s) if lifecycle is not Lifecycle.PENDING else None,
        progress=progress,
    )


def test_history_is_robust_to_outliers_and_needs_a_few_samples() -> None:
    assert DurationStats.of([60_000, 60_000]) is None
    stats = DurationStats.of([58_000, 60_000, 61_000, 59_000, 3_600_000])  # one stuck run
    assert stats is not None and stats.median_ms == 60_000 and stats.count == 5
    tight = DurationStats.of([60_000] * 20)
    loose = DurationStats.of([10_000, 60_000, 200_000, 30_000, 90_000])
    assert tight is not None and loose is not None and tight.confidence > loose.confidence


def test_a_running_step_counts_down_from_its_history() -> None:
    stats = DurationStats.of([60_000] * 10)
    estimate = step_estimate(_step("p", Lifecycle.RUNNING, elapsed_s=20), stats, NOW)
    assert estimate is not None and estimate.remaining_ms == 40_000
    # Past the typical duration and past what history has seen: no honest estimate.
    assert step_estimate(_step("p", Lifecycle.RUNNING, elapsed_s=90), stats, NOW) is None
    # Pending: its typical duration, with less confidence.
    pending = step_estimate(_step("p", Lifecycle.PENDING), stats, NOW)
    assert pending is not None and pending.remaining_ms == 60_000 and stats is not None
    assert pending.confidence < stats.confidence
    assert step_estimate(_step("p", Lifecycle.SUCCEEDED), stats, NOW) is None


def test_progress_rate_alone_and_blended_with_history() -> None:
    half = Progress(50, 100)
    alone = step_estimate(_step("p", Lifecycle.RUNNING, elapsed_s=30, progress=half), None, NOW)
    assert alone == Estimate(30_000, 0.45)
    # Too early to measure a rate: nothing to go on without history.
    assert step_estimate(_step("p", Lifecycle.RUNNING, elapsed_s=0.5, progress=half), None, NOW) is None
    stats = DurationStats.of([100_000] * 10)
    assert stats is not None
    blended = step_estimate(_step("p", Lifecycle.RUNNING, elapsed_s=30, progress=half), stats, NOW)
    # history says 70 s left, the rate says 30 s; at 50 % each counts half.
    assert blended is not None and blended.remaining_ms == 50_000
    assert blended.confidence > max(0.45, stats.confidence)


def test_a_task_adds_its_pending_steps_to_its_longest_running_one() -> None:
    running = [Estimate(10_000, 0.9), Estimate(25_000, 0.8)]
    pending = [(2, Estimate(30_000, 0.5)), (0, None)]  # two pending steps of one operation; none of another
    assert task_estimate(Lifecycle.RUNNING, running, pending) == Estimate(85_000, 0.5)
    # One unfinished step without an estimate makes the task's unknown; a finished task has none.
    assert task_estimate(Lifecycle.RUNNING, [*running, None], pending) is None
    assert task_estimate(Lifecycle.RUNNING, running, [(1, None)]) is None
    assert task_estimate(Lifecycle.SUCCEEDED, running, pending) is None
    assert task_estimate(Lifecycle.RUNNING, [], []) is None  # nothing left to estimate


def test_the_step_set_keeps_its_counters_as_attempts_change() -> None:
    """What ETAs and progress read without a pass over every step: pending per operation, done, active."""
    steps = StepSet.of([_step(f"s{i}", Lifecycle.PENDING) for i in range(5)])
    assert steps.pending_ops == {"DOCUMENT.PARSE": 5} and steps.known_done[0] == 0 and not steps.active
    running = steps.with_step(replace(_step("s0", Lifecycle.RUNNING), version=2))
    assert running.pending_ops == {"DOCUMENT.PARSE": 4} and [s.step_id for s in running.active_current()] == ["s0"]
    assert steps.pending_ops == {"DOCUMENT.PARSE": 5}  # the original is untouched
    done = running.with_step(replace(_step("s0", Lifecycle.SUCCEEDED), version=3))
    assert done.known_done[0] == 1 and not done.active and done.pending_ops == {"DOCUMENT.PARSE": 4}
    retry = done.with_step(replace(_step("s0", Lifecycle.PENDING), attempt=2))
    assert retry.known_done[0] == 0 and retry.pending_ops == {"DOCUMENT.PARSE": 5}


def test_a_step_waiting_for_its_retry_is_still_ahead_of_the_task() -> None:
    """Between a failed attempt that will be retried and the next attempt, the step is neither
    running nor pending: the task's ETA said 'finishing…' with two of three steps left."""
    from status.domain.model import StepError

    stats = DurationStats.of([10.0, 10.0, 10.0, 10.0])
    failed = replace(
        _step("s1", Lifecycle.FAILED, elapsed_s=3), error=StepError("DEPENDENCY", "BUSY", "retrying", retryable=True)
    )
    steps = StepSet.of([replace(_step("s0", Lifecycle.SUCCEEDED), version=2), failed, _step("s2", Lifecycle.PENDING)])
    assert steps.pending_ops == {"DOCUMENT.PARSE": 2}  # the one to retry and the one not started
    from status.domain.eta import pending_estimate

    estimate = task_estimate(
        Lifecycle.RUNNING, [], [(count, pending_estimate(stats)) for count in steps.pending_ops.values()]
    )
    assert estimate is not None and estimate.remaining_ms == 2 * pending_estimate(stats).remaining_ms  # type: ignore[union-attr]
    # A failure that is final is behind the task, not ahead of it.
    final = replace(failed, error=StepError("BUSINESS", "REFUSED", "no", retryable=False))
    assert StepSet.of([final, _step("s2", Lifecycle.PENDING)]).pending_ops == {"DOCUMENT.PARSE": 1}
