"""A minimal workflow for the Temporal smoke test.

Kept in its own module with only Temporal imports: the workflow sandbox
re-imports a workflow's module, and test modules import far too much.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow


@activity.defn
async def shout(text: str) -> str:
    return text.upper() + f" attempt={activity.info().attempt}"


@workflow.defn
class ShoutWorkflow:
    @workflow.run
    async def run(self, text: str) -> str:
        return await workflow.execute_activity(shout, text, start_to_close_timeout=timedelta(seconds=10))
