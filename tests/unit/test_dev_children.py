"""The dev stack's restart budget: bounded restarts within a sliding window."""

from __future__ import annotations

from task_observer.devchildren import RestartBudget


def test_a_child_is_restarted_up_to_the_limit_within_the_window_then_not() -> None:
    budget = RestartBudget(limit=3, window=600)
    assert [budget.take(t) for t in (0.0, 10.0, 20.0)] == [True, True, True]
    assert budget.used == 3
    assert budget.take(30.0) is False  # a fourth death within ten minutes: give up
    assert budget.used == 3  # a refused restart is not counted


def test_restarts_older_than_the_window_no_longer_count() -> None:
    budget = RestartBudget(limit=2, window=100)
    assert budget.take(0.0) and budget.take(50.0)
    assert budget.take(99.0) is False
    assert budget.take(100.0) is True  # the one at 0 s left the window
    assert budget.take(120.0) is False  # 50 s and 100 s are still in it
    assert budget.take(150.0) is True
