"""Readiness with hysteresis and draining: the pure rules."""

from __future__ import annotations

from status.domain.readiness import Readiness, ReadinessPolicy, after_probe, draining, probe_due

POLICY = ReadinessPolicy(fail_after=3, recover_after=2, interval_seconds=2.0)


def _run(state: Readiness, outcomes: str, start: float = 0.0) -> list[bool]:
    seen = []
    for i, outcome in enumerate(outcomes):
        state = after_probe(state, POLICY, outcome == "+", start + i * 2.0)
        seen.append(state.ready)
    return seen


def test_a_replica_turns_ready_on_its_first_good_probe_and_rides_out_short_blips() -> None:
    assert Readiness().ready is False and Readiness().reason == "starting"
    assert _run(Readiness(), "+--+--") == [True, True, True, True, True, True]


def test_it_leaves_only_after_three_failures_in_a_row_and_returns_after_two_successes() -> None:
    assert _run(Readiness(), "+---++") == [True, True, True, False, False, True]
    state = Readiness()
    for i, outcome in enumerate("+---"):
        state = after_probe(state, POLICY, outcome == "+", float(i))
    assert state.reason == "database unreachable (3 consecutive failed probes)"
    state = after_probe(state, POLICY, True, 10.0)
    assert not state.ready and state.reason == "recovering"


def test_a_database_down_at_start_keeps_it_unready_and_says_why() -> None:
    state = after_probe(Readiness(), POLICY, False, 0.0)
    assert not state.ready and state.reason == "database unreachable (1 consecutive failed probes)"
    assert after_probe(state, POLICY, True, 2.0).ready  # the first success after start


def test_draining_is_unready_whatever_the_probes_say_and_probes_no_more() -> None:
    state = draining(after_probe(Readiness(), POLICY, True, 0.0))
    assert not state.ready and state.reason == "draining"
    assert after_probe(state, POLICY, True, 5.0) == state
    assert not probe_due(state, POLICY, 100.0)


def test_health_checks_within_an_interval_share_one_probe() -> None:
    state = after_probe(Readiness(), POLICY, True, 10.0)
    assert probe_due(Readiness(), POLICY, 0.0)
    assert not probe_due(state, POLICY, 11.9) and probe_due(state, POLICY, 12.0)


def test_a_worker_signalled_before_its_application_exists_starts_draining() -> None:
    """``serve --workers N``: a worker takes SIGTERM before its application is built (the factory runs
    in its startup); the application must then start draining, not report ready for the window."""
    from status.api.serving import _WorkerDrain

    drained: list[str] = []
    early = _WorkerDrain()
    early()  # SIGTERM while the worker is still starting
    early.register(lambda: drained.append("early"))
    late = _WorkerDrain()
    late.register(lambda: drained.append("late"))
    assert drained == ["early"]  # registering alone drains nothing
    late()
    assert drained == ["early", "late"]
