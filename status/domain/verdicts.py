"""Temporal's verdict is the task's verdict (design D18): how a closed Temporal run ends its tasks.

Pure decisions over plain data, time passed in. The observer's run follower reads closed runs
from Temporal's visibility API and their close events; these functions say whether the tasks
a run owns follow the run into its continuation (continue-as-new, retry, cron, reset) or end,
with which terminal event, which state for their unfinished step attempts, and what the user
is told.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from status.domain.lifecycle import EventType, Lifecycle
from status.domain.model import StepError
from status.domain.rules import safe_user_message


class RunStatus(StrEnum):
    """Temporal's close statuses (``WorkflowExecutionStatus`` names)."""

    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"
    TERMINATED = "TERMINATED"
    CONTINUED_AS_NEW = "CONTINUED_AS_NEW"
    TIMED_OUT = "TIMED_OUT"


# A continuation (reset, retry, cron, continue-as-new) starts when its predecessor closes.
CONTINUATION_WINDOW = timedelta(seconds=5)


@dataclass(frozen=True)
class ClosedRun:
    namespace: str
    workflow_id: str
    run_id: str
    status: RunStatus
    start_time: datetime
    close_time: datetime
    # From the run's close event, when it was read: the run Temporal started to carry on this run's
    # work (continue-as-new, a retry; never the next cron run, which is new work), and what the
    # close says (a terminate reason, a failure's type and message).
    next_run_id: str | None = None
    reason: str | None = None
    failure_type: str | None = None
    # The first run of the run's chain (Temporal keeps it across retries, continue-as-new and resets):
    # a later run of the workflow id with another first run is a new chain — new work.
    first_run_id: str | None = None


@dataclass(frozen=True)
class Verdict:
    event_type: EventType
    step_lifecycle: Lifecycle  # what a step attempt still running becomes
    message: str  # user-safe: shown in the notice
    error: StepError | None = None  # TASK_FAILED only


def continuation(
    run: ClosedRun, latest_run_id: str | None, latest_start: datetime | None, latest_first_run_id: str | None = None
) -> str | None:
    """The run that carries on this run's work, or None when the work ended with it.

    Temporal names it in the close event (continue-as-new, retry); a reset terminates the
    run and starts its successor at the same moment, so the workflow's newest run counts when it
    started within ``CONTINUATION_WINDOW`` of this close.
    """
    if run.next_run_id:
        return run.next_run_id
    if latest_run_id is None or latest_start is None or latest_run_id == run.run_id:
        return None
    if run.first_run_id and latest_first_run_id and run.first_run_id != latest_first_run_id:
        return None  # the workflow id started again after this chain closed: new work, not a reset
    if run.start_time <= latest_start <= run.close_time + CONTINUATION_WINDOW:
        return latest_run_id
    return None


def verdict_for(run: ClosedRun) -> Verdict | None:
    """How the tasks a closed run still owns end; None for a run whose work continues elsewhere."""
    seconds = max(0, round((run.close_time - run.start_time).total_seconds()))
    if run.status is RunStatus.COMPLETED:
        return Verdict(EventType.TASK_COMPLETED, Lifecycle.CANCELLED, "Finished.")
    if run.status is RunStatus.CANCELED:
        return Verdict(EventType.TASK_CANCELLED, Lifecycle.CANCELLED, "Cancelled.")
    if run.status is RunStatus.TERMINATED:
        reason = safe_user_message(run.reason or "").strip()
        message = f"Stopped by an operator: {reason}" if reason else "Stopped by an operator."
        return Verdict(EventType.TASK_CANCELLED, Lifecycle.CANCELLED, message[:512])
    if run.status is RunStatus.TIMED_OUT:
        return Verdict(EventType.TASK_TIMED_OUT, Lifecycle.TIMED_OUT, f"Timed out after {_duration(seconds)}.")
    if run.status is RunStatus.FAILED:
        code = _safe_code(run.failure_type or "WORKFLOW_FAILED")
        error = StepError("UNKNOWN", code, "The work failed.", retryable=False)
        return Verdict(EventType.TASK_FAILED, Lifecycle.CANCELLED, "The work failed.", error)
    return None  # CONTINUED_AS_NEW: the next run owns the work


def verdict_event_id(run: ClosedRun, task_id: str) -> str:
    """The same id for the same run, close and task, whoever computes it (replays, two observers)."""
    key = "\x1f".join((run.namespace, run.workflow_id, run.run_id, run.status.value, task_id))
    return "run:" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:56]


def verdict_source_seq(run: ClosedRun) -> int:
    """After every coordinator report of the run (theirs are ``workflow.now()``, before its close)."""
    return int(run.close_time.timestamp() * 1000) + 1


def _duration(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{round(seconds / 60)} min"
    return f"{round(seconds / 3600)} h"


def _safe_code(code: str) -> str:
    cleaned = "".join(ch if ch.isalnum() or ch in "_.:-" else "_" for ch in code)[:128]
    return cleaned if cleaned and cleaned[0].isalnum() else "WORKFLOW_FAILED"


# ---------------------------------------------------------------- a silent attempt, asked of Temporal
class ActivityState(StrEnum):
    PENDING = "PENDING"  # Temporal still has it scheduled or running: STALE stands
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"
    CANCELED = "CANCELED"
    UNKNOWN = "UNKNOWN"  # not pending, and no outcome in the run's history (or Temporal not asked)


@dataclass(frozen=True)
class ActivityRef:
    namespace: str
    workflow_id: str
    run_id: str
    activity_id: str


@dataclass(frozen=True)
class ActivityOutcome:
    state: ActivityState
    failure_type: str | None = None


# An attempt completing elsewhere is asked about every second while its wait is young (a completion
# is then seen within the run-close budget), then less often: at most every 30 s, so a wait of
# days (an approval) costs Temporal a call per half-minute, not one per second.
FIRST_CHECKS = timedelta(seconds=1)
LAST_CHECKS = timedelta(seconds=30)


def next_completion_check(since: datetime, now: datetime) -> datetime:
    """When to ask Temporal again about an activity that completes elsewhere and is still pending:
    a sixtieth of how long it has waited, between one second and half a minute."""
    return now + min(LAST_CHECKS, max(FIRST_CHECKS, (now - since) / 60))


def step_ending_for(outcome: ActivityOutcome) -> tuple[EventType, StepError | None] | None:
    """The step event Temporal's record of an ended activity implies; None while STALE should stand."""
    if outcome.state is ActivityState.COMPLETED:
        return EventType.STEP_COMPLETED, None
    if outcome.state is ActivityState.FAILED:
        code = _safe_code(outcome.failure_type or "ACTIVITY_FAILED")
        return EventType.STEP_FAILED, StepError("UNKNOWN", code, "The step failed.", retryable=False)
    if outcome.state is ActivityState.TIMED_OUT:
        return EventType.STEP_TIMED_OUT, None
    if outcome.state is ActivityState.CANCELED:
        return EventType.STEP_CANCELLED, None
    return None
