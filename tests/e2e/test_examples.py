"""The examples run end to end: video export with its own data schema, and the live watcher."""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid
from pathlib import Path
from typing import Any

import pytest
from task_status_interceptors import TaskStatusPlugin
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from examples.document_processing import (
    DocumentRequest,
    DocumentWorkflow,
    parse_document,
    prepare_file,
    search_web,
    store_result,
)
from examples.video_export import ExportRequest, VideoExportWorkflow, package, transcode
from examples.watch_run import watch
from observer.relay import OutboxRelay
from tests.integration.conftest import Http

pytestmark = [pytest.mark.temporal, pytest.mark.centrifugo]


async def test_video_export_reports_frames_with_its_own_schema(
    api: Http, live_api: str, temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    plugin = TaskStatusPlugin(
        live_api, api.service_token("video-worker", "WORKER", "COORDINATOR"), outbox_path=tmp_path / "o.sqlite3"
    )
    async with Worker(
        temporal_env.client,
        task_queue=task_queue,
        workflows=[VideoExportWorkflow],
        activities=[transcode, package],
        plugins=[plugin],
    ):
        result = await temporal_env.client.execute_workflow(
            VideoExportWorkflow.run,
            ExportRequest("user-1", "Holiday.mov", total_frames=100),
            id=f"video-{uuid.uuid4()}",
            task_queue=task_queue,
        )
        await plugin.reporter.drained()
    snap = api.client.get(f"/api/tasks/{result['taskId']}", headers=api.user("user-1")).json()
    assert snap["taskType"] == "VIDEO_EXPORT" and snap["lifecycleStatus"] == "SUCCEEDED"
    transcode_step = next(s for s in snap["steps"] if s["stepId"] == "01_transcode")
    assert transcode_step["data"]["schema"] == "video.transcode.progress.v1"
    assert transcode_step["data"]["value"]["totalFrames"] == 100 and transcode_step["progress"]["current"] == 100
    assert plugin.reporter.dropped == 0


async def test_watch_script_prints_the_live_stream_until_the_end(
    api: Http, live_api: str, temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, relay: OutboxRelay
) -> None:
    plugin = TaskStatusPlugin(
        live_api,
        api.service_token("doc-worker", "WORKER", "COORDINATOR"),
        outbox_path=tmp_path / "o.sqlite3",
        heartbeat_interval=0.2,
    )
    stop = asyncio.Event()

    async def relay_loop() -> None:  # the observer's relay, in-process
        while not stop.is_set():
            if not (await relay.run_once()).claimed:
                await asyncio.sleep(0.02)

    executor = concurrent.futures.ThreadPoolExecutor(4)
    async with Worker(
        temporal_env.client,
        task_queue=task_queue,
        workflows=[DocumentWorkflow],
        activities=[prepare_file, parse_document, store_result, search_web],
        activity_executor=executor,
        plugins=[plugin],
    ):
        relaying = asyncio.create_task(relay_loop())

        title = f"report-{uuid.uuid4().hex[:6]}.pdf"

        async def start() -> Any:
            return await temporal_env.client.execute_workflow(
                DocumentWorkflow.run,
                DocumentRequest("user-1", title, pages=3),
                id=f"doc-{uuid.uuid4()}",
                task_queue=task_queue,
            )

        printed: list[str] = []
        token = api.user_tokens.issue(api.tenant, "user-1")
        lines = await watch(live_api, token, start, printed.append, timeout=60, title=title)
        stop.set()
        await relaying
    executor.shutdown()
    assert lines == printed and any("SUCCEEDED" in line for line in lines)
    assert any("RUNNING" in line for line in lines)  # it watched the run happen, not just its end
    assert lines and all(line.startswith(title) for line in lines)  # its own run only
