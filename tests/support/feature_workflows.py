"""Workflows that use the Temporal features real workflows use every day (own module: the sandbox
re-imports workflow modules): workflow retries, cron, a reused workflow id, thread-pool and local
activities, cancellation of quiet activities, asynchronous completion."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from task_status_interceptors import TaskStatus, task_step

# Task tokens of activities that went asynchronous, for the test to complete them (activities run
# outside the sandbox, in the test's process).
async_tokens: asyncio.Queue[bytes] | None = None


@activity.defn
async def quick() -> str:
    return "done"


@activity.defn
def sync_work(seconds: float) -> str:
    """A thread-pool activity that heartbeats: Temporal's cancellation is raised into its thread."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        activity.heartbeat()
        time.sleep(0.05)
    return "done"


@activity.defn
async def quiet_work(seconds: float) -> str:
    """Never heartbeats: it never hears of a cancellation."""
    await asyncio.sleep(seconds)
    return "done"


@activity.defn
async def completed_later() -> str:
    """Hands its task token to the test, which completes it through the client."""
    assert async_tokens is not None
    async_tokens.put_nowait(activity.info().task_token)
    activity.raise_complete_async()


@dataclass
class Plan:
    owner: str
    title: str
    # fail_first | fail_always | plain | sync_wait | quiet_wait | local | async_complete
    how: str
    seconds: float = 60.0


@workflow.defn
class FeatureWorkflow:
    @workflow.run
    async def run(self, plan: Plan) -> str:
        created = await TaskStatus.create_workflow(
            plan.owner,
            plan.title,
            [
                {
                    "clientTaskKey": "job",
                    "title": plan.title,
                    "knownSteps": [{"stepId": "01_work", "operationCode": "DOCUMENT.PARSE", "displayName": "Work"}],
                }
            ],
        )
        task_id: str = created["tasks"][0]["taskId"]
        once = RetryPolicy(maximum_attempts=1)
        with task_step(task_id, "01_work"):
            if plan.how == "sync_wait":
                await workflow.execute_activity(
                    sync_work,
                    plan.seconds,
                    start_to_close_timeout=timedelta(minutes=5),
                    heartbeat_timeout=timedelta(seconds=2),
                    retry_policy=once,
                )
            elif plan.how == "quiet_wait":
                await workflow.execute_activity(
                    quiet_work, plan.seconds, start_to_close_timeout=timedelta(minutes=5), retry_policy=once
                )
            elif plan.how == "local":
                await workflow.execute_local_activity(quick, start_to_close_timeout=timedelta(seconds=10))
            elif plan.how == "async_complete":
                await workflow.execute_activity(
                    completed_later, start_to_close_timeout=timedelta(minutes=1), retry_policy=once
                )
            else:
                await workflow.execute_activity(quick, start_to_close_timeout=timedelta(seconds=10))
        if plan.how == "fail_always" or (plan.how == "fail_first" and workflow.info().attempt == 1):
            raise ApplicationError("the dependency was down", type="DEPENDENCY_DOWN")  # retryable
        return task_id
