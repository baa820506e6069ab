"""Temporal's identifiers decide the piece of work and the step attempt, decided purely."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from task_status_interceptors._coordinator import will_be_retried, work_continues_predecessor, work_key
from temporalio.api.enums.v1 import RetryState
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    TerminatedError,
    TimeoutError,
    TimeoutType,
)
from temporalio.exceptions import RetryState as FailureRetryState

from observer.runs import _retried_by
from status.domain.attempts import MAX_LOST_ROWS, decide_activation, place_activation
from status.domain.errors import Conflict, DomainError, ErrorCode
from status.domain.lifecycle import Lifecycle
from status.domain.model import StepState, TaskState
from status.domain.verdicts import ClosedRun, RunStatus, continuation


def _info(**kw: Any) -> Any:
    fields: dict[str, Any] = {
        "namespace": "default",
        "workflow_id": "doc-1",
        "run_id": "run-2",
        "first_execution_run_id": "run-1",
        "continued_run_id": "run-1",
        "cron_schedule": None,
        "attempt": 2,
        "retry_policy": RetryPolicy(maximum_attempts=3),
    }
    return SimpleNamespace(**(fields | kw))


def test_a_retry_a_continue_as_new_and_a_reset_share_the_work_of_their_chain() -> None:
    first = work_key(_info(run_id="run-1", continued_run_id=None, attempt=1))
    assert work_key(_info()) == first == "doc-1@run-1"  # the retry
    assert work_key(_info(run_id="run-3", attempt=1)) == first  # continue-as-new, reset
    assert work_key(_info(run_id="run-9", first_execution_run_id="run-9", continued_run_id=None)) != first  # id reuse


def test_each_cron_run_is_its_own_work_and_its_retry_continues_it() -> None:
    cron = {"cron_schedule": "@every 2s", "first_execution_run_id": "run-1"}
    assert work_key(_info(run_id="run-5", attempt=1, **cron)) == "doc-1@run-5"
    assert work_key(_info(run_id="run-6", attempt=1, **cron)) == "doc-1@run-6"
    assert not work_continues_predecessor(_info(run_id="run-6", attempt=1, **cron))
    assert work_continues_predecessor(_info(run_id="run-7", attempt=2, continued_run_id="run-6", **cron))
    assert not work_continues_predecessor(_info(attempt=2))  # not cron: the key already names the chain


def test_a_key_the_service_would_refuse_is_hashed() -> None:
    spaced = work_key(_info(workflow_id="order 42"))
    long = work_key(_info(workflow_id="w" * 200))
    assert spaced.startswith("temporal:") and long.startswith("temporal:") and spaced != long
    assert len(long) <= 128 and " " not in spaced
    assert work_key(_info(workflow_id="order 42")) == spaced  # deterministic


HEARTBEAT_NEVER = "TemporalTimeout:Heartbeat"


def _bad() -> ApplicationError:
    return ApplicationError("x", type="BAD")


def _activity_error(cause: BaseException) -> ActivityError:
    err = ActivityError(
        "activity failed",
        scheduled_event_id=5,
        started_event_id=6,
        identity="worker",
        activity_type="store",
        activity_id="1",
        retry_state=FailureRetryState.NON_RETRYABLE_FAILURE,
    )
    err.__cause__ = cause
    return err


def _child_error(cause: BaseException) -> ChildWorkflowError:
    err = ChildWorkflowError(
        "child failed",
        namespace="default",
        workflow_id="child",
        run_id="r",
        workflow_type="Child",
        initiated_event_id=5,
        started_event_id=6,
        retry_state=FailureRetryState.NON_RETRYABLE_FAILURE,
    )
    err.__cause__ = cause
    return err


def _timeout(kind: TimeoutType) -> TimeoutError:
    return TimeoutError("timed out", type=kind, last_heartbeat_details=())


@pytest.mark.parametrize(
    ("info", "err", "expected"),
    [
        (_info(retry_policy=None), ApplicationError("x"), False),
        (_info(attempt=3), ApplicationError("x"), False),  # the last attempt
        (_info(), ApplicationError("x", non_retryable=True), False),
        (_info(retry_policy=RetryPolicy(non_retryable_error_types=["BAD"])), ApplicationError("x", type="BAD"), False),
        (_info(), ApplicationError("x", type="DEPENDENCY_DOWN"), None),  # may: the close event says
        (_info(retry_policy=RetryPolicy()), ApplicationError("x"), None),  # unlimited attempts
        # Temporal judges the run's own failure, never its cause: an activity's non-retryable error
        # governs the activity's retries; the workflow failing with it is retried by its policy.
        (_info(), _activity_error(ApplicationError("x", non_retryable=True)), None),
        (_info(retry_policy=RetryPolicy(non_retryable_error_types=["BAD"])), _activity_error(_bad()), None),
        (_info(), _child_error(ApplicationError("x", non_retryable=True)), None),
        (_info(attempt=3), _activity_error(ApplicationError("x")), False),  # the last attempt still is
        (_info(), _timeout(TimeoutType.START_TO_CLOSE), None),
        (_info(), _timeout(TimeoutType.HEARTBEAT), None),
        (_info(), _timeout(TimeoutType.SCHEDULE_TO_CLOSE), False),
        (_info(), _timeout(TimeoutType.SCHEDULE_TO_START), False),
        (
            _info(
                retry_policy=RetryPolicy(maximum_attempts=3, non_retryable_error_types=["TemporalTimeout:Heartbeat"])
            ),
            _timeout(TimeoutType.HEARTBEAT),
            False,
        ),
        (_info(), CancelledError("cancelled"), False),
        (_info(), TerminatedError("terminated", ()), False),
    ],
)
def test_a_failed_run_ends_its_tasks_only_when_temporal_certainly_does_not_retry_it(
    info: Any, err: BaseException, expected: bool | None
) -> None:
    assert will_be_retried(info, err) is expected


def test_the_close_event_names_a_retry_never_the_next_cron_run() -> None:
    assert _retried_by("run-2", RetryState.RETRY_STATE_IN_PROGRESS) == "run-2"
    assert _retried_by("run-2", RetryState.RETRY_STATE_RETRY_POLICY_NOT_SET) is None  # the next cron run
    assert _retried_by("", RetryState.RETRY_STATE_MAXIMUM_ATTEMPTS_REACHED) is None


def test_a_run_started_after_a_terminate_with_a_chain_of_its_own_is_no_reset() -> None:
    start = datetime(2026, 12, 1, tzinfo=UTC)
    run = ClosedRun(
        "default", "wf", "run-1", RunStatus.TERMINATED, start, start + timedelta(seconds=3), first_run_id="run-1"
    )
    at = run.close_time
    assert continuation(run, "run-2", at, "run-1") == "run-2"  # a reset keeps the chain's first run
    assert continuation(run, "run-2", at, "run-2") is None  # the id started again: new work
    assert continuation(run, "run-2", at, None) == "run-2"  # unknown: as before


# ---------------------------------------------------------------- step attempts
def _step(attempt: int = 1, **kw: Any) -> StepState:
    base = StepState(
        task_id="t",
        step_id="02_parse",
        attempt=attempt,
        client_step_key="02_parse",
        operation_code="DOCUMENT.PARSE",
        operation_definition_version=1,
        service_name="svc",
        lifecycle=Lifecycle.PENDING,
        business_status="PENDING",
        version=1,
    )
    return replace(base, **kw)


def test_the_first_activity_binds_the_attempt_created_with_the_task() -> None:
    initial = _step()
    placed = place_activation([initial], "act-a", 1, "02_parse")
    assert (placed.attempt, placed.existing, placed.lost) == (1, initial, ())


def test_temporal_attempts_that_never_reported_are_placed_as_lost() -> None:
    placed = place_activation([_step()], "act-a", 3, "02_parse")
    assert (placed.attempt, placed.existing, placed.lost) == (3, None, (2,))  # attempt 1 is superseded
    ran = _step(1, execution_id="e1", lifecycle=Lifecycle.FAILED, temporal_activity="act-a", temporal_attempt=1)
    placed = place_activation([ran], "act-a", 4, "02_parse")
    assert (placed.attempt, placed.lost) == (4, (2, 3))


def test_the_same_activity_attempt_binds_again_and_an_older_one_is_refused() -> None:
    one = _step(1, execution_id="e1", lifecycle=Lifecycle.FAILED, temporal_activity="act-a", temporal_attempt=1)
    two = _step(2, execution_id="e2", lifecycle=Lifecycle.RUNNING, temporal_activity="act-a", temporal_attempt=2)
    assert place_activation([one, two], "act-a", 2, "02_parse").existing is two
    assert place_activation([one, two], "act-a", 1, "02_parse").existing is one  # idempotent, never new
    # A workflow retry schedules the step again as a new activity: after the newest attempt.
    placed = place_activation([one, two], "act-b", 1, "02_parse")
    assert (placed.attempt, placed.existing, placed.lost) == (3, None, ())
    newer = _step(3, execution_id="e3", temporal_activity="act-b", temporal_attempt=1)
    with pytest.raises(Conflict) as refused:  # the old activity's retry cannot overwrite the new one's
        place_activation([one, two, newer], "act-a", 3, "02_parse")
    assert refused.value.code is ErrorCode.STALE_ATTEMPT


def test_lost_rows_are_bounded() -> None:
    placed = place_activation([_step()], "act-a", 500, "02_parse")
    assert placed.attempt == 500 and len(placed.lost) == MAX_LOST_ROWS and placed.lost[-1] == 499


def test_without_a_temporal_identity_the_numbers_are_taken_as_given() -> None:
    one = _step(1, execution_id="e1", lifecycle=Lifecycle.FAILED)
    assert place_activation([one], None, 1, "02_parse").existing is one
    assert place_activation([one], None, 3, "02_parse").lost == (2,)
    lost_one = _step(1, superseded=True, lifecycle=Lifecycle.TIMED_OUT)  # never bound, replaced by attempt 2
    with pytest.raises(Conflict):
        place_activation([lost_one, _step(2, execution_id="e2")], None, 1, "02_parse")


def test_the_outbox_lives_in_a_documented_directory_never_the_working_one(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from task_status_interceptors._plugin import default_outbox_path

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("TASK_STATUS_OUTBOX_DIR", raising=False)
    assert default_outbox_path("w") == tmp_path / "state" / "task-status-observer" / "w.outbox.sqlite3"
    monkeypatch.setenv("TASK_STATUS_OUTBOX_DIR", str(tmp_path / "box"))
    assert default_outbox_path("w") == tmp_path / "box" / "w.outbox.sqlite3"
    (tmp_path / ".task-status").mkdir()
    (tmp_path / ".task-status" / "w.outbox.sqlite3").write_bytes(b"")
    assert default_outbox_path("w").resolve() == (tmp_path / ".task-status" / "w.outbox.sqlite3").resolve()
    assert not (tmp_path / "box").exists()  # nothing is created by asking


def test_the_outbox_file_is_created_on_first_use_and_an_earlier_one_is_resumed(tmp_path: Any) -> None:
    """A plugin that is only constructed (a client, a worker that runs nothing tracked) leaves no
    trace; the first execution creates the file; a file left by an earlier process is resumed."""
    from task_status_interceptors import TaskStatusPlugin
    from task_status_interceptors._context import StepBinding
    from task_status_interceptors._outbox import Outbox, read_undeliverable

    path = tmp_path / "state" / "w.outbox.sqlite3"
    plugin = TaskStatusPlugin("http://127.0.0.1:9", "t", producer_id="w", outbox_path=path)
    assert plugin.reporter.pending_events() == 0 and read_undeliverable(path) == []
    plugin.reporter.close()
    assert not path.parent.exists()  # not even its directory
    first = Outbox(path)
    assert first.begin("run/1/1", StepBinding("tsk", "s1"), 1)
    assert first.enqueue("run/1/1", {"eventType": "STEP_STARTED"})
    assert first.flush()
    first.close()
    assert path.exists()
    again = Outbox(path)  # the next process
    assert again.pending_events() == 1 and not again.begin("run/1/1", StepBinding("tsk", "s1"), 1)
    again.close()


# ---------------------------------------------------------------- whether an activation binds
def _task(lifecycle: Lifecycle = Lifecycle.RUNNING) -> TaskState:
    now = datetime(2026, 12, 2)
    return TaskState("t", "wf", "k", "acme", "u", "s", 1, "Doc", lifecycle, lifecycle.value, 3, now, now)


def test_an_activation_binds_rebinds_or_is_refused_with_its_code() -> None:
    bound = _step(execution_id="exe_1", producer_id="parser", temporal_activity="act", temporal_attempt=1)
    fresh = decide_activation(_task(), [_step()], "act", 1, "02_parse", "parser")
    assert not fresh.rebind and fresh.placement.attempt == 1
    again = decide_activation(_task(Lifecycle.SUCCEEDED), [bound], "act", 1, "02_parse", "parser")
    assert again.rebind and again.placement.existing is bound  # answered as before, ended task or not
    retry = decide_activation(_task(), [bound], "act", 2, "02_parse", "parser")
    assert retry.supersedes and retry.placement.attempt == 2
    refusals = [
        (lambda: decide_activation(_task(), [], None, 1, "99_none", "parser"), ErrorCode.UNKNOWN_STEP),
        (
            lambda: decide_activation(_task(), [_step(step_kind="DYNAMIC")], None, 1, "02_parse", "parser"),
            ErrorCode.UNKNOWN_STEP,
        ),
        (lambda: decide_activation(_task(), [bound], "act", 1, "02_parse", "intruder"), ErrorCode.PRODUCER_MISMATCH),
        (
            lambda: decide_activation(_task(Lifecycle.FAILED), [bound], "act", 2, "02_parse", "parser"),
            ErrorCode.TERMINAL_STATE,
        ),
        (
            lambda: decide_activation(_task(Lifecycle.CANCELLED), [_step()], None, 1, "02_parse", "parser"),
            ErrorCode.TERMINAL_STATE,
        ),
    ]
    for decide, code in refusals:
        with pytest.raises(DomainError) as refused:
            decide()
        assert refused.value.code is code
