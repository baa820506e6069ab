"""Workflows for plugin tests (own module: the sandbox re-imports workflow modules)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from task_status_interceptors import report_progress, task_step


@activity.defn
async def async_step(index: int) -> int:
    for i in range(3):
        activity.heartbeat(i)
        report_progress(index, 1000, "item", phase_code=f"P{index}")
        await asyncio.sleep(0.01)
    return index


@activity.defn
def threaded_step(index: int) -> int:
    for i in range(3):
        activity.heartbeat(i)
        report_progress(index, 1000, "item", phase_code=f"P{index}")
        time.sleep(0.01)
    return index


@workflow.defn
class FanOutWorkflow:
    """Runs one activity per known step concurrently, half async and half in the thread pool."""

    @workflow.run
    async def run(self, task_id: str, count: int) -> list[int]:
        calls = []
        for i in range(count):
            # start_activity schedules right away, inside the block; an un-awaited
            # execute_activity() coroutine would only start later, outside it.
            with task_step(task_id, f"s{i:02d}"):
                calls.append(
                    workflow.start_activity(
                        async_step if i % 2 == 0 else threaded_step,
                        i,
                        start_to_close_timeout=timedelta(seconds=60),
                        retry_policy=RetryPolicy(maximum_attempts=1),
                    )
                )
        return list(await asyncio.gather(*calls))


@activity.defn
async def quick_step(index: int) -> int:
    report_progress(index, 10, "item")
    return index


@workflow.defn
class StepsWorkflow:
    """Three steps of an existing task, no coordinator calls (status service may be down)."""

    @workflow.run
    async def run(self, task_id: str) -> int:
        total = 0
        for i, step in enumerate(["01_prepare", "02_parse", "03_store"]):
            with task_step(task_id, step):
                total += await workflow.execute_activity(quick_step, i, start_to_close_timeout=timedelta(seconds=30))
        return total


@activity.defn
async def long_step(pages: int) -> int:
    """Slow on attempt 1 (so the worker can be killed mid-run), quick on a retry."""
    delay = 0.5 if activity.info().attempt == 1 else 0.01
    for page in range(1, pages + 1):
        activity.heartbeat(page)
        report_progress(page, pages, "page")
        await asyncio.sleep(delay)
    return pages


@workflow.defn
class LongStepWorkflow:
    @workflow.run
    async def run(self, task_id: str) -> int:
        with task_step(task_id, "02_parse"):
            return await workflow.execute_activity(
                long_step,
                20,
                start_to_close_timeout=timedelta(seconds=120),
                heartbeat_timeout=timedelta(seconds=2),
                retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100), maximum_attempts=5),
            )


@activity.defn
async def heartbeat_only(beats: int) -> int:
    for i in range(beats):
        activity.heartbeat(i)
        await asyncio.sleep(0.05)
    return beats


@workflow.defn
class HeartbeatWorkflow:
    @workflow.run
    async def run(self, task_id: str) -> int:
        with task_step(task_id, "02_parse"):
            return await workflow.execute_activity(
                heartbeat_only, 20, start_to_close_timeout=timedelta(seconds=30), heartbeat_timeout=timedelta(seconds=5)
            )


@activity.defn
async def silent_for_a_while(pause_file: str) -> int:
    """Heartbeats, goes silent until the test removes ``pause_file``, then heartbeats again."""
    import os

    for i in range(5):
        activity.heartbeat(i)
        await asyncio.sleep(0.1)
    while os.path.exists(pause_file):  # the test decides how long the silence lasts
        await asyncio.sleep(0.05)
    for i in range(20):
        activity.heartbeat(100 + i)
        await asyncio.sleep(0.1)
    return 1


@workflow.defn
class SilentWorkflow:
    @workflow.run
    async def run(self, task_id: str, pause_file: str) -> int:
        with task_step(task_id, "02_parse"):
            return await workflow.execute_activity(
                silent_for_a_while,
                pause_file,
                start_to_close_timeout=timedelta(seconds=120),
                heartbeat_timeout=timedelta(seconds=60),
            )
