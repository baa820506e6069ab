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
        await asyncio.sleep(3600)  # terminate, cancel or timeout end it from outside
        return "late"
