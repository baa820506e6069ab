"""The run follower: Temporal's verdict becomes the task's verdict when no workflow code runs.

Terminate, execution and run timeouts, a reset that abandons a run, a workflow task that keeps
failing: nothing in the worker reports any of them. Each pass reads, per followed namespace,
the runs that closed since the durable watermark (one paged visibility query: the cost follows
the runs that close, never the tasks that are open), finds the open tasks those runs own (one
indexed read), and for each such run reads its close event (one call): a run whose work goes on
in another run (continue-as-new, retry, cron — named by the close event — or a reset, whose new
run starts as the old one is terminated) hands its tasks over; any other ends them through
``status.app.runs``. The same pass lists the open runs Temporal reports stuck (one more
visibility query) and shows them on the tasks they own until they move again. Temporal
unreachable: the pass fails, nothing changes, and the next pass starts from the same watermark.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from temporalio.api.enums.v1 import EventType as HistoryEventType
from temporalio.api.enums.v1 import RetryState
from temporalio.client import Client, WorkflowExecution, WorkflowHistoryEventFilterType
from temporalio.service import RPCError, RPCStatusCode

from observer import metrics
from status import logs
from status.app.runs import FollowResult
from status.app.service import StatusService
from status.domain.verdicts import ClosedRun, RunStatus, continuation

log = logs.get("observer.runs")

# Closes are re-read this far behind the watermark: visibility is eventually consistent, so a run
# may become visible a little after runs that closed later. Re-reading costs nothing but the read.
VISIBILITY_OVERLAP = timedelta(seconds=30)

# Open runs Temporal reports stuck: it sets TemporalReportedProblems on a run whose workflow task
# failed (or timed out) several times in a row (``system.numConsecutiveWorkflowTaskProblemsTo
# TriggerSearchAttribute``, 5 by default: about a minute of retries) and removes it once one succeeds.
STUCK_QUERY = (
    'ExecutionStatus = "Running" AND TemporalReportedProblems IN '
    '("category=WorkflowTaskFailed", "category=WorkflowTaskTimedOut")'
)


def _retried_by(new_run_id: str, retry_state: int) -> str | None:
    """The run that retries this one (same work); None when the run named is the next cron run
    (new work) or there is none. Temporal says which: a retry is ``RETRY_STATE_IN_PROGRESS``."""
    if new_run_id and retry_state == RetryState.RETRY_STATE_IN_PROGRESS:
        return new_run_id
    return None


class RunFollower:
    def __init__(
        self,
        service: StatusService,
        connect: Callable[[str], Awaitable[Client]],
        namespaces: Sequence[str],
        *,
        overlap: timedelta = VISIBILITY_OVERLAP,
    ) -> None:
        self.service = service
        self._connect = connect
        self.namespaces = tuple(namespaces)
        self.overlap = overlap
        self._clients: dict[str, Client] = {}
        self.rpcs = 0  # Temporal calls made (list pages, close events, describes)
        self.passes = 0  # completed passes over every namespace
        self._no_problem_reports: set[str] = set()  # namespaces whose server cannot list stuck runs

    async def _client(self, namespace: str) -> Client:
        client = self._clients.get(namespace)
        if client is None:
            client = self._clients[namespace] = await self._connect(namespace)
        return client

    async def run_once(self) -> int:
        """One pass over every followed namespace; how many tasks ended or moved to another run."""
        changed = 0
        for namespace in self.namespaces:
            try:
                changed += await self._follow(namespace)
            except Exception:
                self._clients.pop(namespace, None)  # connect again next pass
                raise
        self.passes += 1
        return changed

    async def _follow(self, namespace: str) -> int:
        since = await asyncio.to_thread(self.service.runs.watermark, namespace)
        if since is None:
            return 0  # no run of this namespace owns an open task
        client = await self._client(namespace)
        changed = await self._stuck(client, namespace)
        start = since.replace(tzinfo=UTC) - self.overlap
        query = f'CloseTime >= "{start.isoformat(timespec="milliseconds").replace("+00:00", "Z")}"'
        closed: list[WorkflowExecution] = []
        iterator = client.list_workflows(query, page_size=1000)
        async for execution in iterator:
            if execution.close_time is not None and execution.status is not None:
                closed.append(execution)
        self.rpcs += max(1, -(-len(closed) // 1000))
        if not closed:
            return changed
        owned = await asyncio.to_thread(self.service.runs.open_tasks, namespace, [e.id for e in closed])
        by_workflow = defaultdict(list)
        for task in owned:
            by_workflow[task.workflow_id].append(task)
        for execution in sorted(closed, key=lambda e: e.close_time or datetime.min.replace(tzinfo=UTC)):
            tasks = [t for t in by_workflow.get(execution.id, []) if t.run_id in (None, execution.run_id)]
            if not tasks:
                continue
            run = await self._closed_run(client, namespace, execution)
            continued_by = continuation(run, *await self._newest_run(client, run))
            result = await asyncio.to_thread(self.service.runs.follow, run, continued_by, tasks)
            _counted(run, result)
            changed += len(result.ended) + len(result.handed_over)
            if continued_by is not None:  # later closes of this page see the tasks with their new run
                moved = set(result.handed_over)
                by_workflow[execution.id] = [
                    replace(t, run_id=continued_by) if t.task_id in moved else t for t in by_workflow[execution.id]
                ]
        newest = max(e.close_time for e in closed if e.close_time is not None)
        await asyncio.to_thread(self.service.runs.advance_watermark, namespace, newest.replace(tzinfo=None))
        return changed

    async def _stuck(self, client: Client, namespace: str) -> int:
        """Runs Temporal reports stuck (open, their workflow task failing again and again: a bug or a
        non-deterministic change in workflow code) show on the tasks they own, until they move again.
        One visibility query per pass, whatever the number of open tasks; a server without the
        search attribute (before Temporal 1.28) is asked no more, and nothing is shown stuck."""
        if namespace in self._no_problem_reports:
            return 0
        stuck: set[tuple[str, str]] = set()
        self.rpcs += 1
        try:
            async for execution in client.list_workflows(STUCK_QUERY, page_size=1000):
                stuck.add((execution.id, execution.run_id))
        except RPCError as err:
            if err.status is not RPCStatusCode.INVALID_ARGUMENT:
                raise
            self._no_problem_reports.add(namespace)
            log.warning(
                "Temporal reports no stuck runs here (no TemporalReportedProblems); not shown", namespace=namespace
            )
            return 0
        result = await asyncio.to_thread(self.service.runs.reflect_stuck, namespace, stuck)
        if result.stuck or result.recovered:
            log.info("Temporal's stuck runs", stuck=len(result.stuck), recovered=len(result.recovered))
        return len(result.stuck) + len(result.recovered)

    async def _closed_run(self, client: Client, namespace: str, execution: WorkflowExecution) -> ClosedRun:
        """The run as its close event tells it (its successor, a terminate reason, a failure's type)."""
        assert execution.close_time is not None and execution.status is not None
        next_run_id = reason = failure_type = None
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        self.rpcs += 1
        async for event in handle.fetch_history_events(event_filter_type=WorkflowHistoryEventFilterType.CLOSE_EVENT):
            kind = event.event_type
            if kind == HistoryEventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
                reason = event.workflow_execution_terminated_event_attributes.reason
            elif kind == HistoryEventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
                attrs = event.workflow_execution_failed_event_attributes
                next_run_id = _retried_by(attrs.new_execution_run_id, attrs.retry_state)
                info = attrs.failure.application_failure_info
                failure_type = info.type if attrs.failure.HasField("application_failure_info") else None
            elif kind == HistoryEventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT:
                timed_out = event.workflow_execution_timed_out_event_attributes
                next_run_id = _retried_by(timed_out.new_execution_run_id, timed_out.retry_state)
            elif kind == HistoryEventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
                pass  # a successor named here is the next cron run: new work, with tasks of its own
            elif kind == HistoryEventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                next_run_id = event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id or None
        return ClosedRun(
            namespace=namespace,
            workflow_id=execution.id,
            run_id=execution.run_id,
            status=RunStatus(execution.status.name),
            start_time=execution.start_time,
            close_time=execution.close_time,
            next_run_id=next_run_id,
            reason=reason or None,
            failure_type=failure_type or None,
            first_run_id=execution.raw_info.first_run_id or None,
        )

    async def _newest_run(self, client: Client, run: ClosedRun) -> tuple[str | None, datetime | None, str | None]:
        """The workflow id's newest run (its id, start, first run of its chain), when only it can tell
        whether the work went on (a reset)."""
        if run.next_run_id is not None or run.status is not RunStatus.TERMINATED:
            return None, None, None
        self.rpcs += 1
        description = await client.get_workflow_handle(run.workflow_id).describe()
        first = description.raw_description.workflow_execution_info.first_run_id or None
        return description.run_id, description.start_time, first


def _counted(run: ClosedRun, result: FollowResult) -> None:
    """What following a closed run did, for operators: verdicts, hand-overs, and how long after
    the close each task it ended ended (the run-end objective, docs/slo.md)."""
    metrics.RUN_VERDICTS.labels(status=run.status.value).inc(len(result.ended))
    metrics.RUN_HANDOVERS.inc(len(result.handed_over))
    closed = run.close_time if run.close_time.tzinfo else run.close_time.replace(tzinfo=UTC)
    late = max(0.0, (datetime.now(UTC) - closed).total_seconds())
    for _ in result.ended:
        metrics.RUN_CLOSE_TO_TASK_END.observe(late)
    if result.ended or result.handed_over:
        log.info(
            "a Temporal run closed",
            status=run.status.value,
            ended=len(result.ended),
            handedOver=len(result.handed_over),
        )
