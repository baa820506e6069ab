"""A heartbeat judged against its step attempt, without a database (status.domain.heartbeats)."""

from __future__ import annotations

from typing import NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from status.domain.errors import ErrorCode
from status.domain.heartbeats import BeatOutcome, judge_beat, takes_guarded_write
from status.domain.lifecycle import Health, Lifecycle


class Row(NamedTuple):
    execution_id: str | None = "exe_1"
    superseded: bool = False
    lifecycle_status: str = Lifecycle.RUNNING.value
    health: str = Health.HEALTHY.value
    last_heartbeat_seq: int = 4


def test_a_newer_beat_of_the_running_attempt_is_accepted() -> None:
    verdict = judge_beat("exe_1", 5, Row(), 4)
    assert (verdict.outcome, verdict.reason, verdict.health) == (BeatOutcome.ACCEPTED, None, "HEALTHY")


@pytest.mark.parametrize(
    ("row", "code"),
    [
        (None, ErrorCode.UNKNOWN_STEP),
        (Row(execution_id="exe_2"), ErrorCode.STALE_EXECUTION),
        (Row(execution_id=None), ErrorCode.STALE_EXECUTION),
        (Row(superseded=True), ErrorCode.STALE_ATTEMPT),
        (Row(lifecycle_status="SUCCEEDED"), ErrorCode.TERMINAL_STATE),
        (Row(lifecycle_status="CANCELLED"), ErrorCode.TERMINAL_STATE),
        (Row(lifecycle_status="PENDING"), ErrorCode.INVALID_TRANSITION),
    ],
)
def test_a_beat_for_an_attempt_that_is_not_running_as_this_execution_is_refused(
    row: Row | None, code: ErrorCode
) -> None:
    verdict = judge_beat("exe_1", 5, row, 4)
    assert (verdict.outcome, verdict.reason) == (BeatOutcome.REFUSED, code)


def test_the_first_beat_heard_from_a_stale_attempt_goes_to_the_event_path() -> None:
    stale = Row(health=Health.STALE.value)
    assert judge_beat("exe_1", 5, stale, 4).outcome is BeatOutcome.RECOVER
    # Its repeat or an older beat is answered here: only a newer beat is news.
    assert judge_beat("exe_1", 4, stale, 4).outcome is BeatOutcome.DUPLICATE
    assert judge_beat("exe_1", 3, stale, 4).reason is ErrorCode.SOURCE_SEQ_REGRESSION


@given(seq=st.integers(min_value=1, max_value=100), last=st.integers(min_value=0, max_value=100))
def test_a_beat_never_goes_back_and_its_repeat_is_accepted(seq: int, last: int) -> None:
    verdict = judge_beat("exe_1", seq, Row(), last)
    if seq > last:
        assert verdict.outcome is BeatOutcome.ACCEPTED
    elif seq == last:
        assert (verdict.outcome, verdict.health) == (BeatOutcome.DUPLICATE, "HEALTHY")
    else:
        assert (verdict.outcome, verdict.reason) == (BeatOutcome.REFUSED, ErrorCode.SOURCE_SEQ_REGRESSION)


@given(
    seq=st.integers(min_value=1, max_value=10),
    last=st.integers(min_value=0, max_value=10),
    health=st.sampled_from([h.value for h in Health]),
    lifecycle=st.sampled_from([s.value for s in Lifecycle]),
    superseded=st.booleans(),
    execution=st.sampled_from(["exe_1", "exe_2", None]),
)
def test_only_a_plainly_accepted_beat_of_a_healthy_attempt_takes_the_guarded_write(
    seq: int, last: int, health: str, lifecycle: str, superseded: bool, execution: str | None
) -> None:
    """The guarded write's own condition, judged on a row read without a lock: anything else
    (a recovery, a repeat, a refusal, a DEGRADED attempt) is judged under the row's lock."""
    row = Row(execution, superseded, lifecycle, health, last)
    expected = (
        execution == "exe_1"
        and not superseded
        and lifecycle == Lifecycle.RUNNING.value
        and health == Health.HEALTHY.value
        and seq > last
    )
    assert takes_guarded_write("exe_1", seq, row) is expected
    assert not takes_guarded_write("exe_1", seq, None)
