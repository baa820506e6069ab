"""Workflows whose runs end every way a run can end (own module: the sandbox re-imports workflow modules)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from task_status_interceptors import TaskStatus, task_step


@activity.defn
async def work(seconds: float) -> str:
    """Heartbeats while it works, so a cancellation of its run reaches it."""
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        activity.heartbeat()
        await asyncio.sleep(0.1)
    return "done"


@dataclass
class Ending:
    owner: str
    title: str
    how: str  # return | raise | self | wait | continue
    work_seconds: float = 0.05
    continued: bool = False


@workflow.defn
class EndingWorkflow:
    @workflow.run
    async def run(self, ending: Ending) -> str:
        task_id = ""
        if not ending.continued:
            created = await TaskStatus.create_workflow(
                ending.owner,
                ending.title,
                [
                    {
                        "clientTaskKey": "job",
                        "title": ending.title,
                        "knownSteps": [{"stepId": "01_work", "operationCode": "DOCUMENT.PARSE", "displayName": "Work"}],
                    }
                ],
            )
            task_id = created["tasks"][0]["taskId"]
            with task_step(task_id, "01_work"):
                await workflow.execute_activity(
                    work,
                    ending.work_seconds,
                    start_to_close_timeout=timedelta(minutes=5),
                    heartbeat_timeout=timedelta(seconds=2),
                    retry_policy=RetryPolicy(maximum_attempts=1),
                )
        if ending.how == "raise":
            raise ApplicationError("the input was refused", type="INPUT_REFUSED", non_retryable=True)
        if ending.how == "self":
            await TaskStatus.complete_task(task_id)
        if ending.how == "continue" and not ending.continued:
            workflow.continue_as_new(Ending(ending.owner, ending.title, "continue", continued=True))
        return task_id


@workflow.defn
class QuickThenLongWorkflow:
    """Activity "1" completes at once; activity "2" then works for minutes (heartbeating)."""

    @workflow.run
    async def run(self) -> str:
        await workflow.execute_activity(work, 0.01, start_to_close_timeout=timedelta(minutes=1))
        return await workflow.execute_activity(
            work, 600.0, start_to_close_timeout=timedelta(minutes=15), heartbeat_timeout=timedelta(seconds=30)
        )
