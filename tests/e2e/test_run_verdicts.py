"""Temporal's verdict is the task's verdict: tasks end when their runs end, however they end.

Real Temporal dev server, real status service on MariaDB, the plugin on a real worker, and the
observer's run follower on its shipped interval. Each test ends a run one way and waits for the
task to reach the terminal state Temporal's record implies, with no step left RUNNING.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from task_status_interceptors import TaskStatusPlugin
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

from observer import metrics
from observer.loops import LoopConfig
from observer.runs import RunFollower
from status.app.service import StatusService
from status.infra import tables as t
from status.infra.uow import SqlDatabase
from tests.integration.conftest import Http
from tests.support.outbox import publications
from tests.support.verdict_workflows import Ending, EndingWorkflow, work

pytestmark = [pytest.mark.temporal, pytest.mark.mariadb]
OWNER = "user-1"


def _snapshot(api: Http, task_id: str) -> dict[str, Any]:
    return dict(api.client.get(f"/api/tasks/{task_id}", headers=api.user(OWNER)).json())


def _task_titled(api: Http, title: str) -> dict[str, Any] | None:
    listed = api.client.get("/api/me/tasks", headers=api.user(OWNER)).json()["tasks"]
    return next((task for task in listed if task["title"] == title), None)


async def _eventually(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """The first truthy value of ``check`` (polled: a row committed by another process has no event here)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await asyncio.to_thread(check)
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"{what}: not after {timeout} s")
        await asyncio.sleep(0.1)


def _ended(api: Http, task_id: str) -> dict[str, Any] | None:
    snap = _snapshot(api, task_id)
    return snap if snap["lifecycleStatus"] in {"SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"} else None


def _events(engine: sa.Engine, task_id: str) -> list[tuple[int, str, str]]:
    log = t.task_event_log
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(log.c.task_version, log.c.event_type, log.c.producer_id)
            .where(log.c.task_id == task_id)
            .order_by(log.c.task_version)
        ).all()
    return [(int(v), kind, producer) for v, kind, producer in rows]


@asynccontextmanager
async def _following(
    service: StatusService, env: WorkflowEnvironment, copies: int = 1
) -> AsyncIterator[list[RunFollower]]:
    """Run followers as the observer runs them (the shipped interval) while the block runs."""

    async def connect(namespace: str) -> Any:
        return env.client

    followers = [RunFollower(service, connect, ["default"]) for _ in range(copies)]
    stop = asyncio.Event()

    async def loop(follower: RunFollower) -> None:
        while not stop.is_set():
            await follower.run_once()
            with suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), LoopConfig().run_follow_interval)

    running = [asyncio.create_task(loop(f)) for f in followers]
    try:
        yield followers
    finally:
        stop.set()
        await asyncio.gather(*running)


@asynccontextmanager
async def _worker(
    api: Http, url: str, env: WorkflowEnvironment, queue: str, tmp_path: Path
) -> AsyncIterator[TaskStatusPlugin]:
    token = api.service_token("verdict-worker", "WORKER", "COORDINATOR")
    plugin = TaskStatusPlugin(url, token, outbox_path=tmp_path / "outbox.sqlite3", heartbeat_interval=0.2)
    async with Worker(env.client, task_queue=queue, workflows=[EndingWorkflow], activities=[work], plugins=[plugin]):
        yield plugin


async def _start_waiting(
    env: WorkflowEnvironment, queue: str, api: Http, **timeouts: timedelta
) -> tuple[WorkflowHandle[Any, Any], str]:
    """A run whose step is RUNNING (its activity works for minutes): its handle and task id."""
    title = f"job-{uuid.uuid4().hex[:8]}"
    handle = await env.client.start_workflow(
        EndingWorkflow.run,
        Ending(OWNER, title, "wait", work_seconds=600),
        id=f"verdict-{title}",
        task_queue=queue,
        **timeouts,
    )
    task = await _eventually(lambda: _task_titled(api, title), "the task was created")

    def step_running() -> bool:
        steps = _snapshot(api, task["taskId"])["steps"]
        return any(s["stepId"] == "01_work" and s["lifecycleStatus"] == "RUNNING" for s in steps)

    await _eventually(step_running, "the step runs")
    return handle, str(task["taskId"])


def _no_step_running(snap: dict[str, Any]) -> bool:
    return all(s["lifecycleStatus"] != "RUNNING" for s in snap["steps"])


async def test_a_terminated_run_stops_its_task_with_the_operators_reason(
    api: Http,
    live_api: str,
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    e2e_service: StatusService,
    e2e_engine: sa.Engine,
) -> None:
    ended_late = metrics.REGISTRY.get_sample_value("run_close_to_task_end_seconds_count") or 0
    async with _worker(api, live_api, temporal_env, task_queue, tmp_path), _following(e2e_service, temporal_env):
        handle, task_id = await _start_waiting(temporal_env, task_queue, api)
        await handle.terminate(reason="maintenance window")
        snap = await _eventually(lambda: _ended(api, task_id), "the terminated run's task ended")
    # The run-end objective's measure (docs/slo.md): from the run's close to the task's end.
    assert metrics.REGISTRY.get_sample_value("run_close_to_task_end_seconds_count") == ended_late + 1
    assert snap["lifecycleStatus"] == "CANCELLED"
    assert _no_step_running(snap)
    assert [s["lifecycleStatus"] for s in snap["steps"] if s["stepId"] == "01_work"] == ["CANCELLED"]
    # The timeline says who ended it: Temporal's verdict, not the worker or the coordinator.
    last = _events(e2e_engine, task_id)[-1]
    assert last[1:] == ("TASK_CANCELLED", "temporal/verdict")
    notice = _last_notice(e2e_engine, task_id)
    assert notice["type"] == "TASK_CANCELLED" and notice["message"] == "Stopped by an operator: maintenance window"


def _last_notice(engine: sa.Engine, task_id: str) -> dict[str, Any]:
    with engine.connect() as conn:
        payloads = [p.payload for p in publications(conn, task_id) if p.channel.startswith("task_user:")]
    notices = [p["notice"] for p in payloads if isinstance(p, dict) and p.get("notice")]
    assert notices, "no notice was published"
    return dict(notices[-1])


@pytest.mark.parametrize("timeout", ["execution_timeout", "run_timeout"])
async def test_a_run_that_times_out_times_out_its_task_and_its_step(
    timeout: str,
    api: Http,
    live_api: str,
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    e2e_service: StatusService,
) -> None:
    async with _worker(api, live_api, temporal_env, task_queue, tmp_path), _following(e2e_service, temporal_env):
        _, task_id = await _start_waiting(temporal_env, task_queue, api, **{timeout: timedelta(seconds=4)})
        snap = await _eventually(lambda: _ended(api, task_id), "the timed-out run's task ended", timeout=40)
    assert snap["lifecycleStatus"] == "TIMED_OUT"
    assert [s["lifecycleStatus"] for s in snap["steps"] if s["stepId"] == "01_work"] == ["TIMED_OUT"]


async def test_a_cancelled_run_that_does_not_handle_it_cancels_its_task(
    api: Http, live_api: str, temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, e2e_engine: sa.Engine
) -> None:
    async with _worker(api, live_api, temporal_env, task_queue, tmp_path) as plugin:
        handle, task_id = await _start_waiting(temporal_env, task_queue, api)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        snap = await _eventually(lambda: _ended(api, task_id), "the cancelled run's task ended")
        await plugin.reporter.drained()
    assert snap["lifecycleStatus"] == "CANCELLED"
    # The run's own code ended it (the plugin, as the coordinator), before the run closed.
    assert ("TASK_CANCELLED", "verdict-worker") in [(k, p) for _, k, p in _events(e2e_engine, task_id)]
    steps = _snapshot(api, task_id)["steps"]
    assert [s["lifecycleStatus"] for s in steps if s["stepId"] == "01_work"] == ["CANCELLED"]  # its activity saw it


@pytest.mark.parametrize(("how", "expected"), [("return", "SUCCEEDED"), ("raise", "FAILED"), ("continue", "SUCCEEDED")])
async def test_a_run_that_ends_without_ending_its_task_ends_it(
    how: str,
    expected: str,
    api: Http,
    live_api: str,
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    e2e_service: StatusService,
) -> None:
    """No complete_task/fail_task in the workflow: its return, its exception, or the end of its
    continue-as-new chain (whose second run never touches the task) ends the task."""
    title = f"job-{uuid.uuid4().hex[:8]}"
    async with _worker(api, live_api, temporal_env, task_queue, tmp_path), _following(e2e_service, temporal_env):
        handle = await temporal_env.client.start_workflow(
            EndingWorkflow.run, Ending(OWNER, title, how), id=f"verdict-{title}", task_queue=task_queue
        )
        try:
            await handle.result()
        except WorkflowFailureError:
            assert how == "raise"
        task = await _eventually(lambda: _task_titled(api, title), "the task exists")
        snap = await _eventually(lambda: _ended(api, task["taskId"]), "the task ended")
    assert snap["lifecycleStatus"] == expected
    assert _no_step_running(snap)
    if how == "raise":
        assert snap["failure"]["code"] == "INPUT_REFUSED" and snap["failure"]["userMessage"] == "The work failed."


async def test_a_run_that_ends_its_task_itself_gets_no_extra_version(
    api: Http,
    live_api: str,
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    e2e_service: StatusService,
    e2e_engine: sa.Engine,
) -> None:
    title = f"job-{uuid.uuid4().hex[:8]}"
    async with (
        _worker(api, live_api, temporal_env, task_queue, tmp_path),
        _following(e2e_service, temporal_env) as followers,
    ):
        handle = await temporal_env.client.start_workflow(
            EndingWorkflow.run, Ending(OWNER, title, "self"), id=f"verdict-{title}", task_queue=task_queue
        )
        task_id = await handle.result()
        # The follower has looked at the closed run at least twice since it closed.
        seen = followers[0].rpcs
        await _eventually(lambda: followers[0].rpcs >= seen + 2, "two more follower passes")
    events = _events(e2e_engine, task_id)
    assert [kind for _, kind, _ in events].count("TASK_COMPLETED") == 1
    assert all(producer != "temporal/verdict" for *_, producer in events)


async def test_two_observers_write_each_ending_once(
    api: Http,
    live_api: str,
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    e2e_service: StatusService,
    e2e_engine: sa.Engine,
) -> None:
    async with _worker(api, live_api, temporal_env, task_queue, tmp_path):
        handle, task_id = await _start_waiting(temporal_env, task_queue, api)
        before = _snapshot(api, task_id)["taskVersion"]
        await handle.terminate(reason="twice")
        async with _following(e2e_service, temporal_env, copies=2):
            await _eventually(lambda: _ended(api, task_id), "the task ended")
        # Both followers have looked again since: the second one changed nothing.
        async with _following(e2e_service, temporal_env, copies=2) as again:
            await _eventually(lambda: all(f.rpcs > 0 for f in again), "both looked again")
    events = _events(e2e_engine, task_id)
    assert [kind for _, kind, _ in events].count("TASK_CANCELLED") == 1
    # One version for the task's end (its step ended in the same version).
    assert int(_snapshot(api, task_id)["taskVersion"]) == int(before) + 1


async def test_a_run_ended_by_the_plugin_replays_deterministically_with_it(
    api: Http, live_api: str, temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """The endings the plugin schedules follow the run's outcome only: a replay schedules the same."""
    title = f"job-{uuid.uuid4().hex[:8]}"
    async with _worker(api, live_api, temporal_env, task_queue, tmp_path):
        for how in ("return", "raise"):
            handle = await temporal_env.client.start_workflow(
                EndingWorkflow.run,
                Ending(OWNER, f"{title}-{how}", how),
                id=f"replay-{title}-{how}",
                task_queue=task_queue,
            )
            with suppress(WorkflowFailureError):
                await handle.result()
            history = await handle.fetch_history()
            token = api.service_token("verdict-worker", "WORKER", "COORDINATOR")
            replay_plugin = TaskStatusPlugin(live_api, token, outbox_path=tmp_path / f"replay-{how}.sqlite3")
            await Replayer(workflows=[EndingWorkflow], plugins=[replay_plugin]).replay_workflow(history)


async def test_stale_asks_temporal_and_repairs_a_completion_whose_report_was_lost(
    api: Http, temporal_env: WorkflowEnvironment, task_queue: str, e2e_service: StatusService
) -> None:
    """Two silent attempts: Temporal says the first activity completed (its report was lost with
    the worker's disk), the second still runs. The first ends SUCCEEDED, only the second goes STALE."""
    from observer.activities import ActivityProbe
    from tests.support.flows import create_workflow, report
    from tests.support.verdict_workflows import QuickThenLongWorkflow

    async with Worker(temporal_env.client, task_queue=task_queue, workflows=[QuickThenLongWorkflow], activities=[work]):
        handle = await temporal_env.client.start_workflow(
            QuickThenLongWorkflow.run, id=f"lost-{uuid.uuid4().hex[:8]}", task_queue=task_queue
        )

        async def second_running() -> bool:
            pending = (await handle.describe()).raw_description.pending_activities
            return any(p.activity_id == "2" for p in pending)

        deadline = asyncio.get_running_loop().time() + 30
        while not await second_running():
            assert asyncio.get_running_loop().time() < deadline, "activity 2 never started"
            await asyncio.sleep(0.1)
        task_id = create_workflow(api)["tasks"][0]["taskId"]
        contexts = {}
        for step_id, activity_id in (("01_prepare", "1"), ("02_parse", "2")):
            response = api.client.post(
                f"/internal/v1/tasks/{task_id}/steps/{step_id}:activate",
                json={
                    "attempt": 1,
                    "producerId": "lost-worker",
                    "heartbeatIntervalSeconds": 5,
                    "heartbeatTimeoutSeconds": 20,
                    "temporalActivity": {
                        "namespace": temporal_env.client.namespace,
                        "workflowId": handle.id,
                        "runId": handle.result_run_id,
                        "activityId": activity_id,
                    },
                },
                headers=api.coordinator,
            )
            assert response.status_code == 201, response.text
            contexts[step_id] = response.json()
            assert report(api, contexts[step_id], "STEP_STARTED", 1).status_code == 200

        async def connect(namespace: str) -> Any:
            return temporal_env.client

        probe = ActivityProbe(connect)
        probe.bind(asyncio.get_running_loop())
        base = e2e_service.now()
        later = StatusService(
            SqlDatabase(e2e_service.db.engine),
            execution_tokens=e2e_service._tokens,
            validator=e2e_service._validator,
            clock=lambda: base + timedelta(seconds=60),
        )  # both attempts are past their heartbeat deadline
        scope = (api.tenant, "content")
        await asyncio.to_thread(later.mark_stale, tenant_scope=scope, limit=100_000, ask=probe.ask)
        await handle.terminate(reason="test over")
    steps = {s["stepId"]: s for s in _snapshot(api, task_id)["steps"]}
    assert (steps["01_prepare"]["lifecycleStatus"], steps["01_prepare"]["health"]) == ("SUCCEEDED", "HEALTHY")
    assert (steps["02_parse"]["lifecycleStatus"], steps["02_parse"]["health"]) == ("RUNNING", "STALE")
    assert probe.rpcs == 2  # one describe and one history read for the one run


async def test_a_reset_run_hands_its_task_to_the_run_that_replaces_it(
    api: Http,
    live_api: str,
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    e2e_service: StatusService,
    e2e_engine: sa.Engine,
) -> None:
    """A reset terminates the run and starts its replacement: the task goes on with the new run,
    and ends when that one ends."""
    from temporalio.api.common.v1 import WorkflowExecution
    from temporalio.api.enums.v1 import EventType as HistoryEventType
    from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest

    async with (
        _worker(api, live_api, temporal_env, task_queue, tmp_path),
        _following(e2e_service, temporal_env) as followers,
    ):
        handle, task_id = await _start_waiting(temporal_env, task_queue, api)
        completed = [
            e.event_id
            async for e in handle.fetch_history_events()
            if e.event_type == HistoryEventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
        ]
        first_task_done = completed[0]
        reset = await temporal_env.client.workflow_service.reset_workflow_execution(
            ResetWorkflowExecutionRequest(
                namespace=temporal_env.client.namespace,
                workflow_execution=WorkflowExecution(workflow_id=handle.id, run_id=handle.result_run_id),
                reason="replay from the start",
                workflow_task_finish_event_id=first_task_done,
                request_id=str(uuid.uuid4()),
            )
        )

        def owned_by_new_run() -> bool:
            with e2e_engine.connect() as conn:
                run = conn.execute(sa.select(t.task.c.temporal_run_id).where(t.task.c.id == task_id)).scalar_one()
            return run == reset.run_id

        await _eventually(owned_by_new_run, "the new run owns the task")
        # The old run's close (TERMINATED by the reset) is seen by the follower several times over:
        # the task goes on.
        seen = followers[0].passes
        await _eventually(lambda: followers[0].passes >= seen + 3, "three more follower passes")
        assert _snapshot(api, task_id)["lifecycleStatus"] == "RUNNING"
        await temporal_env.client.get_workflow_handle(handle.id, run_id=reset.run_id).terminate(reason="done")
        snap = await _eventually(lambda: _ended(api, task_id), "the new run's end ended the task")
    assert snap["lifecycleStatus"] == "CANCELLED"


async def test_temporal_down_changes_nothing_and_the_follower_catches_up_when_it_is_back(
    api: Http, live_api: str, tmp_path: Path, e2e_service: StatusService
) -> None:
    """A Temporal server of its own, stopped for real after a run was terminated: the follower's
    passes fail, the task stays as it is (nothing is guessed); the same server back (same port,
    same database file) and the follower ends the task from the watermark it kept."""
    from tests.support.processes import TEMPORAL_STARTUP, free_port, temporal_binary

    port = free_port()
    database = tmp_path / "temporal.sqlite3"

    async def start() -> WorkflowEnvironment:
        return await WorkflowEnvironment.start_local(
            dev_server_existing_path=str(temporal_binary()),
            dev_server_startup_timeout=TEMPORAL_STARTUP,
            dev_server_log_level="warn",
            port=port,
            dev_server_extra_args=["--db-filename", str(database)],
        )

    env = await start()
    queue = f"tq-{uuid.uuid4().hex}"
    try:
        async with _worker(api, live_api, env, queue, tmp_path):
            handle, task_id = await _start_waiting(env, queue, api)
            await handle.terminate(reason="while Temporal goes away")
    finally:
        await env.shutdown()
    follower = RunFollower(e2e_service, lambda namespace: _connect(port), ["default"])
    for _ in range(3):
        with pytest.raises(Exception):  # noqa: B017 - whatever the client raises for a server that is gone
            await follower.run_once()
    assert _snapshot(api, task_id)["lifecycleStatus"] == "RUNNING"  # nothing guessed
    env = await start()
    try:
        async with _following(e2e_service, env):
            snap = await _eventually(lambda: _ended(api, task_id), "caught up from the watermark")
    finally:
        await env.shutdown()
    assert snap["lifecycleStatus"] == "CANCELLED"


async def _connect(port: int) -> Any:
    from temporalio.client import Client

    return await Client.connect(f"127.0.0.1:{port}")
