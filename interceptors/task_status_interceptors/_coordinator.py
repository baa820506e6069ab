"""Coordinator helper: activities that call the status service, and a deterministic workflow-side API.

Workflow code stays deterministic: it only schedules these activities, with
event ids and sequences derived from workflow state (``workflow.info()``,
``workflow.now()``), so a replay schedules exactly the same calls.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import httpx
from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError, CancelledError, TerminatedError, TimeoutError, TimeoutType

from task_status_interceptors._context import current_ownership

if TYPE_CHECKING:
    from task_status_interceptors._reporter import Reporter

CREATE_WORKFLOW = "task_status.create_workflow"
SUBMIT_TASK_EVENT = "task_status.submit_task_event"
CLASSIFY = "task_status.classify"
SET_OWNER = "task_status.set_owner"
_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))
# How long a task's ending waits for this worker to deliver its steps' own reports (well inside
# the activity's 30 s): the service answers a batch in milliseconds when it is up.
ENDING_WAITS_FOR_STEPS_SECONDS = 5.0


@dataclass
class TaskEventRequest:
    task_id: str
    event_type: str  # TASK_COMPLETED | TASK_FAILED | TASK_CANCELLED
    event_id: str
    source_seq: int
    task_attempt: int = 1
    duration_ms: int | None = None
    failure_code: str | None = None  # TASK_FAILED: the error's stable code
    failure_message: str | None = None  # ... its user-safe message (the error's userMessage)
    failed_step_id: str | None = None
    failure_category: str = "UNKNOWN"
    failure_retryable: bool | None = None
    # Sent with every ending (the run's close, or the workflow's own complete/fail/cancel): how the
    # run saw each step's activity end (stepId -> lifecycle). The service ends every unfinished
    # attempt of the task with the task, each as the run saw it: a step's own report still on its
    # way when its task ends arrives too late to change it.
    step_outcomes: dict[str, str] | None = None
    # When the run decided it (workflow time, set by ``TaskStatus._submit``): part of the event's
    # content, so it must be the same in every attempt of the activity that sends it — a retry
    # after an answer lost on its way back (the first attempt committed) is then a duplicate, not
    # an EVENT_ID_CONFLICT that fails the run.
    occurred_at: str | None = None


class CoordinatorActivities:
    """Activities registered by the plugin on every worker that uses it."""

    def __init__(
        self, status_url: str, service_token: str, timeout: float = 10.0, *, reporter: Reporter | None = None
    ) -> None:
        self._url = status_url.rstrip("/")
        # This worker's reporter: what it holds of a task's steps goes before the task's ending.
        self._reporter = reporter
        self._headers = {"Authorization": f"Bearer {service_token}"}
        self._timeout = timeout
        # One pooled client for every call (a new client per call paid a TCP connect each time);
        # opened on first use on the worker's event loop, closed with the worker (``aclose``).
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None or self._client.is_closed:
            self._client = httpx.AsyncClient(base_url=self._url, headers=self._headers, timeout=self._timeout)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _call(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await self._http().request(method, path, json=body)
        if response.status_code >= 500 or response.status_code == 429:
            raise RuntimeError(f"status service unavailable (HTTP {response.status_code})")  # Temporal retries
        if response.status_code >= 400:
            error = response.json().get("error", {})
            # A rejection the same request can never fix: fail the activity for good.
            raise ApplicationError(
                error.get("message", "rejected"), type=error.get("code", "REJECTED"), non_retryable=True
            )
        result: dict[str, Any] = response.json()
        return result

    @activity.defn(name=CREATE_WORKFLOW)
    async def create_workflow(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self._call("POST", "/internal/v1/workflows", body)

    @activity.defn(name=SUBMIT_TASK_EVENT)
    async def submit_task_event(self, request: TaskEventRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "eventId": request.event_id,
            "eventType": request.event_type,
            "sourceSeq": request.source_seq,
            "taskId": request.task_id,
            "taskAttempt": request.task_attempt,
            # (A request scheduled before occurred_at existed: the activity's first scheduling, the
            # same in every attempt.)
            "occurredAt": request.occurred_at or activity.info().scheduled_time.isoformat(),
        }
        if request.duration_ms is not None:
            body["durationMs"] = request.duration_ms
        if request.failure_code is not None:
            # TASK_FAILED's shape (design D6.1): error {category, code, retryable, userMessage} + failedStepId.
            body["error"] = {
                "category": request.failure_category,
                "code": request.failure_code,
                "retryable": request.failure_retryable,
                "userMessage": request.failure_message or "",
            }
            if request.failed_step_id is not None:
                body["failedStepId"] = request.failed_step_id
        if request.step_outcomes is not None:
            body["stepOutcomes"] = request.step_outcomes
        if self._reporter is not None:
            # The steps' own reports first (those this worker made; bounded: an ending is not held
            # up by a service that is down, which it would not reach either).
            await self._reporter.deliver_reported(ENDING_WAITS_FOR_STEPS_SECONDS)
        return await self._call("POST", "/internal/v1/task-events", body)

    @activity.defn(name=CLASSIFY)
    async def classify(self, task_id: str, changes: dict[str, Any]) -> dict[str, Any]:
        return await self._call("PATCH", f"/internal/v1/tasks/{task_id}/classification", changes)

    @activity.defn(name=SET_OWNER)
    async def set_owner(self, task_id: str, owner: dict[str, Any]) -> dict[str, Any]:
        return await self._call("PUT", f"/internal/v1/tasks/{task_id}/temporal-owner", owner)


class TaskStatus:
    """Workflow-side API of the coordinator helper (call from workflow code only).

    The run that creates tasks owns them: when its code ends — returns, raises, is cancelled —
    the plugin ends the tasks it still owns with that verdict (SUCCEEDED, FAILED with a safe
    error object, CANCELLED), so ``complete_task``/``fail_task`` are needed only to end a task
    earlier or differently. ``hand_over`` gives a task to another workflow (a child that then
    calls ``adopt``); when no workflow code runs at all (terminate, timeouts), the observer ends
    the task from Temporal's record of the run.
    """

    @staticmethod
    async def create_workflow(
        owner_id: str,
        title: str,
        tasks: list[dict[str, Any]],
        *,
        client_workflow_key: str | None = None,
        workflow_type: str | None = None,
    ) -> dict[str, Any]:
        """Create the status workflow and its tasks; idempotent per Temporal workflow id by default.

        ``owner_id`` is the user who sees the tasks (their dashboard, their notifications).
        """
        owner = _this_run()
        if work_continues_predecessor(workflow.info()):
            # A retried cron run: its work is its first attempt's, which only the service can name
            # (the tasks its predecessor owns); found there, that work is adopted, else it is new.
            owner["continuesRunId"] = workflow.info().continued_run_id
        body: dict[str, Any] = {
            "clientWorkflowKey": client_workflow_key or work_key(workflow.info()),
            "ownerId": owner_id,
            "title": title,
            "initialTasks": tasks,
            "temporalOwner": owner,
        }
        if workflow_type:
            body["workflowType"] = workflow_type
        result: dict[str, Any] = await workflow.execute_activity(
            CREATE_WORKFLOW, body, start_to_close_timeout=timedelta(seconds=30), retry_policy=_RETRY
        )
        ownership = current_ownership()
        if ownership is not None:
            ownership.own(t["taskId"] for t in result.get("tasks", []) if t.get("lifecycleStatus") not in _TERMINAL)
            now = workflow.now()
            for created in (t for t in result.get("tasks", []) if t.get("created") is True):
                ownership.began.setdefault(created["taskId"], now)
        return result

    @staticmethod
    async def complete_task(task_id: str, *, duration_ms: int | None = None, task_attempt: int = 1) -> dict[str, Any]:
        """Submit TASK_COMPLETED (only the coordinator ends a task, design D8.4)."""
        ownership = current_ownership()
        if duration_ms is None and ownership is not None:
            duration_ms = ownership.duration_ms(task_id, workflow.now())
        return await TaskStatus._submit(
            TaskEventRequest(
                task_id, "TASK_COMPLETED", "", 0, task_attempt, duration_ms, step_outcomes=_seen_endings(task_id)
            )
        )

    @staticmethod
    async def fail_task(
        task_id: str, code: str, message: str | None = None, *, failed_step_id: str | None = None, task_attempt: int = 1
    ) -> dict[str, Any]:
        """Submit TASK_FAILED with a stable code and a user-safe message."""
        return await TaskStatus._submit(
            TaskEventRequest(
                task_id,
                "TASK_FAILED",
                "",
                0,
                task_attempt,
                None,
                code,
                message,
                failed_step_id,
                step_outcomes=_seen_endings(task_id),
            )
        )

    @staticmethod
    async def cancel_task(task_id: str, *, task_attempt: int = 1) -> dict[str, Any]:
        """Submit TASK_CANCELLED."""
        return await TaskStatus._submit(
            TaskEventRequest(task_id, "TASK_CANCELLED", "", 0, task_attempt, step_outcomes=_seen_endings(task_id))
        )

    @staticmethod
    async def hand_over(task_id: str, workflow_id: str, *, run_id: str | None = None) -> dict[str, Any]:
        """Give a task to another workflow of this namespace (e.g. a child that does the work):
        this run no longer ends it; the other's end does (any of its runs, without ``run_id``)."""
        owner = {"namespace": workflow.info().namespace, "workflowId": workflow_id, "runId": run_id}
        result = await TaskStatus._set_owner(task_id, owner)
        ownership = current_ownership()
        if ownership is not None:
            ownership.release(task_id)
        return result

    @staticmethod
    async def adopt(task_id: str) -> dict[str, Any]:
        """Take a task over (a child workflow, after its parent's ``hand_over``): this run's end ends it."""
        result = await TaskStatus._set_owner(task_id, _this_run())
        ownership = current_ownership()
        if ownership is not None:
            ownership.own([task_id])
        return result

    @staticmethod
    async def _set_owner(task_id: str, owner: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await workflow.execute_activity(
            SET_OWNER, args=[task_id, owner], start_to_close_timeout=timedelta(seconds=30), retry_policy=_RETRY
        )
        return result

    @staticmethod
    async def _submit(request: TaskEventRequest, *, give_up_after: timedelta | None = None) -> dict[str, Any]:
        # Deterministic: the same on replay (and an activity retry sends the same request); the run
        # in it keeps two runs of one piece of work (a retry, a continue-as-new) from colliding, and
        # the task id keeps apart the pieces of work a workflow id runs over time (id reuse, cron).
        request.event_id = f"coord:{workflow.info().run_id}:{request.task_id}:{request.event_type}"
        request.source_seq = int(workflow.now().timestamp() * 1000)
        request.occurred_at = workflow.now().isoformat()
        ownership = current_ownership()
        if ownership is not None:
            ownership.release(request.task_id)  # ended here: the run's end leaves it alone
        result: dict[str, Any] = await workflow.execute_activity(
            SUBMIT_TASK_EVENT,
            request,
            start_to_close_timeout=timedelta(seconds=30),
            schedule_to_close_timeout=give_up_after,
            retry_policy=_RETRY,
        )
        return result


_TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"})

# Keys the status service takes as they are (printable, no spaces, at most 128 characters).
_KEY_LIMIT = 128


def work_key(info: workflow.Info) -> str:
    """The idempotency key of the piece of work a run does, from Temporal's own identifiers.

    A workflow retry, a continue-as-new and a reset carry on the same work: Temporal keeps the
    chain's ``first_execution_run_id`` across all three, so their runs create (and so adopt) the
    same task. Each cron run is new work (Temporal keeps the chain's first run id across cron runs
    too, so the run's own id names it); a Schedule action has a workflow id of its own; a workflow
    id started again after its chain closed starts a new chain with a new first run id.
    """
    chain = info.run_id if info.cron_schedule else info.first_execution_run_id
    readable = f"{info.workflow_id}@{chain}"
    if len(readable) <= _KEY_LIMIT and not any(ch.isspace() or not ch.isprintable() for ch in readable):
        return readable
    digest = hashlib.sha256("\x1f".join((info.namespace, info.workflow_id, chain)).encode()).hexdigest()
    return f"temporal:{digest[:56]}"


def work_continues_predecessor(info: workflow.Info) -> bool:
    """A cron run retried by its RetryPolicy continues its first attempt's work (not a new cron run)."""
    return bool(info.cron_schedule) and info.attempt > 1 and info.continued_run_id is not None


def will_be_retried(info: workflow.Info, err: BaseException) -> bool | None:
    """Whether Temporal retries this run after ``err`` fails it: False when it certainly does not,
    None when it may (the workflow's RetryPolicy allows another attempt: only the close event, which
    names the retry, can tell — an execution timeout or the server's own limits may still end it).

    The trap is the cause: Temporal judges the run's own failure only.  A workflow that fails
    because an activity raised a non-retryable ``ApplicationError`` fails with an
    ``ActivityError``, which is retryable; the activity's flag governed the activity's own
    retries, not the workflow's.  Likewise a child's failure.  What stops a workflow retry is
    the run's failure itself being a non-retryable ``ApplicationError`` (or one whose type the
    policy names), a timeout other than start-to-close or heartbeat (or one whose
    ``TemporalTimeout:`` type the policy names), a cancellation or a termination.
    """
    policy = info.retry_policy
    if policy is None:
        return False
    if policy.maximum_attempts and info.attempt >= policy.maximum_attempts:
        return False
    never = policy.non_retryable_error_types or ()
    if isinstance(err, ApplicationError):
        if err.non_retryable or (err.type or "") in never:
            return False
    elif isinstance(err, TimeoutError):
        if err.type not in (TimeoutType.START_TO_CLOSE, TimeoutType.HEARTBEAT):
            return False
        if err.type is not None and {f"TemporalTimeout:{name}" for name in _TIMEOUT_NAMES[err.type]} & set(never):
            return False
    elif isinstance(err, CancelledError | TerminatedError):
        return False
    return None


# The names Temporal's server matches against ``non_retryable_error_types`` for a timeout (the enum's
# short name; its full name as older servers printed it).
_TIMEOUT_NAMES = {
    TimeoutType.START_TO_CLOSE: ("StartToClose", "TIMEOUT_TYPE_START_TO_CLOSE"),
    TimeoutType.HEARTBEAT: ("Heartbeat", "TIMEOUT_TYPE_HEARTBEAT"),
}


def _seen_endings(task_id: str) -> dict[str, str] | None:
    """How this run saw the task's steps end so far (workflow memory: deterministic), for its ending."""
    ownership = current_ownership()
    return dict(ownership.step_outcomes.get(task_id, {})) if ownership is not None else None


def _this_run() -> dict[str, Any]:
    info = workflow.info()
    return {"namespace": info.namespace, "workflowId": info.workflow_id, "runId": info.run_id}
