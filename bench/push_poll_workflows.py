"""Workload of bench/push_vs_poll.py (own module: the workflow sandbox re-imports it)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from task_status_interceptors import task_step

# (workflowId, step index) → wall-clock time the step started; read by the benchmark in this process.
STEP_STARTED_AT: dict[tuple[str, int], float] = {}


@activity.defn
async def slow_step(index: int, seconds: float) -> int:
    STEP_STARTED_AT[(activity.info().workflow_id, index)] = time.time()
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        activity.heartbeat(index)
        await asyncio.sleep(min(2.0, left))
    return index


@workflow.defn
class SteppedWorkflow:
    """A task whose visible state changes every ``step_seconds``: one activity per step."""

    @workflow.run
    async def run(self, task_id: str, steps: int, step_seconds: float) -> int:
        for i in range(steps):
            with task_step(task_id, f"s{i:02d}"):
                await workflow.execute_activity(
                    slow_step,
                    args=[i, step_seconds],
                    start_to_close_timeout=timedelta(seconds=step_seconds + 60),
                    heartbeat_timeout=timedelta(seconds=30),
                )
        return steps
