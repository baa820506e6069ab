"""The benchmark's workflow (own module: the workflow sandbox re-imports it)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from task_status_interceptors import report_progress, task_step


@activity.defn
async def tiny(index: int) -> int:
    report_progress(1, 1, "item")
    return index


@workflow.defn
class OverheadWorkflow:
    @workflow.run
    async def run(self, task_id: str, steps: int) -> int:
        total = 0
        for i in range(steps):
            with task_step(task_id, f"s{i:02d}"):
                total += await workflow.execute_activity(tiny, i, start_to_close_timeout=timedelta(seconds=30))
        return total
