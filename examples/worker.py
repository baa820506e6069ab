"""A worker with the plugin in one line: ``plugins=[TaskStatusPlugin(url, token)]``.

    TASK_STATUS_URL=http://127.0.0.1:8080 TASK_STATUS_TOKEN=$(task-observer service-token \\
        --producer doc-worker --tenant acme --scope docs --role WORKER --role COORDINATOR) \\
        python -m examples.worker
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os

from temporalio.client import Client
from temporalio.worker import Worker

from examples.document_processing import DocumentWorkflow, parse_document, prepare_file, search_web, store_result
from interceptors import TaskStatusPlugin

TASK_QUEUE = "documents"


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
