"""Workflows that end every way a run ends, for bench/run_verdicts.py (own module: the sandbox re-imports it)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.exceptions import ApplicationError

# Task tokens of activities that went asynchronous (the bench, in this process, completes them).
tokens: asyncio.Queue[tuple[str, bytes]] | None = None


@activity.defn
async def goes_async() -> str:
    """Completes elsewhere: hands its task token to the bench (``raise_complete_async``)."""
    assert tokens is not None
    tokens.put_nowait((activity.info().workflow_id, activity.info().task_token))
    activity.raise_complete_async()


@workflow.defn
class EndsWorkflow:
    @workflow.run
    async def run(self, how: str) -> str:
        if how == "complete":
            return "done"
        if how == "fail":
            raise ApplicationError("refused", type="BENCH_REFUSED", non_retryable=True)
        if how == "fail_once" and workflow.info().attempt == 1:
            raise ApplicationError("flaky", type="BENCH_FLAKY")  # retried by the workflow's RetryPolicy
        if how in ("fail_once", "fail_always"):
            if how == "fail_always":
                raise ApplicationError("down", type="BENCH_DOWN")
            return "done on a retry"
        if how == "elsewhere":  # an activity completed through its task token; the run goes on
            await workflow.execute_activity(goes_async, start_to_close_timeout=timedelta(minutes=10))
        await asyncio.sleep(3600)  # terminate, cancel or timeout end it from outside
        return "late"
