"""Video export: transcode (frame progress, a different data.schema) → package.

Shows that each operation carries its own data contract: DOCUMENT.PARSE sends
``document.parse.progress.v1``, VIDEO.TRANSCODE sends ``video.transcode.progress.v1``;
the status service validates each against the operation's registered schemas.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from task_status_interceptors import TaskStatus, report_progress, task_step


@dataclass
class ExportRequest:
    owner_id: str
    title: str
    total_frames: int = 300
    preset: str = "1080p-h264"


@activity.defn
async def transcode(total_frames: int, preset: str) -> str:
    for frame in range(0, total_frames + 1, max(1, total_frames // 10)):
        activity.heartbeat(frame)
        report_progress(
            frame,
            total_frames,
            "frame",
            phase_code="ENCODE",
            data={
                "schema": "video.transcode.progress.v1",
                "value": {"frame": frame, "totalFrames": total_frames, "fps": 48.0, "preset": preset},
            },
        )
        await asyncio.sleep(0.02)
    return "object://renders/out.mp4"


@activity.defn
async def package(render_ref: str) -> str:
    report_progress(1, 1, "file", phase_code="MUX")
    return render_ref.replace("renders", "exports")


@workflow.defn
class VideoExportWorkflow:
    @workflow.run
    async def run(self, request: ExportRequest) -> dict[str, str]:
        created = await TaskStatus.create_workflow(
            request.owner_id,
            f"Export {request.title}",
            [
                {
                    "clientTaskKey": "export",
                    "title": request.title,
                    "taskType": "VIDEO_EXPORT",
                    "knownSteps": [
                        {"stepId": "01_transcode", "operationCode": "VIDEO.TRANSCODE"},
                        {"stepId": "02_package", "operationCode": "VIDEO.PACKAGE"},
                    ],
                }
            ],
        )
        task_id = created["tasks"][0]["taskId"]
        with task_step(task_id, "01_transcode"):
            render = await workflow.execute_activity(
                transcode,
                args=[request.total_frames, request.preset],
                start_to_close_timeout=timedelta(minutes=5),
                heartbeat_timeout=timedelta(seconds=30),
            )
        with task_step(task_id, "02_package"):
            result = await workflow.execute_activity(package, render, start_to_close_timeout=timedelta(minutes=1))
        # No complete_task needed: the run's end ends the task it created (SUCCEEDED on return,
        # FAILED if it raises, CANCELLED if it is cancelled).
        return {"taskId": task_id, "result": result}


TASK_QUEUE = "examples-video"


async def main() -> None:
    """Run one export on a worker of its own (queue ``examples-video``) and print its task id.

        export TASK_STATUS_URL=http://127.0.0.1:8080
        export TASK_STATUS_TOKEN=$(task-observer service-token \\
            --producer video-worker --tenant demo --scope examples --role WORKER --role COORDINATOR)
        python -m examples.video_export
    """
    import os
    import uuid

    from task_status_interceptors import TaskStatusPlugin
    from temporalio.client import Client
    from temporalio.worker import Worker

    client = await Client.connect(os.environ.get("TEMPORAL_ADDRESS", "127.0.0.1:7233"))
    # An outbox file of its own: examples/worker.py may run beside it with the same token.
    plugin = TaskStatusPlugin(
        os.environ["TASK_STATUS_URL"], os.environ["TASK_STATUS_TOKEN"], outbox_path=".task-status/video-export.sqlite3"
    )
    worker = Worker(
        client,
        task_queue=TASK_QUEUE,
        workflows=[VideoExportWorkflow],
        activities=[transcode, package],
        plugins=[plugin],
    )
    running = asyncio.create_task(worker.run())
    try:
        # Bounded: a run nothing completes ends as TIMED_OUT (its task too) instead of waiting forever.
        result = await client.execute_workflow(
            VideoExportWorkflow.run,
            ExportRequest(os.environ.get("DEMO_USER", "alice"), f"holiday-{uuid.uuid4().hex[:6]}.mov"),
            id=f"video-{uuid.uuid4()}",
            task_queue=TASK_QUEUE,
            execution_timeout=timedelta(minutes=2),
        )
        await plugin.reporter.drained()
        print(f"exported {result['result']} (task {result['taskId']})", flush=True)
    finally:
        await _stop(worker, running, within=WORKER_SHUTDOWN_SECONDS)


WORKER_SHUTDOWN_SECONDS = 15.0


async def _stop(worker: Any, running: asyncio.Task[None], within: float) -> None:
    """Shut the worker down and let the plugin finish, bounded: the SDK's shutdown can wait forever
    on a server that does not release the pollers (temporalio/sdk-python#1557), and this example's
    work is done by then. What the worker's run raised, it raises."""
    bound = asyncio.timeout(within)
    try:
        async with bound:
            await worker.shutdown()
            await running
    except TimeoutError:
        if not bound.expired():
            raise
        print(f"the worker did not shut down within {within:.0f} s; leaving without it", file=sys.stderr)
        running.cancel()


if __name__ == "__main__":
    from examples.process import run_then_exit

    run_then_exit(main())
