"""A worker process with the plugin, for kill -9 tests: ``python -m tests.support.worker_process``."""

from __future__ import annotations

import asyncio
import os

from task_status_interceptors import TaskStatusPlugin
from temporalio.client import Client
from temporalio.worker import Worker

from tests.support.plugin_workflows import LongStepWorkflow, long_step


async def main() -> None:
    client = await Client.connect(os.environ["TEMPORAL_ADDRESS"])
    plugin = TaskStatusPlugin(
        os.environ["STATUS_URL"], os.environ["STATUS_TOKEN"], outbox_path=os.environ["OUTBOX"], heartbeat_interval=0.2
    )
    async with Worker(
        client,
        task_queue=os.environ["TASK_QUEUE"],
        workflows=[LongStepWorkflow],
        activities=[long_step],
        plugins=[plugin],
    ):
        print("worker ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
