"""Plugin under stress and failure: concurrency (design P8), status service down and restarts (design P9), replay."""

from __future__ import annotations

import concurrent.futures
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from task_status_interceptors import TaskStatusPlugin
from temporalio.client import WorkflowHistory
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

from examples.document_processing import (
    DocumentRequest,
    DocumentWorkflow,
    parse_document,
    prepare_file,
    search_web,
    store_result,
)
from status.infra import tables as t
from tests.integration.conftest import Http
from tests.support.flows import create_workflow
from tests.support.plugin_workflows import FanOutWorkflow, StepsWorkflow, async_step, quick_step, threaded_step
from tests.support.processes import free_port
from tests.support.proxy import FailoverProxy

pytestmark = [pytest.mark.temporal]


def _plugin(api: Http, url: str, path: Path) -> TaskStatusPlugin:
    return TaskStatusPlugin(
        url, api.service_token("doc-worker", "WORKER", "COORDINATOR"), outbox_path=path, heartbeat_interval=0.2
    )


async def test_ac8_fifty_concurrent_executions_never_mix(
    api: Http, live_api: str, temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, e2e_engine: Any
) -> None:
    count = 50
    created = api.client.post(
        "/internal/v1/workflows",
        headers=api.coordinator,
        json={
            "clientWorkflowKey": f"fan-{uuid.uuid4()}",
            "ownerId": "user-1",
            "title": "Fan-out",
            "initialTasks": [
                {
                    "clientTaskKey": "t",
                    "title": "Fan-out",
                    "knownSteps": [{"stepId": f"s{i:02d}", "operationCode": "FILE.PREPARE"} for i in range(count)],
                }
            ],
        },
    ).json()
    task_id = created["tasks"][0]["taskId"]
    plugin = _plugin(api, live_api, tmp_path / "outbox.sqlite3")
    with concurrent.futures.ThreadPoolExecutor(count) as executor:
        async with Worker(
            temporal_env.client,
            task_queue=task_queue,
            workflows=[FanOutWorkflow],
            activities=[async_step, threaded_step],
            activity_executor=executor,
            plugins=[plugin],
            max_concurrent_activities=count,
        ):
            result = await temporal_env.client.execute_workflow(
                FanOutWorkflow.run, args=[task_id, count], id=f"fan-{uuid.uuid4()}", task_queue=task_queue
            )
            await plugin.reporter.drained(60)
    assert result == list(range(count))
    assert plugin.reporter.dropped == 0 and plugin.reporter.delivered >= 3 * count
    snap = api.client.get(f"/api/tasks/{task_id}", headers=api.user("user-1")).json()
    for step in snap["steps"]:
        index = int(step["stepId"][1:])
        assert step["lifecycleStatus"] == "SUCCEEDED", step
        # Each execution's own progress and phase: nothing crossed over from a neighbour.
        assert step["progress"]["current"] == index and step["phaseCode"] == f"P{index}"
    with e2e_engine.connect() as conn:
        rows = conn.execute(
            sa.select(
                t.task_event_log.c.step_id,
                t.task_event_log.c.source_seq,
                t.task_event_log.c.execution_id,
                t.task_event_log.c.event_type,
            ).where(
                t.task_event_log.c.task_id == task_id,
                t.task_event_log.c.step_id.is_not(None),
                t.task_event_log.c.event_type != "STEP_ACTIVATED",
            )
        ).all()
    by_step: dict[str, list[tuple[int, str]]] = {}
    executions: dict[str, set[str]] = {}
    for step_id, seq, execution_id, kind in rows:
        by_step.setdefault(step_id, []).append((seq, kind))
        executions.setdefault(step_id, set()).add(execution_id)
    assert len(by_step) == count
    for step_id, events in by_step.items():
        seqs = sorted(seq for seq, _ in events)
        assert seqs == list(range(1, len(seqs) + 1)), (step_id, seqs)  # one stream per execution, in order
        assert len(executions[step_id]) == 1
        assert sorted(events)[0][1] == "STEP_STARTED" and sorted(events)[-1][1] == "STEP_COMPLETED"


async def test_ac9_status_service_down_activities_succeed_and_outbox_resumes_after_restart(
    api: Http, live_api: str, temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, e2e_engine: Any
) -> None:
    task_id = create_workflow(api)["tasks"][0]["taskId"]
    outbox = tmp_path / "outbox.sqlite3"
    dead_url = f"http://127.0.0.1:{free_port()}"  # nothing listens: the status service is down
    down = _plugin(api, dead_url, outbox)
    async with Worker(
        temporal_env.client, task_queue=task_queue, workflows=[StepsWorkflow], activities=[quick_step], plugins=[down]
    ):
        total = await temporal_env.client.execute_workflow(
            StepsWorkflow.run, task_id, id=f"steps-{uuid.uuid4()}", task_queue=task_queue
        )
    assert total == 0 + 1 + 2  # the activities succeeded although nothing could be reported
    queued = down.reporter  # stopped with the worker; its file keeps the events
    import sqlite3

    with sqlite3.connect(outbox) as db:
        queued_ids = [row[0] for row in db.execute("SELECT json_extract(body, '$.eventId') FROM event ORDER BY id")]
    assert len(queued_ids) >= 9 and queued is not None  # STARTED, PROGRESS, COMPLETED per step
    snap = api.client.get(f"/api/tasks/{task_id}", headers=api.user("user-1")).json()
    assert {s["lifecycleStatus"] for s in snap["steps"]} == {"PENDING"}
    # "Restart the worker": a new plugin on the same outbox file, with the status service up.
    proxy = await FailoverProxy([int(live_api.rsplit(":", 1)[1])]).start()
    restarted = _plugin(api, f"http://127.0.0.1:{proxy.port}", outbox)
    await restarted.reporter.start()
    await restarted.reporter.drained(30)
    await restarted.reporter.stop()
    await proxy.close()
    snap = api.client.get(f"/api/tasks/{task_id}", headers=api.user("user-1")).json()
    assert {s["lifecycleStatus"] for s in snap["steps"]} == {"SUCCEEDED"}
    with e2e_engine.connect() as conn:
        logged = set(conn.scalars(sa.select(t.task_event_log.c.event_id).where(t.task_event_log.c.task_id == task_id)))
    assert set(queued_ids) <= logged  # delivered once, with the original eventIds


async def test_histories_replay_with_and_without_the_plugin(
    api: Http, live_api: str, temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    plugin = _plugin(api, live_api, tmp_path / "outbox.sqlite3")
    with concurrent.futures.ThreadPoolExecutor(4) as executor:
        async with Worker(
            temporal_env.client,
            task_queue=task_queue,
            workflows=[DocumentWorkflow],
            activities=[prepare_file, parse_document, store_result, search_web],
            activity_executor=executor,
            plugins=[plugin],
        ):
            handle = await temporal_env.client.start_workflow(
                DocumentWorkflow.run,
                DocumentRequest("user-1", "a.pdf", pages=2, failing_parse_attempts=0),
                id=f"doc-{uuid.uuid4()}",
                task_queue=task_queue,
            )
            await handle.result()
            await plugin.reporter.drained()
    history: WorkflowHistory = await handle.fetch_history()
    # Recorded with the plugin: replays without it, and with it.
    await Replayer(workflows=[DocumentWorkflow]).replay_workflow(history)
    await Replayer(
        workflows=[DocumentWorkflow], plugins=[_plugin(api, live_api, tmp_path / "r.sqlite3")]
    ).replay_workflow(history)


async def test_ac9_worker_killed_mid_run_resumes_its_outbox(
    api: Http, live_api: str, temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, e2e_engine: Any
) -> None:
    import asyncio
    import os
    import signal
    import sqlite3
    import subprocess
    import sys

    from tests.support.plugin_workflows import LongStepWorkflow
    from tests.support.processes import REPO_ROOT, wait_until

    task_id = create_workflow(api)["tasks"][0]["taskId"]
    outbox = tmp_path / "outbox.sqlite3"
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": temporal_env.client.service_client.config.target_host,
        "TASK_QUEUE": task_queue,
        "OUTBOX": str(outbox),
        "STATUS_TOKEN": api.service_token("doc-worker", "WORKER", "COORDINATOR"),
        "PYTHONPATH": str(REPO_ROOT),
    }

    def spawn(status_url: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.support.worker_process"], env={**env, "STATUS_URL": status_url}, cwd=REPO_ROOT
        )

    def queued_progress() -> int:
        if not outbox.exists():
            return 0
        try:
            with sqlite3.connect(outbox) as db:
                return int(db.execute("SELECT COUNT(*) FROM event WHERE body LIKE '%STEP_PROGRESS%'").fetchone()[0])
        except sqlite3.OperationalError:  # the worker is still creating its outbox
            return 0

    first = spawn(f"http://127.0.0.1:{free_port()}")  # the status service is unreachable for this worker
    try:
        handle = await temporal_env.client.start_workflow(
            LongStepWorkflow.run, task_id, id=f"long-{uuid.uuid4()}", task_queue=task_queue
        )
        await asyncio.to_thread(wait_until, lambda: queued_progress() >= 2, 30, "queued progress")
        with sqlite3.connect(outbox) as db:
            before_kill = [r[0] for r in db.execute("SELECT json_extract(body, '$.eventId') FROM event ORDER BY id")]
    finally:
        first.send_signal(signal.SIGKILL)  # kill -9, mid-run
        first.wait(10)
    second = spawn(live_api)
    try:
        assert await asyncio.wait_for(handle.result(), 60) == 20
        with e2e_engine.connect() as conn:

            def logged() -> set[str]:
                return set(
                    conn.scalars(sa.select(t.task_event_log.c.event_id).where(t.task_event_log.c.task_id == task_id))
                )

            def settled() -> bool:
                conn.rollback()
                snap = api.client.get(f"/api/tasks/{task_id}", headers=api.user("user-1")).json()
                return any(s["attempt"] >= 2 and s["lifecycleStatus"] == "SUCCEEDED" for s in snap["steps"])

            await asyncio.to_thread(wait_until, settled, 30, "attempt 2 reported")
            conn.rollback()
            assert set(before_kill) <= logged()  # the killed worker's events, with their original ids
    finally:
        second.terminate()
        second.wait(15)
    snap = api.client.get(f"/api/tasks/{task_id}", headers=api.user("user-1")).json()
    attempts = {s["attempt"]: s for s in snap["steps"] if s["stepId"] == "02_parse"}
    assert attempts[1]["lifecycleStatus"] == "TIMED_OUT" and attempts[1]["progress"] is not None  # never RUNNING
    assert max(attempts) >= 2 and attempts[max(attempts)]["lifecycleStatus"] == "SUCCEEDED"


async def test_activity_heartbeats_become_execution_heartbeats_without_versions(
    api: Http, live_api: str, temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, e2e_engine: Any
) -> None:
    from tests.support.plugin_workflows import HeartbeatWorkflow, heartbeat_only

    task_id = create_workflow(api)["tasks"][0]["taskId"]
    plugin = TaskStatusPlugin(
        live_api,
        api.service_token("doc-worker", "WORKER", "COORDINATOR"),
        outbox_path=tmp_path / "o.sqlite3",
        heartbeat_interval=0.1,
    )
    async with Worker(
        temporal_env.client,
        task_queue=task_queue,
        workflows=[HeartbeatWorkflow],
        activities=[heartbeat_only],
        plugins=[plugin],
    ):
        await temporal_env.client.execute_workflow(
            HeartbeatWorkflow.run, task_id, id=f"hb-{uuid.uuid4()}", task_queue=task_queue
        )
        await plugin.reporter.drained()
    with e2e_engine.connect() as conn:
        step = (
            conn.execute(
                sa.select(t.task_step).where(t.task_step.c.task_id == task_id, t.task_step.c.step_id == "02_parse")
            )
            .mappings()
            .one()
        )
        kinds = list(
            conn.scalars(
                sa.select(t.task_event_log.c.event_type)
                .where(t.task_event_log.c.task_id == task_id, t.task_event_log.c.step_id == "02_parse")
                .order_by(t.task_event_log.c.task_version)
            )
        )
    assert step["last_heartbeat_seq"] >= 1  # heartbeats landed on the execution
    assert kinds == ["STEP_ACTIVATED", "STEP_STARTED", "STEP_COMPLETED"]  # and created no versions or events


async def test_histories_recorded_without_the_plugin_replay_with_it(
    api: Http, live_api: str, temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    task_id = create_workflow(api)["tasks"][0]["taskId"]
    async with Worker(temporal_env.client, task_queue=task_queue, workflows=[StepsWorkflow], activities=[quick_step]):
        handle = await temporal_env.client.start_workflow(
            StepsWorkflow.run, task_id, id=f"plain-{uuid.uuid4()}", task_queue=task_queue
        )
        assert await handle.result() == 3
    history = await handle.fetch_history()
    plugin = _plugin(api, live_api, tmp_path / "replay.sqlite3")
    await Replayer(workflows=[StepsWorkflow], plugins=[plugin]).replay_workflow(history)


async def test_silence_makes_the_step_stale_and_resumed_heartbeats_heal_it_once(
    api: Http,
    live_api: str,
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    e2e_engine: Any,
    e2e_service: Any,
) -> None:
    import asyncio

    from tests.support.plugin_workflows import SilentWorkflow, silent_for_a_while
    from tests.support.processes import wait_until

    task_id = create_workflow(api)["tasks"][0]["taskId"]
    pause = tmp_path / "pause"
    pause.write_text("silence")
    plugin = TaskStatusPlugin(
        live_api,
        api.service_token("doc-worker", "WORKER", "COORDINATOR"),
        outbox_path=tmp_path / "o.sqlite3",
        heartbeat_interval=0.2,
        heartbeat_timeout_seconds=2,
    )

    def step() -> dict[str, Any]:
        snap = api.client.get(f"/api/tasks/{task_id}", headers=api.user("user-1")).json()
        return next(s for s in snap["steps"] if s["stepId"] == "02_parse")

    def reconcile_until(health: str) -> bool:
        e2e_service.mark_stale()  # the reconciler's pass, run by the test
        return bool(step()["health"] == health)

    async with Worker(
        temporal_env.client,
        task_queue=task_queue,
        workflows=[SilentWorkflow],
        activities=[silent_for_a_while],
        plugins=[plugin],
    ):
        handle = await temporal_env.client.start_workflow(
            SilentWorkflow.run, args=[task_id, str(pause)], id=f"silent-{uuid.uuid4()}", task_queue=task_queue
        )
        await asyncio.to_thread(wait_until, lambda: step()["lifecycleStatus"] == "RUNNING", 20, "step running")
        await asyncio.to_thread(wait_until, lambda: reconcile_until("STALE"), 20, "STALE after silence")
        assert step()["lifecycleStatus"] == "RUNNING"  # STALE never means FAILED
        pause.unlink()  # heartbeats resume
        await asyncio.to_thread(wait_until, lambda: step()["health"] == "HEALTHY", 20, "HEALTHY again")
        assert await handle.result() == 1
        await plugin.reporter.drained()
    with e2e_engine.connect() as conn:
        changes = list(
            conn.scalars(
                sa.select(t.task_event_log.c.health)
                .where(t.task_event_log.c.task_id == task_id, t.task_event_log.c.event_type == "STEP_HEALTH_CHANGED")
                .order_by(t.task_event_log.c.task_version)
            )
        )
    assert changes == ["STALE", "HEALTHY"]  # exactly once each way
