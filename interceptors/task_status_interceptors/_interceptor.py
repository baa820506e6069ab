"""Worker interceptors: step context into activity headers, activity lifecycle into step events.

Shaped like ``temporalio.contrib.opentelemetry``: a workflow outbound
interceptor that only copies data into headers (no I/O, replay-safe), and
activity interceptors that report through the process's ``Reporter``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
from collections.abc import Mapping
from contextvars import ContextVar
from datetime import timedelta
from types import FrameType
from typing import Any

import temporalio.activity
import temporalio.converter
import temporalio.exceptions
import temporalio.workflow
from temporalio.api.common.v1 import Payload
from temporalio.worker import (
    ActivityInboundInterceptor,
    ActivityOutboundInterceptor,
    ExecuteActivityInput,
    ExecuteWorkflowInput,
    Interceptor,
    StartActivityInput,
    StartLocalActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from task_status_interceptors._context import (
    HEADER,
    RunOwnership,
    StepBinding,
    current_binding,
    current_ownership,
    owning_run,
)
from task_status_interceptors._coordinator import TaskEventRequest, TaskStatus, will_be_retried
from task_status_interceptors._deadlines import past_temporal_deadline
from task_status_interceptors._execution import ExecutionReporter
from task_status_interceptors._reporter import Reporter, execution_key, never_raises

log = logging.getLogger("task_status_interceptors")

_current_execution: ContextVar[ExecutionReporter | None] = ContextVar("task_status_execution", default=None)


def current_execution() -> ExecutionReporter | None:
    """The reporter of the activity execution running in this context (None outside tracked activities)."""
    return _current_execution.get()


class TaskStatusInterceptor(Interceptor):
    """Adds step context to activity headers and reports tracked activities' steps."""

    def __init__(self, reporter: Reporter, *, progress_from_heartbeats: bool = False) -> None:
        self.reporter = reporter
        self.progress_from_heartbeats = progress_from_heartbeats

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ActivityInbound(next, self)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        return _WorkflowInbound


# ---------------------------------------------------------------- workflow side (no I/O)
class _WorkflowInbound(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_WorkflowOutbound(outbound))

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        """The run's verdict ends the tasks it still owns (deterministic: it follows the outcome)."""
        with owning_run() as ownership:
            try:
                result = await super().execute_workflow(input)
            except (GeneratorExit, KeyboardInterrupt, SystemExit):
                raise  # the workflow is evicted (a worker stopping): the run is not over, nothing runs here
            except BaseException as err:
                verdict = _verdict_of(err)
                retried = (
                    verdict is not None and verdict[0] == "TASK_FAILED" and will_be_retried(_info(), err) is not False
                )
                if retried:
                    # Temporal may run the work again (the workflow's RetryPolicy): the next attempt
                    # adopts its tasks; if none comes, the observer ends them from the close event.
                    verdict = None
                if verdict is not None and ownership.open:
                    await _end_owned(ownership, *verdict)
                raise
            if ownership.open:
                await _end_owned(ownership, "TASK_COMPLETED", None)
            return result


OWNED_END_DEADLINE = timedelta(minutes=1)


def _info() -> temporalio.workflow.Info:
    return temporalio.workflow.info()


def _verdict_of(err: BaseException) -> tuple[str, BaseException | None] | None:
    """What a run's exception means for its tasks; None when the run is not over (or goes on)."""
    if isinstance(err, temporalio.workflow.ContinueAsNewError):
        return None  # the next run of the chain owns the work (its create_workflow re-owns the tasks)
    if temporalio.workflow.cancellation_reason() is not None and temporalio.exceptions.is_cancelled_exception(err):
        return "TASK_CANCELLED", None
    if isinstance(err, temporalio.exceptions.FailureError):
        return "TASK_FAILED", err
    return None  # any other exception fails the workflow task, which Temporal retries: not an end


async def _end_owned(ownership: RunOwnership, event_type: str, err: BaseException | None) -> None:
    """End every task the run still owns; a refusal (it ended meanwhile) changes nothing here."""
    requests = []
    for task_id in list(ownership.open):
        request = TaskEventRequest(
            task_id,
            event_type,
            "",
            0,
            # How long the work took, as this run measured it (a task it created: all of it).
            duration_ms=ownership.duration_ms(task_id, temporalio.workflow.now()),
            step_outcomes=ownership.step_outcomes.get(task_id, {}),
        )
        if err is not None:
            category, code = _workflow_failure(err)
            request.failure_code, request.failure_category, request.failure_retryable = code, category, False
            request.failure_message = "The work failed."
            if isinstance(err, temporalio.exceptions.ActivityError):
                request.failed_step_id = ownership.last_step.get(task_id)
        requests.append(request)
    # Bounded: a status service that is down must not hold the user's run open; the observer
    # then ends the tasks from Temporal's record of the closed run.
    outcomes = await asyncio.gather(
        *(TaskStatus._submit(r, give_up_after=OWNED_END_DEADLINE) for r in requests), return_exceptions=True
    )
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, temporalio.exceptions.ActivityError):
            raise outcome


def _workflow_failure(err: BaseException) -> tuple[str, str]:
    """(category, stable code) of the exception that failed a run; never its text."""
    cause = err.cause if isinstance(err, temporalio.exceptions.ActivityError) and err.cause else err
    if isinstance(cause, temporalio.exceptions.TimeoutError):
        return "TIMEOUT", "TIMEOUT"
    if isinstance(cause, temporalio.exceptions.ApplicationError):
        return ("BUSINESS" if cause.non_retryable else "SYSTEM"), _safe_code(cause.type or "APPLICATION_ERROR")
    return "SYSTEM", _safe_code(type(cause).__name__)


class _WorkflowOutbound(WorkflowOutboundInterceptor):
    def start_activity(self, input: StartActivityInput) -> temporalio.workflow.ActivityHandle[Any]:
        input.headers = _with_binding(input.headers)
        return _followed(super().start_activity(input))

    def start_local_activity(self, input: StartLocalActivityInput) -> temporalio.workflow.ActivityHandle[Any]:
        input.headers = _with_binding(input.headers)
        return _followed(super().start_local_activity(input))


def _followed(handle: temporalio.workflow.ActivityHandle[Any]) -> temporalio.workflow.ActivityHandle[Any]:
    """Remember how the run sees the activity of a known step end (memory only: deterministic, it
    follows the history). The run's end sends it, so a step whose own report is late or never
    comes (a local activity, an activity completed asynchronously) still ends as Temporal recorded."""
    binding, ownership = current_binding(), current_ownership()
    # A known step by its id, a dynamic one by its clientStepKey (the service's stepOutcomes key).
    key = None if binding is None else binding.step_id or binding.client_step_key
    if binding is not None and key is not None and ownership is not None:
        task_id = binding.task_id
        handle.add_done_callback(lambda done: ownership.step_ended(task_id, key, _activity_outcome(done)))
    return handle


def _activity_outcome(done: asyncio.Future[Any]) -> str:
    """The step lifecycle an ended activity (as the workflow sees it) stands for."""
    if done.cancelled():
        return "CANCELLED"
    err = done.exception()
    if err is None:
        return "SUCCEEDED"
    if temporalio.exceptions.is_cancelled_exception(err):
        return "CANCELLED"
    cause = err.cause if isinstance(err, temporalio.exceptions.ActivityError) else None
    if isinstance(cause, temporalio.exceptions.TimeoutError):
        return "TIMED_OUT"
    return "FAILED"


def _with_binding(headers: Mapping[str, Payload]) -> Mapping[str, Payload]:
    binding = current_binding()
    if binding is None:
        return headers
    ownership = current_ownership()
    if ownership is not None and binding.step_id is not None:
        ownership.last_step[binding.task_id] = binding.step_id
    return {**headers, HEADER: binding_header(binding)}


# What Temporal's default payload converter writes for a dict (``json/plain``: sorted keys, no
# spaces), written and read here without its dispatch: both ends of this header are the plugin's,
# whatever converter the user's data goes through, and the dispatch was most of the cost of
# reading it, once per activity on the worker's loop (docs/benchmarks.md, "2026-12-07 (late night)").
_JSON_PLAIN = b"json/plain"


def binding_header(binding: StepBinding) -> Payload:
    """The activity header that names ``binding``."""
    text = json.dumps(binding.to_json(), separators=(",", ":"), sort_keys=True)
    return Payload(metadata={"encoding": _JSON_PLAIN}, data=text.encode())


def header_binding(payload: Payload) -> StepBinding:
    """The binding an activity header names; a header written through another converter (by an
    earlier plugin on a worker with a data converter of its own) is read through the activity's."""
    if payload.metadata.get("encoding") == _JSON_PLAIN:
        raw = json.loads(payload.data)
    else:
        raw = temporalio.activity.payload_converter().from_payload(payload, dict)
    return StepBinding.from_json(raw)


# ---------------------------------------------------------------- activity side
class _ActivityInbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, root: TaskStatusInterceptor) -> None:
        super().__init__(next)
        self.root = root
        self._execution: ExecutionReporter | None = None

    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        super().init(_ActivityOutbound(outbound, self))

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        """The activity, awaited in place (no task of its own: a turn of the worker's loop less per
        activity), its ending reported. The failure Temporal records for an activity (the traceback
        its UI shows) keeps the activity's frames and none of this one's: see ``_unseen``."""
        execution = self._begin(input.headers)
        if execution is None:
            return await self.next.execute_activity(input)
        self._execution = execution
        token = _current_execution.set(execution)
        try:
            result = await self.next.execute_activity(input)
        except (GeneratorExit, KeyboardInterrupt, SystemExit):
            raise  # the worker is going away under the activity: nothing is reported from here
        except BaseException as err:
            never_raises(_ended_by)(self, execution, err)
            _unseen(err, inspect.currentframe())
            raise
        finally:
            _current_execution.reset(token)
        never_raises(_returned)(execution)
        return result

    def _begin(self, headers: Mapping[str, Payload]) -> ExecutionReporter | None:
        payload = headers.get(HEADER)
        if payload is None:
            return None
        try:
            binding = header_binding(payload)
            info = temporalio.activity.info()
            key = execution_key(info.workflow_run_id, info.activity_id, info.attempt, info.task_queue)
            temporal = None
            if info.workflow_id and info.workflow_run_id:
                # Which Temporal activity this is: the reconciler asks Temporal about it before STALE.
                temporal = {
                    "namespace": info.workflow_namespace or info.namespace,
                    "workflowId": info.workflow_id,
                    "runId": info.workflow_run_id,
                    "activityId": info.activity_id,
                }
            return self.root.reporter.begin(key, binding, info.attempt, temporal=temporal)
        except Exception:
            log.exception("could not start step reporting; the activity runs unreported")
            return None

    @staticmethod
    def _failed(execution: ExecutionReporter, err: BaseException) -> None:
        category, code, message, retryable = classify(err, temporalio.activity.info())
        diagnostics = f"{type(err).__module__}.{type(err).__qualname__}"
        execution.failed(category, code, message, retryable, diagnostics)


def _ended_by(inbound: _ActivityInbound, execution: ExecutionReporter, err: BaseException) -> None:
    """How an attempt that raised ended, reported (in the activity's context: its cancellation details)."""
    if isinstance(err, temporalio.activity._CompleteAsyncError):  # raise_complete_async(): not a failure
        execution.completes_elsewhere()
    elif _is_cancellation(err):
        _cancelled(execution)
    else:
        inbound._failed(execution, err)


def _unseen(err: BaseException, frame: FrameType | None) -> None:
    """Leave ``frame`` (the interceptor's, which the exception just passed through) out of the
    exception's traceback. A bare ``raise`` then sends it on with that traceback and adds no entry
    of its own, so what Temporal records starts at its own frame and goes straight to the
    activity's, as without the plugin."""
    tb = err.__traceback__
    if tb is not None and tb.tb_frame is frame:
        err.__traceback__ = tb.tb_next


def _returned(execution: ExecutionReporter) -> None:
    """The activity returned: SUCCEEDED, unless Temporal has certainly timed the attempt out
    already (its result is refused: reporting it would show a success Temporal never recorded)."""
    info = temporalio.activity.info()
    late = not info.is_local and past_temporal_deadline(
        time.monotonic(),
        execution.beats,
        heartbeat_timeout=info.heartbeat_timeout.total_seconds() if info.heartbeat_timeout else None,
        start_to_close=info.start_to_close_timeout.total_seconds() if info.start_to_close_timeout else None,
    )
    if late:
        execution.timed_out()
    else:
        execution.completed()


def _is_cancellation(err: BaseException) -> bool:
    """Temporal's cancellation of the activity, whatever class carries it: ``asyncio.CancelledError``
    for an ``async def``, ``temporalio.exceptions.CancelledError`` raised into a thread-pool or
    process-pool activity (either may arrive wrapped by the activity's own code)."""
    return temporalio.exceptions.is_cancelled_exception(err) or isinstance(
        err, asyncio.CancelledError | temporalio.exceptions.CancelledError
    )


def _cancelled(execution: ExecutionReporter) -> None:
    """The attempt's ending as Temporal's cancellation details say it (read in the activity's context)."""
    details = temporalio.activity.cancellation_details()
    if details is not None and not details.cancel_requested and (details.worker_shutdown or details.not_found):
        # The worker is stopping, not the work (Temporal runs the activity again: a next attempt
        # supersedes this one), or Temporal no longer knows the activity (its run closed: the run's
        # verdict ends the step as Temporal recorded it). An ending reported here would contradict both.
        execution.abandoned()
        return
    if details is not None and details.timed_out:
        execution.timed_out()
        return
    execution.cancelled()


class _ActivityOutbound(ActivityOutboundInterceptor):
    def __init__(self, next: ActivityOutboundInterceptor, inbound: _ActivityInbound) -> None:
        super().__init__(next)
        self.inbound = inbound

    def heartbeat(self, *details: Any) -> None:
        # Runs on the worker's event loop (a thread-pool activity waits for it): memory only.
        execution = self.inbound._execution
        if execution is not None:
            never_raises(execution.heartbeat)()
            if self.inbound.root.progress_from_heartbeats and details:
                never_raises(_progress_from_details)(execution, details[0])
        super().heartbeat(*details)


def _progress_from_details(execution: ExecutionReporter, detail: Any) -> None:
    """Opt-in: a heartbeat detail like ``{"current": 3, "total": 10}`` or a number is progress."""
    if isinstance(detail, dict) and isinstance(detail.get("current"), int | float):
        execution.progress(
            detail["current"],
            detail.get("total"),
            detail.get("unit"),
            phase_code=detail.get("phaseCode"),
            phase_label=detail.get("phaseLabel"),
        )
    elif isinstance(detail, int | float) and not isinstance(detail, bool):
        execution.progress(detail)


def classify(err: BaseException, info: temporalio.activity.Info) -> tuple[str, str, str, bool]:
    """(category, stable code, user-safe message, retryable) of an activity error; never the raw text."""
    retry = info.retry_policy
    attempts_left = retry is None or not retry.maximum_attempts or info.attempt < retry.maximum_attempts
    if isinstance(err, temporalio.exceptions.ApplicationError):
        non_retryable = err.non_retryable or (retry is not None and err.type in (retry.non_retryable_error_types or []))
        code = err.type or "APPLICATION_ERROR"
        category = "BUSINESS_INPUT" if non_retryable else "DEPENDENCY"
        retryable = bool(attempts_left and not non_retryable)
        # No promise in the words: whether it is retried is ``retryable`` and the next attempt, and a
        # stored message outlives the promise (a task cancelled meanwhile retries nothing).
        message = "The step failed."
        return category, _safe_code(code), message, retryable
    if isinstance(err, TimeoutError | asyncio.TimeoutError):
        return "TIMEOUT", "TIMEOUT", "The step timed out.", bool(attempts_left)
    return "SYSTEM", _safe_code(type(err).__name__), "The step failed unexpectedly.", bool(attempts_left)


def _safe_code(code: str) -> str:
    cleaned = "".join(ch if ch.isalnum() or ch in "_.:-" else "_" for ch in code)[:128]
    return cleaned if cleaned and cleaned[0].isalnum() else "ERROR"


def report_progress(
    current: float,
    total: float | None = None,
    unit: str | None = None,
    *,
    phase_code: str | None = None,
    phase_label: str | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    """Report step progress from activity code (async or thread-pool); throttled, never raises.

    A no-op outside an activity the plugin tracks.
    """
    execution = current_execution()
    if execution is not None:
        never_raises(execution.progress)(
            current, total, unit, phase_code=phase_code, phase_label=phase_label, data=data
        )
