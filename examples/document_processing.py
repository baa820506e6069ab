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
from temporalio.exceptions import ActivityError, ApplicationError, ApplicationErrorCategory

with workflow.unsafe.imports_passed_through():
    from task_status_interceptors import TaskStatus, dynamic_step, report_progress, task_step


@dataclass
class DocumentRequest:
    owner_id: str
    file_name: str
    pages: int = 5
    # How many parse attempts fail first (the retry policy allows 3): 1 shows a retry, 3 a failed task.
    failing_parse_attempts: int = 1
    searches: tuple[str, ...] = ("contract law", "signatures")
    # Time spent on each page; the demo slows down so that a person can watch it.
    page_seconds: float = 0.02


@activity.defn
async def prepare_file(name: str) -> str:
    await asyncio.sleep(0.05)
    return f"file://uploads/{name}"


@activity.defn
async def parse_document(file_ref: str, pages: int, failing_attempts: int, page_seconds: float = 0.02) -> int:
    if activity.info().attempt <= failing_attempts:
        # A dependency hiccup: Temporal retries, the status shows attempt 1 FAILED, attempt 2 running.
        # BENIGN: an expected failure, so the worker logs it quietly (it is still a failed attempt).
        raise ApplicationError("OCR backend busy", type="OCR_BUSY", category=ApplicationErrorCategory.BENIGN)
    for page in range(1, pages + 1):
        await asyncio.sleep(page_seconds)
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
        step = "01_prepare"
        try:
            with task_step(task_id, step):
                file_ref = await workflow.execute_activity(prepare_file, request.file_name, **options)
            step = "02_parse"
            with task_step(task_id, step):
                pages = await workflow.execute_activity(
                    parse_document,
                    args=[file_ref, request.pages, request.failing_parse_attempts, request.page_seconds],
                    **options,
                )
            # An agent-like phase: search calls unknown in advance, registered as they happen.
            step = "searches"
            for i, query in enumerate(request.searches):
                label = f"Search: {query}"
                with dynamic_step(task_id, "SEARCH.WEB", client_step_key=f"search-{i}", display_name=label):
                    await workflow.execute_activity(search_web, query, **options)
            step = "03_store"
            with task_step(task_id, step):
                result = await workflow.execute_activity(store_result, args=[file_ref, pages], **options)
        except ActivityError as error:
            # The run's failure would end the task anyway (FAILED, with the activity's error type as
            # its code); ending it here gives users this task's own code and message instead.
            await TaskStatus.fail_task(
                task_id,
                "PROCESSING_FAILED",
                "The document could not be processed.",
                failed_step_id=step if step.startswith("0") else None,
            )
            raise ApplicationError(f"step {step} failed", non_retryable=True) from error
        # Optional (the run's return would end it): a workflow that ends its tasks itself adds no
        # commands of the plugin's to its history, so it replays even on a worker without the plugin.
        await TaskStatus.complete_task(task_id)
        return {"taskId": task_id, "workflowId": created["workflowId"], "result": result}
