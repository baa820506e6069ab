"""Before a silent attempt goes STALE, ask Temporal whether its activity still runs.

For each run behind the reconciler's candidates (at most ``max_runs`` per pass): one describe —
an activity still pending means STALE stands — and, only if some are not pending, one read of the
run's history for how they ended (completed, failed, timed out, cancelled). That repairs an
attempt whose completion report was lost with a worker's disk. The reconciler runs in a thread;
``ask`` bridges to the observer's event loop, where the Temporal client lives.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping

from temporalio.api.enums.v1 import EventType as HistoryEventType
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from status import logs
from status.domain.verdicts import ActivityOutcome, ActivityRef, ActivityState

log = logs.get("observer.activities")
ASK_TIMEOUT_SECONDS = 30

_ENDINGS = {
    HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: (
        "activity_task_completed_event_attributes",
        ActivityState.COMPLETED,
    ),
    HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: ("activity_task_failed_event_attributes", ActivityState.FAILED),
    HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: (
        "activity_task_timed_out_event_attributes",
        ActivityState.TIMED_OUT,
    ),
    HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: (
        "activity_task_canceled_event_attributes",
        ActivityState.CANCELED,
    ),
}


class ActivityProbe:
    def __init__(self, connect: Callable[[str], Awaitable[Client]], *, max_runs: int = 20) -> None:
        self._connect = connect
        self.max_runs = max_runs
        self._clients: dict[str, Client] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._asking: set[concurrent.futures.Future[dict[str, ActivityOutcome]]] = set()
        self._closed = False
        self.rpcs = 0

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The event loop ``ask`` runs the Temporal calls on (the observer's)."""
        self._loop = loop

    def ask(self, refs: Mapping[str, ActivityRef]) -> Mapping[str, ActivityOutcome]:
        """From the reconciler's thread: what Temporal knows of these executions' activities
        (nothing once the observer is stopping: STALE then stands, as when Temporal is unreachable)."""
        if self._loop is None or self._closed:
            return {}
        future = asyncio.run_coroutine_threadsafe(self.outcomes(refs), self._loop)
        self._asking.add(future)
        try:
            return future.result(timeout=ASK_TIMEOUT_SECONDS)
        finally:
            self._asking.discard(future)

    def close(self) -> None:
        """Stopping: no new questions, and the one a reconciler thread waits for is given up, so the
        thread (and with it the process) can end."""
        self._closed = True
        for future in list(self._asking):
            future.cancel()

    async def outcomes(self, refs: Mapping[str, ActivityRef]) -> dict[str, ActivityOutcome]:
        by_run: dict[tuple[str, str, str], dict[str, str]] = defaultdict(dict)  # run -> activity id -> execution id
        for execution_id, ref in refs.items():
            by_run[(ref.namespace, ref.workflow_id, ref.run_id)][ref.activity_id] = execution_id
        found: dict[str, ActivityOutcome] = {}
        for (namespace, workflow_id, run_id), activities in list(by_run.items())[: self.max_runs]:
            try:
                states = await self._ask_run(namespace, workflow_id, run_id, set(activities))
            except RPCError as err:
                if err.status is not RPCStatusCode.NOT_FOUND:
                    raise
                states = {}  # the run is gone from Temporal (retention): nothing to tell
            for activity_id, execution_id in activities.items():
                found[execution_id] = states.get(activity_id, ActivityOutcome(ActivityState.UNKNOWN))
        return found

    async def _client(self, namespace: str) -> Client:
        if namespace not in self._clients:
            self._clients[namespace] = await self._connect(namespace)
        return self._clients[namespace]

    async def _ask_run(
        self, namespace: str, workflow_id: str, run_id: str, activity_ids: set[str]
    ) -> dict[str, ActivityOutcome]:
        handle = (await self._client(namespace)).get_workflow_handle(workflow_id, run_id=run_id)
        self.rpcs += 1
        description = await handle.describe()
        pending = {p.activity_id for p in description.raw_description.pending_activities}
        states = {a: ActivityOutcome(ActivityState.PENDING) for a in activity_ids & pending}
        wanted = activity_ids - pending
        if not wanted:
            return states
        scheduled: dict[int, str] = {}  # scheduled event id -> activity id
        self.rpcs += 1
        async for event in handle.fetch_history_events():
            if event.event_type == HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                scheduled_id = event.activity_task_scheduled_event_attributes.activity_id
                if scheduled_id in wanted:
                    scheduled[event.event_id] = scheduled_id
                continue
            ending = _ENDINGS.get(event.event_type)
            if ending is None:
                continue
            attributes = getattr(event, ending[0])
            ended = scheduled.get(attributes.scheduled_event_id)
            if ended is None:
                continue
            failure_type = None
            if ending[1] is ActivityState.FAILED:
                failure = attributes.failure
                info = failure if failure.HasField("application_failure_info") else failure.cause
                if info.HasField("application_failure_info"):
                    failure_type = info.application_failure_info.type or None
            states[ended] = ActivityOutcome(ending[1], failure_type)
        return states
