"""The lifecycle state machine, table-driven over every event and state (design D8.2, D8.4)."""

from __future__ import annotations

import pytest

from status.domain.errors import Conflict, ErrorCode
from status.domain.lifecycle import (
    STEP_TRANSITIONS,
    TASK_TRANSITIONS,
    EventType,
    Lifecycle,
    next_step_lifecycle,
    next_task_lifecycle,
)

L = Lifecycle
ALLOWED_STEP = {
    (EventType.STEP_STARTED, L.PENDING): L.RUNNING,
    (EventType.STEP_PROGRESS, L.RUNNING): L.RUNNING,
    (EventType.STEP_STATUS_CHANGED, L.PENDING): L.PENDING,
    (EventType.STEP_STATUS_CHANGED, L.RUNNING): L.RUNNING,
    (EventType.STEP_COMPLETED, L.RUNNING): L.SUCCEEDED,
    (EventType.STEP_FAILED, L.PENDING): L.FAILED,
    (EventType.STEP_FAILED, L.RUNNING): L.FAILED,
    (EventType.STEP_CANCELLED, L.PENDING): L.CANCELLED,
    (EventType.STEP_CANCELLED, L.RUNNING): L.CANCELLED,
    (EventType.STEP_TIMED_OUT, L.RUNNING): L.TIMED_OUT,
    (EventType.STEP_HEALTH_CHANGED, L.RUNNING): L.RUNNING,
}
ALLOWED_TASK = {
    (EventType.TASK_COMPLETED, L.PENDING): L.SUCCEEDED,
    (EventType.TASK_COMPLETED, L.RUNNING): L.SUCCEEDED,
    (EventType.TASK_FAILED, L.PENDING): L.FAILED,
    (EventType.TASK_FAILED, L.RUNNING): L.FAILED,
    (EventType.TASK_CANCELLED, L.PENDING): L.CANCELLED,
    (EventType.TASK_CANCELLED, L.RUNNING): L.CANCELLED,
    (EventType.TASK_TIMED_OUT, L.PENDING): L.TIMED_OUT,
    (EventType.TASK_TIMED_OUT, L.RUNNING): L.TIMED_OUT,
}


@pytest.mark.parametrize("event", list(STEP_TRANSITIONS))
@pytest.mark.parametrize("state", list(Lifecycle))
def test_every_step_transition(event: EventType, state: Lifecycle) -> None:
    expected = ALLOWED_STEP.get((event, state))
    if expected is not None:
        assert next_step_lifecycle(event, state) is expected
        return
    with pytest.raises(Conflict) as err:
        next_step_lifecycle(event, state)
    assert err.value.code is (ErrorCode.TERMINAL_STATE if state.terminal else ErrorCode.INVALID_TRANSITION)


@pytest.mark.parametrize("event", list(TASK_TRANSITIONS))
@pytest.mark.parametrize("state", list(Lifecycle))
def test_every_task_transition(event: EventType, state: Lifecycle) -> None:
    expected = ALLOWED_TASK.get((event, state))
    if expected is not None:
        assert next_task_lifecycle(event, state) is expected
        return
    with pytest.raises(Conflict) as err:
        next_task_lifecycle(event, state)
    assert err.value.code is (ErrorCode.TERMINAL_STATE if state.terminal else ErrorCode.INVALID_TRANSITION)


def test_task_events_are_not_step_events_and_vice_versa() -> None:
    with pytest.raises(Conflict):
        next_step_lifecycle(EventType.TASK_COMPLETED, L.RUNNING)
    with pytest.raises(Conflict):
        next_task_lifecycle(EventType.STEP_COMPLETED, L.RUNNING)


def test_tables_cover_exactly_the_expected_transitions() -> None:
    got = {(e, s): t for e, m in STEP_TRANSITIONS.items() for s, t in m.items()}
    assert got == ALLOWED_STEP
    got_task = {(e, s): t for e, m in TASK_TRANSITIONS.items() for s, t in m.items()}
    assert got_task == ALLOWED_TASK
