"""Every way Temporal runs work, the task tells it truly (issue 28): one case per feature.

Real Temporal dev server, the status service on MariaDB, the plugin on a real worker and the
observer's run follower on its shipped interval. Each case asserts the task's final lifecycle,
each step's final state, that no step runs after its run closed, and that routine endings leave
no undeliverable report and no WARNING from the plugin.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from task_status_interceptors import TaskStatusPlugin
from task_status_interceptors._outbox import read_undeliverable
from temporalio.client import WorkflowFailureError
from temporalio.common import RetryPolicy, WorkflowIDReusePolicy
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from status.app.service import StatusService
from tests.e2e.test_run_verdicts import OWNER, _ended, _events, _eventually, _following, _snapshot
from tests.integration.conftest import Http
from tests.support import feature_workflows as fw

pytestmark = [pytest.mark.temporal, pytest.mark.mariadb]
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"}


class _Worker:
    def __init__(self, plugin: TaskStatusPlugin, outbox: Path, records: list[logging.LogRecord]) -> None:
        self.plugin, self.outbox, self.records = plugin, outbox, records

    def undeliverable(self) -> list[dict[str, Any]]:
        return read_undeliverable(self.outbox)

    def warnings(self) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno >= logging.WARNING]


class _Collect(logging.Handler):
    def __init__(self, records: list[logging.LogRecord]) -> None:
        super().__init__(logging.DEBUG)
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@asynccontextmanager
async def _worker(api: Http, url: str, env: WorkflowEnvironment, queue: str, tmp_path: Path) -> AsyncIterator[_Worker]:
    token = api.service_token("feature-worker", "WORKER", "COORDINATOR")
    outbox = tmp_path / "outbox.sqlite3"
    plugin = TaskStatusPlugin(url, token, outbox_path=outbox, heartbeat_interval=0.2)
    records: list[logging.LogRecord] = []
    handler = _Collect(records)
    logger = logging.getLogger("task_status_interceptors")
    logger.addHandler(handler)
    fw.async_tokens = asyncio.Queue()
    try:
        with ThreadPoolExecutor(4) as pool:
            async with Worker(
                env.client,
                task_queue=queue,
                workflows=[fw.FeatureWorkflow],
                activities=[fw.quick, fw.sync_work, fw.quiet_work, fw.completed_later],
                activity_executor=pool,
                plugins=[plugin],
            ):
                yield _Worker(plugin, outbox, records)
    finally:
        logger.removeHandler(handler)


def _tasks_titled(api: Http, title: str) -> list[dict[str, Any]]:
    listed = api.client.get("/api/me/tasks", headers=api.user(OWNER)).json()["tasks"]
    return [task for task in listed if task["title"] == title]


def _step(snap: dict[str, Any]) -> dict[str, Any]:
    """The step's newest attempt (what the card shows)."""
    return max((s for s in snap["steps"] if s["stepId"] == "01_work"), key=lambda s: s["attempt"])


def _nothing_ran_after_the_end(engine: sa.Engine, task_id: str) -> None:
    """No step event was applied after the task's terminal event: no step ran after its run closed."""
    events = _events(engine, task_id)
    ends = [v for v, kind, _ in events if kind in ("TASK_COMPLETED", "TASK_FAILED", "TASK_CANCELLED", "TASK_TIMED_OUT")]
    assert len(ends) == 1, events
    assert [kind for v, kind, _ in events if v > ends[0]] == [], events


async def _clean(worker: _Worker) -> None:
    """Routine endings: everything delivered, nothing kept as undeliverable, nothing warned."""
    await worker.plugin.reporter.drained()
    assert worker.undeliverable() == []
    assert worker.warnings() == []


def _title() -> str:
    return f"feature-{uuid.uuid4().hex[:8]}"


async def test_a_workflow_retried_by_its_retry_policy_ends_with_the_attempt_that_completes(
    api: Http,
    live_api: str,
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    e2e_engine: sa.Engine,
    e2e_service: StatusService,
) -> None:
    title = _title()
    async with (
        _worker(api, live_api, temporal_env, task_queue, tmp_path) as worker,
        _following(e2e_service, temporal_env),
    ):
        handle = await temporal_env.client.start_workflow(
            fw.FeatureWorkflow.run,
            fw.Plan(OWNER, title, "fail_first"),
            id=f"retried-{title}",
            task_queue=task_queue,
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=3),
        )
        task_id = await handle.result()
        snap = await _eventually(lambda: _ended(api, task_id), "the task ended")
        await _clean(worker)
    assert [t["taskId"] for t in _tasks_titled(api, title)] == [task_id]  # one piece of work, one task
    assert snap["lifecycleStatus"] == "SUCCEEDED"
    # The step ran once per workflow attempt: the second run's activity is the step's attempt 2.
    attempts = sorted((s["attempt"], s["lifecycleStatus"]) for s in snap["steps"] if s["stepId"] == "01_work")
    assert attempts == [(1, "SUCCEEDED"), (2, "SUCCEEDED")]
    _nothing_ran_after_the_end(e2e_engine, task_id)


async def test_a_workflow_that_fails_every_attempt_fails_its_task_once_the_last_attempt_fails(
    api: Http,
    live_api: str,
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    e2e_engine: sa.Engine,
    e2e_service: StatusService,
) -> None:
    title = _title()
    async with (
        _worker(api, live_api, temporal_env, task_queue, tmp_path) as worker,
        _following(e2e_service, temporal_env),
    ):
        handle = await temporal_env.client.start_workflow(
            fw.FeatureWorkflow.run,
            fw.Plan(OWNER, title, "fail_always"),
            id=f"failing-{title}",
            task_queue=task_queue,
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=2),
        )
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        (task,) = await _eventually(lambda: _tasks_titled(api, title), "the task exists")
        snap = await _eventually(lambda: _ended(api, task["taskId"]), "the task ended")
        await _clean(worker)
    assert snap["lifecycleStatus"] == "FAILED" and snap["failure"]["code"] == "DEPENDENCY_DOWN"
    assert _step(snap)["attempt"] == 2 and _step(snap)["lifecycleStatus"] == "SUCCEEDED"
    # Ended once, by the last attempt (the first attempt's failure ended nothing).
    _nothing_ran_after_the_end(e2e_engine, task["taskId"])


async def test_each_cron_run_is_new_work_with_a_task_of_its_own(
    api: Http,
    live_api: str,
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    e2e_engine: sa.Engine,
    e2e_service: StatusService,
) -> None:
    title = _title()
    async with (
        _worker(api, live_api, temporal_env, task_queue, tmp_path) as worker,
        _following(e2e_service, temporal_env),
    ):
        handle = await temporal_env.client.start_workflow(
            fw.FeatureWorkflow.run,
            fw.Plan(OWNER, title, "plain"),
            id=f"cron-{title}",
            task_queue=task_queue,
            cron_schedule="@every 2s",
        )

        def three_ended() -> list[dict[str, Any]] | None:
            tasks = _tasks_titled(api, title)
            done = [t for t in tasks if t["lifecycleStatus"] in TERMINAL]
            return tasks if len(done) >= 3 else None

        tasks = await _eventually(three_ended, "three cron runs ended their tasks", timeout=60)
        await handle.terminate("enough runs")
        await _clean(worker)
    ended = [t for t in tasks if t["lifecycleStatus"] in TERMINAL]
    assert {t["lifecycleStatus"] for t in ended} == {"SUCCEEDED"}
    assert len({t["taskId"] for t in ended}) == len(ended)
    for task in ended:
        snap = _snapshot(api, task["taskId"])
        assert _step(snap)["lifecycleStatus"] == "SUCCEEDED" and _step(snap)["attempt"] == 1
        _nothing_ran_after_the_end(e2e_engine, task["taskId"])


async def test_a_workflow_id_run_again_after_its_chain_closed_is_new_work(
    api: Http,
    live_api: str,
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    e2e_engine: sa.Engine,
    e2e_service: StatusService,
) -> None:
    title = _title()
    ids = []
    async with (
        _worker(api, live_api, temporal_env, task_queue, tmp_path) as worker,
        _following(e2e_service, temporal_env),
    ):
        for _ in range(2):
            ids.append(
                await temporal_env.client.execute_workflow(
                    fw.FeatureWorkflow.run,
                    fw.Plan(OWNER, title, "plain"),
                    id=f"fixed-{title}",  # as the SDK's samples do
                    task_queue=task_queue,
                    id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                )
            )
        for task_id in ids:
            await _eventually(lambda task_id=task_id: _ended(api, task_id), "the task ended")
        await _clean(worker)
    assert len(set(ids)) == 2
    for task_id in ids:
        snap = _snapshot(api, task_id)
        assert snap["lifecycleStatus"] == "SUCCEEDED" and _step(snap)["lifecycleStatus"] == "SUCCEEDED"
        _nothing_ran_after_the_end(e2e_engine, task_id)


@pytest.mark.parametrize("how", ["sync_wait", "quiet_wait"])
async def test_a_cancelled_run_cancels_its_step_whatever_the_activity_kind(
    how: str,
    api: Http,
    live_api: str,
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    e2e_engine: sa.Engine,
    e2e_service: StatusService,
) -> None:
    """A thread-pool activity (cancelled by temporalio.exceptions.CancelledError in its thread) and an
    async one that never heartbeats (never hears of it): the step is CANCELLED with the task, in the
    same version, and nothing says it failed."""
    title = _title()
    async with (
        _worker(api, live_api, temporal_env, task_queue, tmp_path) as worker,
        _following(e2e_service, temporal_env),
    ):
        handle = await temporal_env.client.start_workflow(
            fw.FeatureWorkflow.run, fw.Plan(OWNER, title, how, seconds=20), id=f"cancel-{title}", task_queue=task_queue
        )
        (task,) = await _eventually(lambda: _tasks_titled(api, title), "the task exists")
        task_id = task["taskId"]
        await _eventually(lambda: _step(_snapshot(api, task_id))["lifecycleStatus"] == "RUNNING", "the step runs")
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        snap = await _eventually(lambda: _ended(api, task_id), "the task ended")
        await _clean(worker)
    assert snap["lifecycleStatus"] == "CANCELLED"
    assert _step(snap)["lifecycleStatus"] == "CANCELLED"
    _nothing_ran_after_the_end(e2e_engine, task_id)
    assert "STEP_FAILED" not in [kind for _, kind, _ in _events(e2e_engine, task_id)]  # never said it failed


@pytest.mark.parametrize("how", ["local", "async_complete"])
async def test_a_step_ends_as_temporal_recorded_it_before_its_task_whoever_completed_it(
    how: str,
    api: Http,
    live_api: str,
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    e2e_engine: sa.Engine,
    e2e_service: StatusService,
) -> None:
    """A local activity (its report races the run's end) and an activity completed through its task
    token by someone else: the step is SUCCEEDED when the task is, never RUNNING under an ended task."""
    title = _title()
    async with (
        _worker(api, live_api, temporal_env, task_queue, tmp_path) as worker,
        _following(e2e_service, temporal_env),
    ):
        handle = await temporal_env.client.start_workflow(
            fw.FeatureWorkflow.run, fw.Plan(OWNER, title, how), id=f"ends-{title}", task_queue=task_queue
        )
        if how == "async_complete":
            assert fw.async_tokens is not None
            token = await asyncio.wait_for(fw.async_tokens.get(), 30)
            await temporal_env.client.get_async_activity_handle(task_token=token).complete("done elsewhere")
        task_id = await handle.result()
        snap = await _eventually(lambda: _ended(api, task_id), "the task ended")
        await _clean(worker)
    assert snap["lifecycleStatus"] == "SUCCEEDED"
    assert _step(snap)["lifecycleStatus"] == "SUCCEEDED"
    _nothing_ran_after_the_end(e2e_engine, task_id)
    assert _snapshot(api, task_id)["steps"] == snap["steps"]  # and nothing changed it afterwards


async def test_an_execution_timeout_times_out_a_thread_pool_step_never_failing_it(
    api: Http,
    live_api: str,
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    e2e_engine: sa.Engine,
    e2e_service: StatusService,
) -> None:
    title = _title()
    async with (
        _worker(api, live_api, temporal_env, task_queue, tmp_path) as worker,
        _following(e2e_service, temporal_env),
    ):
        handle = await temporal_env.client.start_workflow(
            fw.FeatureWorkflow.run,
            fw.Plan(OWNER, title, "sync_wait", seconds=30),
            id=f"timeout-{title}",
            task_queue=task_queue,
            execution_timeout=timedelta(seconds=4),
        )
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        (task,) = await _eventually(lambda: _tasks_titled(api, title), "the task exists")
        snap = await _eventually(lambda: _ended(api, task["taskId"]), "the task ended", timeout=40)
        # The activity hears of it on a heartbeat (Temporal no longer knows it): it reports no
        # ending of its own, so nothing it says contradicts the verdict.
        await _eventually(lambda: worker.plugin.reporter.heartbeats == {}, "the activity stopped")
        await _clean(worker)
    assert snap["lifecycleStatus"] == "TIMED_OUT" and _step(snap)["lifecycleStatus"] == "TIMED_OUT"
    assert "STEP_FAILED" not in [kind for _, kind, _ in _events(e2e_engine, task["taskId"])]
    assert _snapshot(api, task["taskId"])["steps"] == snap["steps"]
    _nothing_ran_after_the_end(e2e_engine, task["taskId"])
