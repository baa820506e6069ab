"""StepSet: incremental projections' inputs equal a full recomputation; the detail window is bounded."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from status.domain.lifecycle import Health, Lifecycle
from status.domain.model import StepError, StepState
from status.domain.stepset import DETAIL_WINDOW, StepSet
from tests.support.states import task_state

T0 = datetime(2026, 1, 1)


def _step(step_id: str, attempt: int = 1, kind: str = "KNOWN", order: int = 0, **kw: object) -> StepState:
    base = StepState(
        task_id="tsk",
        step_id=step_id,
        attempt=attempt,
        client_step_key=step_id,
        operation_code="OP",
        operation_definition_version=1,
        service_name="svc",
        lifecycle=Lifecycle.PENDING,
        business_status="PENDING",
        version=1,
        step_kind=kind,
        step_order=order,
        updated_at=T0,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


LIFECYCLES = st.sampled_from([Lifecycle.PENDING, Lifecycle.RUNNING, Lifecycle.SUCCEEDED, Lifecycle.FAILED])
CHANGES = st.lists(
    st.tuples(
        st.integers(0, 6),  # step
        st.integers(1, 3),  # attempt
        LIFECYCLES,
        st.booleans(),  # STALE
        st.booleans(),  # a failure that will be retried
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(changes=CHANGES)
def test_incremental_state_equals_a_full_recomputation(changes: list[tuple[int, int, Lifecycle, bool, bool]]) -> None:
    steps = StepSet()
    truth: dict[tuple[str, int], StepState] = {}
    for i, (n, attempt, lifecycle, stale, retried) in enumerate(changes):
        step = _step(
            f"s{n}",
            attempt,
            kind="DYNAMIC" if n % 2 else "KNOWN",  # a step's kind never changes
            order=n,
            lifecycle=lifecycle,
            health=Health.STALE if stale else Health.HEALTHY,
            updated_at=T0 + timedelta(seconds=i),
            error=StepError("DEPENDENCY", "BUSY", "retrying", retryable=retried)
            if lifecycle is Lifecycle.FAILED
            else None,
        )
        before = steps
        steps = steps.with_step(step)
        assert len(before) == len(truth)  # the earlier set is untouched
        truth[(step.step_id, step.attempt)] = step
    latest: dict[str, StepState] = {}
    for s in truth.values():
        if s.step_id not in latest or s.attempt > latest[s.step_id].attempt:
            latest[s.step_id] = s
    assert steps.all() == sorted(truth.values(), key=lambda s: (s.step_order, s.step_id, s.attempt))
    assert sorted(steps.known.values(), key=lambda s: s.step_id) == sorted(
        (s for s in latest.values() if s.step_kind == "KNOWN"), key=lambda s: s.step_id
    )
    # The counters the set keeps as attempts change agree with a pass over every step.
    pending: dict[str, int] = {}
    for s in latest.values():  # ahead: not started yet, or failed and about to be retried
        if s.lifecycle is Lifecycle.PENDING or (s.lifecycle is Lifecycle.FAILED and s.error and s.error.retryable):
            pending[s.operation_code] = pending.get(s.operation_code, 0) + 1
    assert steps.pending_ops == pending
    assert steps.known_done[0] == sum(
        1 for s in latest.values() if s.step_kind == "KNOWN" and s.lifecycle is Lifecycle.SUCCEEDED
    )
    assert steps.added_done[0] == sum(
        1 for s in latest.values() if s.step_kind != "KNOWN" and s.lifecycle is Lifecycle.SUCCEEDED
    )
    assert set(steps.stale) == {k for k, s in truth.items() if not s.lifecycle.terminal and s.health is Health.STALE}
    assert steps.running() == sorted(
        (s for s in latest.values() if s.lifecycle is Lifecycle.RUNNING), key=lambda s: (s.step_order, s.step_id)
    )
    for key in truth:
        expected = any(s.health is Health.STALE and not s.lifecycle.terminal for k, s in truth.items() if k != key)
        assert steps.stale_besides(*key) is expected
    assert StepSet.of(truth.values()).all() == steps.all()


def test_the_detail_window_keeps_unfinished_then_recent_attempts() -> None:
    steps = StepSet.of(
        _step(f"d{i:04d}", kind="DYNAMIC", order=10_000 + i, lifecycle=Lifecycle.SUCCEEDED, updated_at=T0)
        for i in range(1000)
    )
    # Two long-running attempts changed long ago, then the latest changes.
    steps = steps.with_step(_step("d0001", kind="DYNAMIC", order=10_001, lifecycle=Lifecycle.RUNNING))
    steps = steps.with_step(_step("d0002", kind="DYNAMIC", order=10_002, lifecycle=Lifecycle.RUNNING))
    for i in range(900, 1000):
        steps = steps.with_step(_step(f"d{i:04d}", kind="DYNAMIC", order=10_000 + i, lifecycle=Lifecycle.FAILED))
    shown, omitted = steps.window()
    assert len(shown) == DETAIL_WINDOW and omitted == 1000 - DETAIL_WINDOW
    ids = [s.step_id for s in shown]
    assert ids[:2] == ["d0001", "d0002"]  # unfinished first, however old their last change
    assert ids[2:] == [f"d{i:04d}" for i in range(1000 - DETAIL_WINDOW + 2, 1000)]  # then the most recent
    assert ids == sorted(ids)  # in display order


def test_a_steps_attempts_are_its_own_oldest_first() -> None:
    steps = StepSet.of([_step("s2", attempt=3), _step("s1"), _step("s2"), _step("s3", attempt=2)])
    assert [(s.step_id, s.attempt) for s in steps.attempts_of("s2")] == [("s2", 1), ("s2", 3)]
    assert [(s.step_id, s.attempt) for s in steps.attempts_of("s1")] == [("s1", 1)]
    assert steps.attempts_of("s4") == []


def test_a_small_task_shows_every_attempt() -> None:
    steps = StepSet.of(_step(f"s{i}", order=i) for i in range(DETAIL_WINDOW))
    shown, omitted = steps.window()
    assert omitted == 0 and [s.step_id for s in shown] == [f"s{i}" for i in range(DETAIL_WINDOW)]


def test_a_detail_message_shows_each_step_as_it_is_now() -> None:
    from status.domain.eta import Estimate
    from status.domain.projections import _step_detail, _step_shown

    step = _step("s1")
    first = _step_detail(step)
    assert first == _step_shown(step)
    assert _step_detail(step) is first  # the same step again: what it showed is reused
    running = replace(step, lifecycle=Lifecycle.RUNNING, version=2, started_at=T0 + timedelta(seconds=3))
    again = _step_detail(running)
    assert again == _step_shown(running) != first
    assert (again["lifecycleStatus"], again["stepVersion"], again["startedAt"]) == (
        "RUNNING",
        "2",
        "2026-01-01T00:00:03.000Z",
    )
    # The estimate moves with time: added fresh on every message, never kept with the step.
    assert _step_detail(running, Estimate(4000, 0.5))["etaMs"] == 4000
    assert _step_detail(running, Estimate(2500, 0.5))["etaMs"] == 2500
    assert "etaMs" not in _step_detail(running)


def test_a_waiting_steps_estimate_is_its_operations_and_kept_while_its_history_is() -> None:
    from status.domain.eta import DurationStats
    from status.domain.projections import _step_listed, _step_shown

    task = task_state(lifecycle=Lifecycle.RUNNING)
    waiting = _step("s1")  # PENDING
    usual = DurationStats(10, 4000.0, 3000.0, 5000.0)
    first = _step_listed(task, waiting, {waiting.operation_code: usual}, T0)
    assert first == {**_step_shown(waiting), "etaMs": 4000, "etaConfidence": round(0.8 * usual.confidence, 2)}
    # Time passing does not move it: the listing is reused for the same step and statistics.
    assert _step_listed(task, waiting, {waiting.operation_code: usual}, T0 + timedelta(hours=1)) is first
    longer = DurationStats(20, 9000.0, 8000.0, 10000.0)  # the history learned more: new statistics
    assert _step_listed(task, waiting, {waiting.operation_code: longer}, T0)["etaMs"] == 9000
    assert "etaMs" not in _step_listed(task, waiting, {waiting.operation_code: None}, T0)
    # A running step's estimate moves with time: computed for every message.
    running = replace(waiting, lifecycle=Lifecycle.RUNNING, version=2, started_at=T0)
    assert _step_listed(task, running, {waiting.operation_code: usual}, T0 + timedelta(seconds=1))["etaMs"] == 3000
    assert _step_listed(task, running, {waiting.operation_code: usual}, T0 + timedelta(seconds=3))["etaMs"] == 1000


def test_an_ending_task_leaves_open_the_latest_unfinished_attempt_of_each_step() -> None:
    steps = StepSet.of(
        [
            _step("a", 1, lifecycle=Lifecycle.FAILED),
            _step("a", 2, lifecycle=Lifecycle.RUNNING),
            _step("b", 1, lifecycle=Lifecycle.SUCCEEDED),
            _step("c", 1),  # not reached
            _step("d", 1, lifecycle=Lifecycle.RUNNING, superseded=True),
        ]
    )
    assert sorted((s.step_id, s.attempt) for s in steps.open_latest()) == [("a", 2), ("c", 1)]


def test_a_steps_operation_is_its_latest_attempts() -> None:
    steps = StepSet.of([_step("a", 1, operation_code="OCR"), _step("a", 2, operation_code="OCR.V2")])
    assert (steps.operation_of("a"), steps.operation_of("zz"), steps.operation_of(None)) == ("OCR.V2", None, None)


def test_the_tasks_health_follows_the_current_attempts_only() -> None:
    stale_then_retried = StepSet.of(
        [_step("a", 1, lifecycle=Lifecycle.RUNNING, health=Health.STALE), _step("a", 2, lifecycle=Lifecycle.RUNNING)]
    )
    assert not stale_then_retried.current_stale()
    assert StepSet.of([_step("a", 1, lifecycle=Lifecycle.RUNNING, health=Health.STALE)]).current_stale()
    warned = _step("a", 1, lifecycle=Lifecycle.FAILED, failure_policy="CONTINUE_WITH_WARNING")
    assert StepSet.of([warned]).current_degraded()
    assert not StepSet.of([replace(warned, failure_policy="FAIL_TASK")]).current_degraded()
    assert not StepSet.of([replace(warned, superseded=True)]).current_degraded()
