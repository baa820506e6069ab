"""Workflows that end every way a run ends, for bench/run_verdicts.py (own module: the sandbox re-imports it)."""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ApplicationError


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
        await asyncio.sleep(3600)  # terminate, cancel or timeout end it from outside
        return "late"
