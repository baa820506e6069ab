"""A task's end ends its steps, and a terminal task's steps no longer change: decided without a database."""

from __future__ import annotations

from dataclasses import replace

import pytest

from status.domain.definitions import generic_statuses
from status.domain.errors import Conflict, ErrorCode
from status.domain.lifecycle import EventType, Lifecycle
from status.domain.model import StepState, TaskState
from status.domain.projections import task_progress
from status.domain.rules import StepEvent, TaskEvent, apply_step_event, apply_task_event
from tests.support.states import NOW, step_state, task_state


def _task(lifecycle: Lifecycle = Lifecycle.RUNNING) -> TaskState:
    return task_state(lifecycle=lifecycle, version=4)


def _step(step_id: str, lifecycle: Lifecycle, order: int) -> StepState:
    return step_state(
        step_id=step_id,
        client_step_key=step_id,
        lifecycle=lifecycle,
        version=2,
        step_order=order,
        execution_id=None,
        producer_id=None,
        service_name="svc",
        started_at=None if lifecycle is Lifecycle.PENDING else NOW,
    )


def _end(event_type: EventType, steps: list[StepState], **outcomes: str) -> tuple[TaskState, dict[str, StepState]]:
    outcome = apply_task_event(
        _task(),
        TaskEvent("e1", event_type, 1, 1, "coordinator", NOW),
        statuses=generic_statuses(),
        now=NOW,
        open_steps=steps,
        open_steps_become=Lifecycle.TIMED_OUT if event_type is EventType.TASK_TIMED_OUT else Lifecycle.CANCELLED,
        step_outcomes={k: Lifecycle(v) for k, v in outcomes.items()},
    )
    return outcome.task, {s.step_id: s for s in outcome.ended_steps}


@pytest.mark.parametrize(
    ("event_type", "running_becomes"),
    [
        (EventType.TASK_COMPLETED, Lifecycle.CANCELLED),
        (EventType.TASK_FAILED, Lifecycle.CANCELLED),
        (EventType.TASK_CANCELLED, Lifecycle.CANCELLED),
        (EventType.TASK_TIMED_OUT, Lifecycle.TIMED_OUT),
    ],
)
def test_every_ending_ends_the_running_and_the_never_reached_steps(
    event_type: EventType, running_becomes: Lifecycle
) -> None:
    steps = [
        _step("01_done", Lifecycle.SUCCEEDED, 0),
        _step("02_running", Lifecycle.RUNNING, 1),
        _step("03_never", Lifecycle.PENDING, 2),
    ]
    if event_type is EventType.TASK_FAILED:
        with pytest.raises(Exception, match="needs an error"):
            _end(event_type, steps)
        return
    task, ended = _end(event_type, steps)
    assert set(ended) == {"02_running", "03_never"}  # a finished step is left as it ended
    assert ended["02_running"].lifecycle is running_becomes
    never = ended["03_never"]
    assert never.lifecycle is Lifecycle.CANCELLED and never.error is not None and never.error.code == "NOT_REACHED"
    assert never.started_at is None and never.finished_at == NOW
    assert all(s.version == 3 for s in ended.values())


def test_the_runs_word_for_a_step_wins_over_not_reached() -> None:
    _, ended = _end(EventType.TASK_COMPLETED, [_step("03_local", Lifecycle.PENDING, 0)], **{"03_local": "SUCCEEDED"})
    assert ended["03_local"].lifecycle is Lifecycle.SUCCEEDED and ended["03_local"].error is None


def test_a_succeeded_task_reads_done_though_a_step_it_never_needed_did_not_run() -> None:
    steps = [_step("01_compose", Lifecycle.SUCCEEDED, 0), _step("02_never", Lifecycle.CANCELLED, 1)]
    assert task_progress(steps, Lifecycle.SUCCEEDED)["percent"] == 100
    assert task_progress(steps, Lifecycle.SUCCEEDED)["completedSteps"] == 1
    assert task_progress(steps, Lifecycle.FAILED)["percent"] == 50  # a failed task says how far it got


def test_a_terminal_task_refuses_every_step_event() -> None:
    step = _step("02_parse", Lifecycle.RUNNING, 0)
    event = StepEvent(
        event_id="e2",
        event_type=EventType.STEP_COMPLETED,
        source_seq=9,
        producer_id="svc",
        occurred_at=NOW,
    )
    with pytest.raises(Conflict) as refused:
        apply_step_event(
            _task(Lifecycle.SUCCEEDED),
            step,
            event,
            operation=None,  # type: ignore[arg-type]  # refused before the operation is read
            statuses=generic_statuses(),
            validator=None,  # type: ignore[arg-type]
            other_steps_stale=False,
            now=NOW,
        )
    assert refused.value.code is ErrorCode.TERMINAL_STATE


def test_a_dynamic_step_is_named_in_the_runs_outcomes_by_its_client_step_key() -> None:
    dynamic = replace(_step("dyn_search-1", Lifecycle.RUNNING, 3), step_kind="DYNAMIC", client_step_key="search-1")
    _, ended = _end(EventType.TASK_COMPLETED, [dynamic], **{"search-1": "SUCCEEDED"})
    assert ended["dyn_search-1"].lifecycle is Lifecycle.SUCCEEDED
    _, unnamed = _end(EventType.TASK_COMPLETED, [dynamic], **{"dyn_search-1": "SUCCEEDED"})
    assert unnamed["dyn_search-1"].lifecycle is Lifecycle.CANCELLED  # its id is the service's, not the run's
