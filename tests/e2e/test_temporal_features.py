"""Every way Temporal runs work, the task tells it truly: one case per feature.

Real Temporal dev server, the status service on MariaDB and on SQLite, the plugin on a real worker and the
observer's run follower and completion watch on their shipped interval. Each case asserts the
task's final lifecycle, each step's final state, that no step runs after its run closed, and that
routine endings leave no undeliverable report and no WARNING from the plugin.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from task_status_interceptors import TaskStatusPlugin
from task_status_interceptors._outbox import read_undeliverable
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.common import RetryPolicy, WorkflowIDReusePolicy
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from observer.activities import ActivityProbe
from observer.loops import LoopConfig, Reconciler
from observer.runs import RunFollower
from status.app.service import StatusService
from status.infra import tables as t
from tests.e2e.conftest import Backend
from tests.e2e.test_run_verdicts import OWNER, _ended, _events, _eventually, _snapshot
from tests.integration.conftest import Http
from tests.support import feature_workflows as fw
from tests.support.flows import follow_detail
from tests.support.outbox import publications

pytestmark = [pytest.mark.temporal, pytest.mark.mariadb]  # and SQLite: the stack's cases run on both
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"}
ACTIVITIES = [
    fw.quick,
    fw.sync_work,
    fw.beating_work,
    fw.quiet_work,
    fw.completed_later,
    fw.silent_first_attempt,
    fw.refuses,
    fw.returns_after_timeout,
]
WORKFLOWS = [fw.FeatureWorkflow, fw.ParentWorkflow, fw.AdoptingWorkflow]


class _Collect(logging.Handler):
    def __init__(self, records: list[logging.LogRecord]) -> None:
        super().__init__(logging.DEBUG)
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def _plugin(url: str, token: str, outbox: Path) -> Iterator[tuple[TaskStatusPlugin, list[logging.LogRecord]]]:
    """A plugin for a test's worker, and what it logs while the block runs."""
    records: list[logging.LogRecord] = []
    handler = _Collect(records)
    logger = logging.getLogger("task_status_interceptors")
    logger.addHandler(handler)
    try:
        yield TaskStatusPlugin(url, token, outbox_path=outbox, heartbeat_interval=0.2), records
    finally:
        logger.removeHandler(handler)


@dataclass
class Stack:
    """A worker with the plugin, the observer's Temporal loops, and what a case asks of them."""

    api: Http
    env: WorkflowEnvironment
    queue: str
    engine: sa.Engine
    plugin: TaskStatusPlugin
    outbox: Path
    records: list[logging.LogRecord]

    async def start(
        self, plan: Any, workflow: Any = fw.FeatureWorkflow.run, **options: Any
    ) -> WorkflowHandle[Any, Any]:
        options.setdefault("id", f"feature-{uuid.uuid4().hex[:8]}")
        return await self.env.client.start_workflow(workflow, plan, task_queue=self.queue, **options)

    def titled(self, title: str) -> list[dict[str, Any]]:
        listed = self.api.client.get("/api/me/tasks", headers=self.api.user(OWNER)).json()["tasks"]
        return [task for task in listed if task["title"] == title]

    async def task_of(self, title: str) -> str:
        (task,) = await _eventually(lambda: self.titled(title), f"the task {title} exists")
        return str(task["taskId"])

    def snapshot(self, task_id: str) -> dict[str, Any]:
        return _snapshot(self.api, task_id)

    async def ended(self, task_id: str, timeout: float = 30) -> dict[str, Any]:
        snap: dict[str, Any] = await _eventually(lambda: _ended(self.api, task_id), "the task ended", timeout=timeout)
        return snap

    async def snapshot_when(
        self, task_id: str, holds: Callable[[dict[str, Any]], Any], what: str, timeout: float = 30
    ) -> dict[str, Any]:
        """The task's first snapshot for which ``holds`` is true."""

        def check() -> dict[str, Any] | None:
            snap = self.snapshot(task_id)
            return snap if holds(snap) else None

        found: dict[str, Any] = await _eventually(check, what, timeout=timeout)
        return found

    async def until(self, check: Callable[[], Any], what: str, timeout: float = 30) -> Any:
        return await _eventually(check, what, timeout=timeout)

    def undeliverable(self) -> list[dict[str, Any]]:
        return read_undeliverable(self.outbox)

    def warnings(self) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno >= logging.WARNING]

    async def clean(self) -> None:
        """Routine endings: everything delivered, nothing kept as undeliverable, nothing warned."""
        await self.plugin.reporter.drained()
        assert self.undeliverable() == []
        assert self.warnings() == []

    def nothing_ran_after_the_end(self, task_id: str) -> None:
        """No step event was applied after the task's terminal event: no step ran after its run closed."""
        events = _events(self.engine, task_id)
        ends = [
            v for v, kind, _ in events if kind in ("TASK_COMPLETED", "TASK_FAILED", "TASK_CANCELLED", "TASK_TIMED_OUT")
        ]
        assert len(ends) == 1, events
        assert [kind for v, kind, _ in events if v > ends[0]] == [], events
        assert all(s["lifecycleStatus"] != "RUNNING" for s in self.snapshot(task_id)["steps"])

    async def released_and_succeeded(self, handle: WorkflowHandle[Any, Any], task_id: str) -> dict[str, Any]:
        """Let a holding run finish (its ``release`` signal): the task ends SUCCEEDED with its one
        step attempt, cleanly, and nothing runs after it."""
        await handle.signal(fw.FeatureWorkflow.release)
        assert await handle.result() == task_id
        snap = await self.ended(task_id)
        await self.clean()
        assert snap["lifecycleStatus"] == "SUCCEEDED" and snap["health"] == "HEALTHY"
        assert snap["durationSource"] == "PRODUCER_MONOTONIC"  # the run's end says how long its task took
        assert _attempts(snap) == [(1, "SUCCEEDED")]
        self.nothing_ran_after_the_end(task_id)
        return snap

    def event_kinds(self, task_id: str) -> list[str]:
        return [kind for _, kind, _ in _events(self.engine, task_id)]


@asynccontextmanager
async def _observing(service: StatusService, env: WorkflowEnvironment) -> AsyncIterator[None]:
    """The observer's Temporal loops as it runs them: the run follower and the completion watch,
    each on the shipped interval."""

    async def connect(namespace: str) -> Any:
        return env.client

    follower = RunFollower(service, connect, ["default"])
    probe = ActivityProbe(connect)
    probe.bind(asyncio.get_running_loop())
    reconciler = Reconciler(service, LoopConfig(), probe)
    stop = asyncio.Event()

    async def every(pass_: Callable[[], Any]) -> None:  # ObserverLoops' cadence: one pass per interval
        interval = LoopConfig().run_follow_interval
        while not stop.is_set():
            started = asyncio.get_running_loop().time()
            await pass_()
            with suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, interval - (asyncio.get_running_loop().time() - started)))

    running = [
        asyncio.create_task(every(follower.run_once)),
        asyncio.create_task(every(lambda: asyncio.to_thread(reconciler.watch_completions))),
    ]
    try:
        yield
    finally:
        stop.set()
        await asyncio.gather(*running)


@pytest.fixture(params=["mariadb", "sqlite"])
async def stack(
    request: pytest.FixtureRequest, temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> AsyncIterator[Stack]:
    """The case on the status service over MariaDB and over SQLite (the demo stack's default)."""
    backend: Backend = request.getfixturevalue(f"{request.param}_backend")
    api = backend.http()
    token = api.service_token("feature-worker", "WORKER", "COORDINATOR")
    outbox = tmp_path / "outbox.sqlite3"
    fw.async_tokens = asyncio.Queue()
    with _plugin(backend.url, token, outbox) as (plugin, records), ThreadPoolExecutor(8) as pool:
        async with (
            Worker(
                temporal_env.client,
                task_queue=task_queue,
                workflows=WORKFLOWS,
                activities=ACTIVITIES,
                activity_executor=pool,
                # The stuck case's "deploy" flips a switch its workflow reads (one module object).
                workflow_runner=SandboxedWorkflowRunner(
                    restrictions=SandboxRestrictions.default.with_passthrough_modules("tests.support.stuck_switch")
                ),
                plugins=[plugin],
            ),
            _observing(backend.service, temporal_env),
        ):
            yield Stack(api, temporal_env, task_queue, backend.engine, plugin, outbox, records)


def _step(snap: dict[str, Any]) -> dict[str, Any]:
    """The step's newest attempt (what the card shows)."""
    return max((s for s in snap["steps"] if s["stepId"] == "01_work"), key=lambda s: s["attempt"])


def _attempts(snap: dict[str, Any]) -> list[tuple[int, str]]:
    return sorted((s["attempt"], s["lifecycleStatus"]) for s in snap["steps"] if s["stepId"] == "01_work")


async def _until_async(check: Callable[[], Any], what: str, timeout: float = 30) -> None:
    """Until an awaitable check (a Temporal call) says yes."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, f"{what}: not after {timeout} s"
        await asyncio.sleep(0.1)


def _title() -> str:
    return f"feature-{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------- which task a run works on
async def test_a_workflow_retried_by_its_retry_policy_ends_with_the_attempt_that_completes(stack: Stack) -> None:
    title = _title()
    handle = await stack.start(
        fw.Plan(OWNER, title, "fail_first"),
        retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=3),
    )
    task_id = await handle.result()
    snap = await stack.ended(task_id)
    await stack.clean()
    assert [t["taskId"] for t in stack.titled(title)] == [task_id]  # one piece of work, one task
    assert snap["lifecycleStatus"] == "SUCCEEDED"
    # The step ran once per workflow attempt: the second run's activity is the step's attempt 2.
    assert _attempts(snap) == [(1, "SUCCEEDED"), (2, "SUCCEEDED")]
    stack.nothing_ran_after_the_end(task_id)


async def test_a_workflow_that_fails_every_attempt_fails_its_task_once_the_last_attempt_fails(stack: Stack) -> None:
    title = _title()
    handle = await stack.start(
        fw.Plan(OWNER, title, "fail_always"),
        retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=2),
    )
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    task_id = await stack.task_of(title)
    snap = await stack.ended(task_id)
    await stack.clean()
    assert snap["lifecycleStatus"] == "FAILED" and snap["failure"]["code"] == "DEPENDENCY_DOWN"
    assert _step(snap)["attempt"] == 2 and _step(snap)["lifecycleStatus"] == "SUCCEEDED"
    # Ended once, by the last attempt (the first attempt's failure ended nothing).
    stack.nothing_ran_after_the_end(task_id)


async def test_a_workflow_retried_after_a_non_retryable_activity_error_is_not_ended_by_that_error(
    stack: Stack,
) -> None:
    """Temporal judges the run's own failure: an activity's non-retryable error fails the run with
    an ActivityError, which the workflow's RetryPolicy retries. Its task is not FAILED (no TASK_FAILED
    notice), and the second run's completion ends it SUCCEEDED."""
    title = _title()
    handle = await stack.start(
        fw.Plan(OWNER, title, "refuses_first"),
        retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=2),
    )
    task_id = await handle.result()
    snap = await stack.ended(task_id)
    await stack.clean()
    assert snap["lifecycleStatus"] == "SUCCEEDED", snap
    assert _attempts(snap) == [(1, "FAILED"), (2, "SUCCEEDED")]
    assert "TASK_FAILED" not in stack.event_kinds(task_id)
    with stack.engine.connect() as conn:
        summaries = [p.payload for p in publications(conn, task_id, projection="USER_SUMMARY")]
    assert [s["lifecycleStatus"] for s in summaries if s["lifecycleStatus"] == "FAILED"] == []
    stack.nothing_ran_after_the_end(task_id)


async def test_each_cron_run_is_new_work_with_a_task_of_its_own(stack: Stack) -> None:
    title = _title()
    handle = await stack.start(fw.Plan(OWNER, title, "plain"), cron_schedule="@every 2s")

    def three_ended() -> list[dict[str, Any]] | None:
        tasks = stack.titled(title)
        done = [t for t in tasks if t["lifecycleStatus"] in TERMINAL]
        return tasks if len(done) >= 3 else None

    tasks = await stack.until(three_ended, "three cron runs ended their tasks", timeout=60)
    await handle.terminate("enough runs")
    await stack.clean()
    ended = [t for t in tasks if t["lifecycleStatus"] in TERMINAL]
    assert {t["lifecycleStatus"] for t in ended} == {"SUCCEEDED"}
    assert len({t["taskId"] for t in ended}) == len(ended)
    for task in ended:
        snap = stack.snapshot(task["taskId"])
        assert _attempts(snap) == [(1, "SUCCEEDED")]
        stack.nothing_ran_after_the_end(task["taskId"])


async def test_each_schedule_action_is_new_work_with_a_task_of_its_own(stack: Stack) -> None:
    from temporalio.client import Schedule, ScheduleActionStartWorkflow, ScheduleSpec, ScheduleState

    title = _title()
    schedule = await stack.env.client.create_schedule(
        f"schedule-{title}",
        Schedule(
            action=ScheduleActionStartWorkflow(
                fw.FeatureWorkflow.run, fw.Plan(OWNER, title, "plain"), id=f"scheduled-{title}", task_queue=stack.queue
            ),
            spec=ScheduleSpec(),
            state=ScheduleState(paused=True),  # only the triggers below start anything
        ),
    )
    try:
        await schedule.trigger()

        # The next action once the first has closed (a schedule skips an action while one runs).
        async def first_closed() -> bool:
            info = (await schedule.describe()).info
            return len(info.recent_actions) == 1 and not info.running_actions

        await _until_async(first_closed, "the first action closed")
        await schedule.trigger()

        def two_ended() -> list[dict[str, Any]] | None:
            tasks = [t for t in stack.titled(title) if t["lifecycleStatus"] in TERMINAL]
            return tasks if len(tasks) == 2 else None

        tasks = await stack.until(two_ended, "both actions ended their tasks")
    finally:
        await schedule.delete()
    await stack.clean()
    assert {t["lifecycleStatus"] for t in tasks} == {"SUCCEEDED"} and len({t["taskId"] for t in tasks}) == 2
    for task in tasks:
        assert _attempts(stack.snapshot(task["taskId"])) == [(1, "SUCCEEDED")]
        stack.nothing_ran_after_the_end(task["taskId"])


async def test_a_workflow_id_run_again_after_its_chain_closed_is_new_work(stack: Stack) -> None:
    title = _title()
    ids = []
    for _ in range(2):
        handle = await stack.start(
            fw.Plan(OWNER, title, "plain"),
            id=f"fixed-{title}",  # as the SDK's samples do
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        )
        ids.append(await handle.result())
    for task_id in ids:
        await stack.ended(task_id)
    await stack.clean()
    assert len(set(ids)) == 2
    for task_id in ids:
        snap = stack.snapshot(task_id)
        assert snap["lifecycleStatus"] == "SUCCEEDED" and _step(snap)["lifecycleStatus"] == "SUCCEEDED"
        stack.nothing_ran_after_the_end(task_id)


async def test_a_continued_as_new_run_carries_on_the_same_task(stack: Stack) -> None:
    title = _title()
    handle = await stack.start(fw.Plan(OWNER, title, "continue"))
    task_id = await handle.result()  # the handle follows the chain to its last run
    snap = await stack.ended(task_id)
    await stack.clean()
    assert [t["taskId"] for t in stack.titled(title)] == [task_id]
    assert snap["lifecycleStatus"] == "SUCCEEDED"
    assert _attempts(snap) == [(1, "SUCCEEDED"), (2, "SUCCEEDED")]  # each run's activity, one step
    stack.nothing_ran_after_the_end(task_id)


async def test_a_reset_run_carries_on_the_same_task_and_its_end_ends_it(stack: Stack) -> None:
    from temporalio.api.common.v1 import WorkflowExecution
    from temporalio.api.enums.v1 import EventType as HistoryEventType
    from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest

    title = _title()
    handle = await stack.start(fw.Plan(OWNER, title, "hold"))
    task_id = await stack.task_of(title)
    await stack.until(lambda: _step(stack.snapshot(task_id))["lifecycleStatus"] == "SUCCEEDED", "the step ended")
    # Reset to the last completed workflow task (waiting for the signal): the new run goes on from there.
    completed = [
        e.event_id
        async for e in handle.fetch_history_events()
        if e.event_type == HistoryEventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    ]
    reset = await stack.env.client.workflow_service.reset_workflow_execution(
        ResetWorkflowExecutionRequest(
            namespace=stack.env.client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=handle.id, run_id=handle.result_run_id),
            reason="deployed a fix",
            workflow_task_finish_event_id=completed[-1],
            request_id=str(uuid.uuid4()),
        )
    )
    new_run = stack.env.client.get_workflow_handle(handle.id, run_id=reset.run_id)

    def owned_by_new_run() -> bool:

        with stack.engine.connect() as conn:
            return conn.scalar(sa.select(t.task.c.temporal_run_id).where(t.task.c.id == task_id)) == reset.run_id

    await stack.until(owned_by_new_run, "the new run owns the task")
    assert stack.snapshot(task_id)["lifecycleStatus"] == "RUNNING"
    await stack.released_and_succeeded(new_run, task_id)


# ---------------------------------------------------------------- activity kinds and cancellation
@pytest.mark.parametrize(
    ("how", "cancellation"),
    [
        ("sync_wait", "TRY_CANCEL"),
        ("sync_wait", "WAIT_CANCELLATION_COMPLETED"),
        ("sync_wait", "ABANDON"),
        ("async_wait", "TRY_CANCEL"),
        ("async_wait", "WAIT_CANCELLATION_COMPLETED"),
        ("async_wait", "ABANDON"),
        ("quiet_wait", "TRY_CANCEL"),
        ("quiet_wait", "ABANDON"),
    ],
)
async def test_a_cancelled_run_cancels_its_step_whatever_the_activity_kind_and_cancellation_type(
    how: str, cancellation: str, stack: Stack
) -> None:
    """A thread-pool activity (cancelled by temporalio.exceptions.CancelledError in its thread) and an
    async one that never heartbeats (never hears of it), under each cancellation type: the step is
    CANCELLED with the task, and nothing says it failed (an abandoned activity that goes on learns
    from its heartbeat that Temporal no longer knows it, and reports no ending of its own)."""
    title = _title()
    handle = await stack.start(fw.Plan(OWNER, title, how, seconds=20, cancellation=cancellation))
    task_id = await stack.task_of(title)
    await stack.until(lambda: _step(stack.snapshot(task_id))["lifecycleStatus"] == "RUNNING", "the step runs")
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    snap = await stack.ended(task_id)
    if how != "quiet_wait":
        await stack.until(lambda: stack.plugin.reporter.heartbeats == {}, "the activity stopped")
    await stack.clean()
    assert snap["lifecycleStatus"] == "CANCELLED"
    assert _step(snap)["lifecycleStatus"] == "CANCELLED"
    assert stack.snapshot(task_id)["steps"] == snap["steps"]
    stack.nothing_ran_after_the_end(task_id)
    assert "STEP_FAILED" not in stack.event_kinds(task_id)  # never said it failed


@pytest.mark.parametrize("cancellation", ["TRY_CANCEL", "WAIT_CANCELLATION_COMPLETED", "ABANDON"])
async def test_a_process_pool_activity_cancelled_with_its_run_is_cancelled(
    cancellation: str,
    api: Http,
    live_api: str,
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    e2e_engine: sa.Engine,
    e2e_service: StatusService,
) -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from temporalio.worker import SharedStateManager

    title = _title()
    token = api.service_token("feature-worker", "WORKER", "COORDINATOR")
    outbox = tmp_path / "outbox.sqlite3"
    manager = multiprocessing.Manager()
    try:
        with _plugin(live_api, token, outbox) as (plugin, records), ProcessPoolExecutor(2) as processes:
            async with (
                Worker(
                    temporal_env.client,
                    task_queue=task_queue,
                    workflows=WORKFLOWS,
                    activities=[fw.sync_work],
                    activity_executor=processes,
                    shared_state_manager=SharedStateManager.create_from_multiprocessing(manager),
                    plugins=[plugin],
                ),
                _observing(e2e_service, temporal_env),
            ):
                stack = Stack(api, temporal_env, task_queue, e2e_engine, plugin, outbox, records)
                handle = await stack.start(fw.Plan(OWNER, title, "sync_wait", seconds=20, cancellation=cancellation))
                task_id = await stack.task_of(title)
                await stack.until(lambda: _step(stack.snapshot(task_id))["lifecycleStatus"] == "RUNNING", "it runs")
                await handle.cancel()
                with pytest.raises(WorkflowFailureError):
                    await handle.result()
                snap = await stack.ended(task_id)
                await stack.until(lambda: plugin.reporter.heartbeats == {}, "the activity stopped")
                await stack.clean()
    finally:
        manager.shutdown()
    assert snap["lifecycleStatus"] == "CANCELLED" and _step(snap)["lifecycleStatus"] == "CANCELLED"
    stack.nothing_ran_after_the_end(task_id)
    assert "STEP_FAILED" not in stack.event_kinds(task_id)


async def test_an_attempt_timed_out_on_its_heartbeat_is_followed_by_the_attempt_that_succeeds(stack: Stack) -> None:
    """Attempt 1 stops heartbeating; Temporal times it out and runs attempt 2, which succeeds. The
    first attempt's own late completion (it never heard) changes nothing and is absorbed quietly."""
    title = _title()
    handle = await stack.start(fw.Plan(OWNER, title, "heartbeat_lost", seconds=3))
    task_id = await handle.result()
    snap = await stack.ended(task_id)
    await stack.until(
        lambda: stack.plugin.reporter.pending_events() == 0 and stack.plugin.reporter.absorbed >= 1, "the late report"
    )
    await stack.clean()
    assert snap["lifecycleStatus"] == "SUCCEEDED"
    attempts = _attempts(stack.snapshot(task_id))
    assert attempts == [(1, "TIMED_OUT"), (2, "SUCCEEDED")], attempts
    stack.nothing_ran_after_the_end(task_id)


async def test_an_attempt_that_returns_after_temporal_timed_it_out_is_never_shown_succeeded(stack: Stack) -> None:
    """Attempt 1 heartbeats once, then works past its 2 s heartbeat timeout and returns 3 s later,
    before attempt 2 starts: Temporal has timed it out and refuses its result. The step shows the
    timeout Temporal recorded, at no moment SUCCEEDED; attempt 2 succeeds."""
    title = _title()
    handle = await stack.start(fw.Plan(OWNER, title, "returns_late", seconds=3.5))
    task_id = await stack.task_of(title)
    follow_detail(stack.api, task_id, OWNER)  # the owner has the task open: its details are written
    assert await handle.result() == task_id
    snap = await stack.ended(task_id)
    await stack.plugin.reporter.drained()
    assert snap["lifecycleStatus"] == "SUCCEEDED"
    assert _attempts(stack.snapshot(task_id)) == [(1, "TIMED_OUT"), (2, "SUCCEEDED")]
    with stack.engine.connect() as conn:
        details = [p.payload for p in publications(conn, task_id, projection="TASK_DETAIL")]
    shown = [(s["attempt"], s["lifecycleStatus"]) for d in details for s in d["state"]["steps"]]
    assert (1, "TIMED_OUT") in shown and (1, "SUCCEEDED") not in shown, shown
    stack.nothing_ran_after_the_end(task_id)


async def test_an_attempt_whose_worker_was_killed_before_it_reported_is_closed_as_lost(
    api: Http,
    live_api: str,
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    e2e_engine: sa.Engine,
    e2e_service: StatusService,
) -> None:
    """Attempt 1 runs on a worker that never reaches the status service and is killed -9 with its
    disk (its outbox gone); Temporal runs attempt 2 on another worker. Temporal's attempt number is
    the truth: attempt 2 is taken, attempt 1 is closed as lost (TIMED_OUT), nothing is refused."""
    import os
    import signal
    import subprocess
    import sys

    from temporalio.api.enums.v1 import PendingActivityState

    from tests.support.flows import create_workflow
    from tests.support.plugin_workflows import LongStepWorkflow, long_step
    from tests.support.processes import REPO_ROOT, free_port

    task_id = create_workflow(api)["tasks"][0]["taskId"]
    lost_disk = tmp_path / "lost" / "outbox.sqlite3"
    lost_disk.parent.mkdir()
    first = subprocess.Popen(
        [sys.executable, "-m", "tests.support.worker_process"],
        env={
            **os.environ,
            "TEMPORAL_ADDRESS": temporal_env.client.service_client.config.target_host,
            "TASK_QUEUE": task_queue,
            "OUTBOX": str(lost_disk),
            "STATUS_TOKEN": api.service_token("doc-worker", "WORKER", "COORDINATOR"),
            "STATUS_URL": f"http://127.0.0.1:{free_port()}",  # unreachable: attempt 1 never reports
            "PYTHONPATH": str(REPO_ROOT),
        },
        cwd=REPO_ROOT,
    )
    try:
        handle = await temporal_env.client.start_workflow(
            LongStepWorkflow.run, task_id, id=f"killed-{uuid.uuid4().hex[:8]}", task_queue=task_queue
        )

        async def attempt_one_running() -> bool:
            pending = (await handle.describe()).raw_description.pending_activities
            return any(
                p.attempt == 1 and p.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED for p in pending
            )

        await _until_async(attempt_one_running, "attempt 1 runs on the first worker")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    for leftover in lost_disk.parent.iterdir():
        leftover.unlink()  # the disk went with the worker
    token = api.service_token("doc-worker", "WORKER", "COORDINATOR")
    with _plugin(live_api, token, tmp_path / "outbox.sqlite3") as (plugin, records):
        async with Worker(
            temporal_env.client,
            task_queue=task_queue,
            workflows=[LongStepWorkflow],
            activities=[long_step],
            plugins=[plugin],
        ):
            assert await asyncio.wait_for(handle.result(), 60) == 20
            await plugin.reporter.drained()
    stack = Stack(api, temporal_env, task_queue, e2e_engine, plugin, tmp_path / "outbox.sqlite3", records)
    assert stack.undeliverable() == [] and stack.warnings() == []
    attempts = {s["attempt"]: s for s in stack.snapshot(task_id)["steps"] if s["stepId"] == "02_parse"}
    assert attempts[1]["lifecycleStatus"] == "TIMED_OUT"  # lost: it never reported
    assert attempts[2]["lifecycleStatus"] == "SUCCEEDED" and max(attempts) == 2


async def test_a_failed_step_fails_its_task_and_the_plugin_is_not_in_the_failure_temporal_records(
    stack: Stack,
) -> None:
    from temporalio.api.enums.v1 import EventType as HistoryEventType

    title = _title()
    handle = await stack.start(fw.Plan(OWNER, title, "step_fails"))
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    task_id = await stack.task_of(title)
    snap = await stack.ended(task_id)
    await stack.clean()
    assert snap["lifecycleStatus"] == "FAILED" and snap["failure"]["code"] == "UNREADABLE"
    assert _attempts(snap) == [(1, "FAILED")] and _step(snap)["error"]["code"] == "UNREADABLE"
    stack.nothing_ran_after_the_end(task_id)
    failures = [
        e.activity_task_failed_event_attributes.failure
        async for e in handle.fetch_history_events()
        if e.event_type == HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
    ]
    (failure,) = failures
    assert "in refuses" in failure.stack_trace  # the activity's own frames are there
    assert "task_status_interceptors" not in failure.stack_trace  # the plugin's are not


@pytest.mark.parametrize("how", ["local", "async_complete"])
async def test_a_step_ends_as_temporal_recorded_it_before_its_task_whoever_completed_it(how: str, stack: Stack) -> None:
    """A local activity (its report races the run's end) and an activity completed through its task
    token by someone else: the step is SUCCEEDED when the task is, never RUNNING under an ended task."""
    title = _title()
    handle = await stack.start(fw.Plan(OWNER, title, how))
    if how == "async_complete":
        assert fw.async_tokens is not None
        token = await asyncio.wait_for(fw.async_tokens.get(), 30)
        await stack.env.client.get_async_activity_handle(task_token=token).complete("done elsewhere")
    task_id = await handle.result()
    snap = await stack.ended(task_id)
    await stack.clean()
    assert snap["lifecycleStatus"] == "SUCCEEDED"
    assert _step(snap)["lifecycleStatus"] == "SUCCEEDED"
    stack.nothing_ran_after_the_end(task_id)
    assert stack.snapshot(task_id)["steps"] == snap["steps"]  # and nothing changed it afterwards


async def test_an_activity_completed_elsewhere_mid_run_ends_its_step_while_the_run_goes_on(stack: Stack) -> None:
    """Completed through its task token while the workflow still has work to do: the step ends as
    Temporal recorded it (the observer watches it once the worker let go), the task runs on."""
    title = _title()
    handle = await stack.start(fw.Plan(OWNER, title, "async_then_hold"))
    task_id = await stack.task_of(title)
    assert fw.async_tokens is not None
    token = await asyncio.wait_for(fw.async_tokens.get(), 30)
    await stack.until(lambda: _step(stack.snapshot(task_id))["lifecycleStatus"] == "RUNNING", "the step runs")
    await stack.env.client.get_async_activity_handle(task_token=token).complete("approved")
    snap = await stack.snapshot_when(
        task_id, lambda snap: _step(snap)["lifecycleStatus"] != "RUNNING", "the step ended while its run goes on"
    )
    assert snap["lifecycleStatus"] == "RUNNING" and _step(snap)["lifecycleStatus"] == "SUCCEEDED"
    assert _step(snap)["health"] == "HEALTHY"
    await stack.released_and_succeeded(handle, task_id)


# ---------------------------------------------------------------- timeouts
@pytest.mark.parametrize("timeout", ["execution_timeout", "run_timeout"])
async def test_a_workflow_timeout_times_out_a_thread_pool_step_never_failing_it(timeout: str, stack: Stack) -> None:
    title = _title()
    handle = await stack.start(fw.Plan(OWNER, title, "sync_wait", seconds=30), **{timeout: timedelta(seconds=4)})
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    task_id = await stack.task_of(title)
    snap = await stack.ended(task_id, timeout=40)
    # The activity hears of it on a heartbeat (Temporal no longer knows it): it reports no
    # ending of its own, so nothing it says contradicts the verdict.
    await stack.until(lambda: stack.plugin.reporter.heartbeats == {}, "the activity stopped")
    await stack.clean()
    assert snap["lifecycleStatus"] == "TIMED_OUT" and _step(snap)["lifecycleStatus"] == "TIMED_OUT"
    assert "STEP_FAILED" not in stack.event_kinds(task_id)
    assert stack.snapshot(task_id)["steps"] == snap["steps"]
    stack.nothing_ran_after_the_end(task_id)


# ---------------------------------------------------------------- child workflows
@pytest.mark.parametrize(("policy", "child_ends"), [("TERMINATE", "CANCELLED"), ("REQUEST_CANCEL", "CANCELLED")])
async def test_a_childs_task_follows_the_child_when_its_parent_closes(
    policy: str, child_ends: str, stack: Stack
) -> None:
    """The child owns the task it creates; its parent's close policy ends the child, and with it the task."""
    title = _title()
    parent = await stack.start(fw.Family(OWNER, title, policy), workflow=fw.ParentWorkflow.run)
    child_task = await stack.task_of(f"{title}-child")
    await stack.until(lambda: _step(stack.snapshot(child_task))["lifecycleStatus"] == "SUCCEEDED", "its step ended")
    await parent.signal(fw.ParentWorkflow.release)
    child_id = await parent.result()
    child = stack.env.client.get_workflow_handle(child_id)
    with pytest.raises(WorkflowFailureError):
        await child.result()
    snap = await stack.ended(child_task)
    await stack.clean()
    assert snap["lifecycleStatus"] == child_ends
    assert _attempts(snap) == [(1, "SUCCEEDED")]
    stack.nothing_ran_after_the_end(child_task)


async def test_an_abandoned_childs_task_goes_on_after_its_parent_and_ends_with_the_child(stack: Stack) -> None:
    title = _title()
    parent = await stack.start(fw.Family(OWNER, title, "ABANDON"), workflow=fw.ParentWorkflow.run)
    child_task = await stack.task_of(f"{title}-child")
    await stack.until(lambda: _step(stack.snapshot(child_task))["lifecycleStatus"] == "SUCCEEDED", "its step ended")
    await parent.signal(fw.ParentWorkflow.release)
    child = stack.env.client.get_workflow_handle(await parent.result())
    follower_rounds = 3  # the parent's close is read by the follower: the child's task stays open
    for _ in range(follower_rounds):
        await asyncio.sleep(LoopConfig().run_follow_interval)
    assert stack.snapshot(child_task)["lifecycleStatus"] == "RUNNING"
    await child.signal(fw.FeatureWorkflow.release)
    await child.result()
    snap = await stack.ended(child_task)
    await stack.clean()
    assert snap["lifecycleStatus"] == "SUCCEEDED"
    stack.nothing_ran_after_the_end(child_task)


@pytest.mark.parametrize(("child_fails", "ends"), [(False, "SUCCEEDED"), (True, "FAILED")])
async def test_a_task_handed_to_a_child_is_ended_by_the_childs_verdict(
    child_fails: bool, ends: str, stack: Stack
) -> None:
    title = _title()
    parent = await stack.start(
        fw.Family(OWNER, title, "TERMINATE", hand_over=True, child_fails=child_fails), workflow=fw.ParentWorkflow.run
    )
    if child_fails:
        with pytest.raises(WorkflowFailureError):
            await parent.result()
    else:
        await parent.result()
    task_id = await stack.task_of(title)
    snap = await stack.ended(task_id)
    await stack.clean()
    assert snap["lifecycleStatus"] == ends
    if child_fails:
        assert snap["failure"]["code"] == "CHILD_FAILED"
    assert _attempts(snap) == [(1, "SUCCEEDED")]
    stack.nothing_ran_after_the_end(task_id)


# ---------------------------------------------------------------- messages during a run
async def test_signals_queries_and_updates_during_a_run_change_nothing_but_what_they_do(stack: Stack) -> None:
    title = _title()
    handle = await stack.start(fw.Plan(OWNER, title, "hold"))
    task_id = await stack.task_of(title)
    await stack.until(lambda: _step(stack.snapshot(task_id))["lifecycleStatus"] == "SUCCEEDED", "the step ended")
    assert await handle.execute_update(fw.FeatureWorkflow.bump, 2) == 2
    assert await handle.query(fw.FeatureWorkflow.bumped) == 2
    assert stack.snapshot(task_id)["lifecycleStatus"] == "RUNNING"
    await stack.released_and_succeeded(handle, task_id)


async def test_update_with_start_starts_the_work_and_its_task(stack: Stack) -> None:
    from temporalio.client import WithStartWorkflowOperation
    from temporalio.common import WorkflowIDConflictPolicy

    title = _title()
    start = WithStartWorkflowOperation(
        fw.FeatureWorkflow.run,
        fw.Plan(OWNER, title, "hold"),
        id=f"update-start-{title}",
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        task_queue=stack.queue,
    )
    assert (
        await stack.env.client.execute_update_with_start_workflow(
            fw.FeatureWorkflow.bump, 1, start_workflow_operation=start
        )
        == 1
    )
    handle = await start.workflow_handle()
    task_id = await stack.task_of(title)
    await stack.released_and_succeeded(handle, task_id)


# ---------------------------------------------------------------- a stuck run
async def test_a_run_whose_workflow_task_keeps_failing_shows_stuck_and_recovers_when_it_moves_again(
    stack: Stack,
) -> None:
    """A bug in workflow code (a deploy): the run is open in Temporal but its workflow task fails
    on every retry. Its task says so (health STALE, stuckSince, a WARNING notice), its lifecycle
    stays as confirmed; fixed, the run moves on and the task is healthy again."""
    from tests.support import stuck_switch

    title = _title()
    stuck_switch.broken = True
    try:
        handle = await stack.start(fw.Plan(OWNER, title, "stuck"))
        task_id = await stack.task_of(title)
        stuck = await stack.snapshot_when(task_id, lambda snap: snap["stuckSince"], "the task shows stuck", 60)
        assert (stuck["lifecycleStatus"], stuck["health"]) == ("RUNNING", "STALE")
        assert _attempts(stuck) == [(1, "SUCCEEDED")]
    finally:
        stuck_switch.broken = False  # the fix is deployed
    moving = await stack.snapshot_when(task_id, lambda snap: snap["stuckSince"] is None, "the run moves again", 90)
    assert (moving["lifecycleStatus"], moving["health"]) == ("RUNNING", "HEALTHY")
    kinds = stack.event_kinds(task_id)
    assert kinds.count("TASK_HEALTH_CHANGED") == 2  # stuck once, recovered once
    notices = _notices(stack, task_id)
    assert ("WORKFLOW_STUCK", "WARNING", "The workflow is stuck; operators are told.") in notices
    await stack.released_and_succeeded(handle, task_id)


def _notices(stack: Stack, task_id: str) -> list[tuple[str, str, str | None]]:
    """The notices the task's summaries carried (type, level, message), oldest first."""
    with stack.engine.connect() as conn:
        payloads = [p.payload for p in publications(conn, task_id, projection="USER_SUMMARY")]
    return [(n["type"], n["level"], n.get("message")) for p in payloads if (n := p.get("notice"))]
