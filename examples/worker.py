"""A worker with the plugin in one line: ``plugins=[TaskStatusPlugin(url, token)]``.

    export TASK_STATUS_URL=http://127.0.0.1:8080
    export TASK_STATUS_TOKEN=$(task-observer service-token \\
        --producer example-worker --tenant demo --scope examples --role WORKER --role COORDINATOR)
    python -m examples.worker

It serves its own task queue (``examples-documents``), so next to ``task-observer dev`` it never
takes the demo's runs (queue ``demo-documents``). Its runs belong to the tenant of its token
(``demo`` above: the dev stack's user ``alice`` sees them on the dashboard too).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os

from task_status_interceptors import TaskStatusPlugin
from temporalio.client import Client
from temporalio.worker import Worker

from examples.document_processing import DocumentWorkflow, parse_document, prepare_file, search_web, store_result

TASK_QUEUE = "examples-documents"


async def main() -> None:
    client = await Client.connect(os.environ.get("TEMPORAL_ADDRESS", "127.0.0.1:7233"))
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as executor:
        worker = Worker(
            client,
            task_queue=TASK_QUEUE,
            workflows=[DocumentWorkflow],
            activities=[prepare_file, parse_document, store_result, search_web],
            activity_executor=executor,
            plugins=[TaskStatusPlugin(os.environ["TASK_STATUS_URL"], os.environ["TASK_STATUS_TOKEN"])],
        )
        await worker.run()


if __name__ == "__main__":
    asyncio.run(main())
