"""Document processing: prepare → parse (page progress, a retryable failure first) → store.

The coordinator workflow creates the status task, marks each activity call
with its step, and submits TASK_COMPLETED; the plugin reports the steps.
Workflow code stays deterministic: all I/O happens in activities.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from interceptors import TaskStatus, dynamic_step, report_progress, task_step


@dataclass
class DocumentRequest:
    owner_id: str
    file_name: str
    pages: int = 5
    fail_first_parse: bool = True
    searches: tuple[str, ...] = ("contract law", "signatures")


@activity.defn
async def prepare_file(name: str) -> str:
    await asyncio.sleep(0.05)
    return f"file://uploads/{name}"


@activity.defn
async def parse_document(file_ref: str, pages: int, fail_first: bool) -> int:
    if fail_first and activity.info().attempt == 1:
        # A dependency hiccup: Temporal retries, the status shows attempt 1 FAILED, attempt 2 running.
        raise ApplicationError("OCR backend busy", type="OCR_BUSY")
    for page in range(1, pages + 1):
        await asyncio.sleep(0.02)
        activity.heartbeat(page)
        report_progress(
            page,
            pages,
            "page",
            phase_code="OCR",
            phase_label=f"Reading page {page} of {pages}",
            data={"schema": "document.parse.progress.v1", "value": {"page": page, "pageCount": pages}},
        )
    return pages


@activity.defn
def store_result(file_ref: str, pages: int) -> str:
    # A thread-pool activity: reporting works the same way.
    report_progress(1, 1, "result")
    return f"result://{file_ref.rsplit('/', 1)[-1]}/{pages}"


@activity.defn
async def search_web(query: str) -> int:
    await asyncio.sleep(0.01)
    return len(query)


@workflow.defn
class DocumentWorkflow:
    @workflow.run
    async def run(self, request: DocumentRequest) -> dict[str, str]:
        created = await TaskStatus.create_workflow(
            request.owner_id,
            f"Process {request.file_name}",
            [
                {
                    "clientTaskKey": "document",
                    "title": request.file_name,
                    "knownSteps": [
                        {"stepId": "01_prepare", "operationCode": "FILE.PREPARE"},
                        {"stepId": "02_parse", "operationCode": "DOCUMENT.PARSE"},
                        {"stepId": "03_store", "operationCode": "RESULT.PERSIST"},
                    ],
                    # Tool calls of an agent appear as dynamic steps, within limits.
                    "dynamicRegistrationPolicy": {
                        "allowedChildOperations": ["SEARCH.*"],
                        "maxDynamicSteps": 10,
                        "maxDepth": 1,
                        "maxParallelExecutions": 5,
                    },
                }
            ],
        )
        task_id = created["tasks"][0]["taskId"]
        options: dict[str, Any] = {
            "start_to_close_timeout": timedelta(seconds=30),
            "heartbeat_timeout": timedelta(seconds=10),
            "retry_policy": RetryPolicy(initial_interval=timedelta(milliseconds=100), maximum_attempts=3),
        }
        with task_step(task_id, "01_prepare"):
            file_ref = await workflow.execute_activity(prepare_file, request.file_name, **options)
        with task_step(task_id, "02_parse"):
            pages = await workflow.execute_activity(
                parse_document, args=[file_ref, request.pages, request.fail_first_parse], **options
            )
        # An agent-like phase: search calls unknown in advance, registered as they happen.
        for i, query in enumerate(request.searches):
            with dynamic_step(task_id, "SEARCH.WEB", client_step_key=f"search-{i}", display_name=f"Search: {query}"):
                await workflow.execute_activity(search_web, query, **options)
        with task_step(task_id, "03_store"):
            result = await workflow.execute_activity(store_result, args=[file_ref, pages], **options)
        await TaskStatus.complete_task(task_id)
        return {"taskId": task_id, "workflowId": created["workflowId"], "result": result}
