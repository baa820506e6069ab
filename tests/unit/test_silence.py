"""The reporting path's silence against one executor's (status.domain.silence), time passed in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from status.domain.silence import HeartbeatCensus, ingest_silent, stale_cutoff

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def census(running: int, producers: int, newest_ago: float | None, interval: int = 15) -> HeartbeatCensus:
    newest = None if newest_ago is None else NOW - timedelta(seconds=newest_ago)
    return HeartbeatCensus(running, producers, newest, interval)


def test_a_lone_executor_counts_its_deadline_as_it_passes() -> None:
    assert stale_cutoff(census(1, 1, 40), NOW) == NOW
    assert stale_cutoff(census(4, 1, 40), NOW) == NOW  # one producer, too few steps to be a fleet


def test_in_a_fleet_only_deadlines_before_the_newest_beat_count() -> None:
    assert stale_cutoff(census(2, 2, 40), NOW) == NOW - timedelta(seconds=40)
    assert stale_cutoff(census(5, 1, 3), NOW) == NOW - timedelta(seconds=3)
    assert stale_cutoff(census(5, 2, None), NOW) == NOW  # nothing heard yet: no census to go by


def test_the_path_is_silent_after_several_intervals_without_anyone_heard() -> None:
    assert not ingest_silent(census(6, 2, 44), NOW)
    assert ingest_silent(census(6, 2, 46), NOW)
    assert not ingest_silent(census(1, 1, 460), NOW)  # a lone executor's silence is its own
    assert not ingest_silent(census(0, 0, None), NOW)


@given(
    interval=st.integers(1, 600),
    timeout_intervals=st.floats(2, 10),
    behind=st.lists(st.floats(0, 1), min_size=2, max_size=50),
    outage=st.floats(0, 3600),
)
def test_no_step_of_a_beating_fleet_is_due_while_nobody_is_heard(
    interval: int, timeout_intervals: float, behind: list[float], outage: float
) -> None:
    """Steps that each beat within one interval of the newest beat (a fleet beating until the
    outage) never have a deadline at or before the cutoff, however long nobody is heard."""
    newest = NOW - timedelta(seconds=outage)
    fleet = HeartbeatCensus(len(behind), 2, newest, interval)
    timeout = timedelta(seconds=interval * timeout_intervals)  # at least two intervals (design D8.7)
    deadlines = [newest - timedelta(seconds=interval * b) + timeout for b in behind]
    assert all(deadline > stale_cutoff(fleet, NOW) for deadline in deadlines)
