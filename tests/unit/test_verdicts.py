"""Temporal's verdict, decided purely: how a closed run ends the tasks it owns."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from status.domain.lifecycle import EventType, Lifecycle
from status.domain.verdicts import (
    ClosedRun,
    RunStatus,
    continuation,
    verdict_event_id,
    verdict_for,
    verdict_source_seq,
)

START = datetime(2026, 12, 1, 9, 0, 0, tzinfo=UTC)


def _run(status: RunStatus, **kw: object) -> ClosedRun:
    fields: dict[str, object] = {
        "namespace": "default",
        "workflow_id": "wf-1",
        "run_id": "run-1",
        "status": status,
        "start_time": START,
        "close_time": START + timedelta(seconds=8),
    }
    fields.update(kw)
    return ClosedRun(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("status", "event", "steps", "message"),
    [
        (RunStatus.COMPLETED, EventType.TASK_COMPLETED, Lifecycle.CANCELLED, "Finished."),
        (RunStatus.CANCELED, EventType.TASK_CANCELLED, Lifecycle.CANCELLED, "Cancelled."),
        (RunStatus.TERMINATED, EventType.TASK_CANCELLED, Lifecycle.CANCELLED, "Stopped by an operator."),
        (RunStatus.TIMED_OUT, EventType.TASK_TIMED_OUT, Lifecycle.TIMED_OUT, "Timed out after 8 s."),
        (RunStatus.FAILED, EventType.TASK_FAILED, Lifecycle.CANCELLED, "The work failed."),
    ],
)
def test_each_close_status_has_its_verdict(status: RunStatus, event: EventType, steps: Lifecycle, message: str) -> None:
    verdict = verdict_for(_run(status))
    assert verdict is not None
    assert (verdict.event_type, verdict.step_lifecycle, verdict.message) == (event, steps, message)
    assert (verdict.error is not None) is (status is RunStatus.FAILED)


def test_a_continued_run_has_no_verdict_of_its_own() -> None:
    assert verdict_for(_run(RunStatus.CONTINUED_AS_NEW)) is None


def test_the_operators_reason_is_shown_made_safe() -> None:
    verdict = verdict_for(_run(RunStatus.TERMINATED, reason="see https://ops.example/x password=hunter2"))
    assert verdict is not None and verdict.message.startswith("Stopped by an operator: see [link removed]")
    assert "hunter2" not in verdict.message


def test_a_failure_keeps_its_type_as_a_stable_code_never_its_text() -> None:
    verdict = verdict_for(_run(RunStatus.FAILED, failure_type="Card declined!"))
    assert verdict is not None and verdict.error is not None
    assert verdict.error.code == "Card_declined_" and verdict.error.user_message == "The work failed."


def test_the_next_run_named_by_the_close_continues_the_work() -> None:
    assert continuation(_run(RunStatus.CONTINUED_AS_NEW, next_run_id="run-2"), None, None) == "run-2"
    assert continuation(_run(RunStatus.FAILED, next_run_id="run-retry"), None, None) == "run-retry"


def test_a_reset_continues_in_the_run_started_as_the_old_one_closed() -> None:
    run = _run(RunStatus.TERMINATED)
    assert continuation(run, "run-reset", run.close_time) == "run-reset"
    assert continuation(run, "run-1", run.close_time) is None  # the newest run is this one: it just ended
    # A run started much later under the same id is new work, not this run's continuation.
    assert continuation(run, "run-later", run.close_time + timedelta(minutes=5)) is None
    assert continuation(run, None, None) is None


def test_ids_and_sequences_are_the_same_whoever_computes_them() -> None:
    run = _run(RunStatus.TERMINATED)
    assert verdict_event_id(run, "tsk-a") == verdict_event_id(_run(RunStatus.TERMINATED), "tsk-a")
    assert verdict_event_id(run, "tsk-a") != verdict_event_id(run, "tsk-b")
    assert verdict_event_id(run, "tsk-a") != verdict_event_id(_run(RunStatus.TERMINATED, run_id="run-2"), "tsk-a")
    assert len(verdict_event_id(run, "tsk-a")) <= 64
    # After every coordinator report of the run (workflow.now() never passes its close).
    assert verdict_source_seq(run) > int(run.close_time.timestamp() * 1000)
