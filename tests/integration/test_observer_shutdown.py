"""The Temporal-mode observer's stop is bounded: a component that will not end cannot hold the process."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import pytest
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from observer.runner import stop_worker
from observer.temporal import ObserverActivities, ObserverInput, ObserverWorkflow

pytestmark = pytest.mark.temporal


async def _worker_running(env: WorkflowEnvironment, run_pass: object) -> tuple[Worker, asyncio.Task[None]]:
    """A worker with the observer's workflow and activity, one component running the given pass."""
    task_queue = f"observer-{uuid.uuid4().hex[:8]}"
    activities = ObserverActivities({"relay": run_pass}, {"relay": 0.05})  # type: ignore[dict-item]
    worker = Worker(
        env.client, task_queue=task_queue, workflows=[ObserverWorkflow], activities=[activities.run_component]
    )
    running = asyncio.create_task(worker.run())
    await env.client.start_workflow(
        ObserverWorkflow.run, ObserverInput("relay", 60.0), id=f"wf-{task_queue}", task_queue=task_queue
    )
    return worker, running


async def test_a_component_that_ignores_its_cancellation_does_not_hold_the_stop(
    temporal_env: WorkflowEnvironment,
) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    cancels = 0

    async def stubborn_pass() -> bool:
        nonlocal cancels
        started.set()
        while not release.is_set():
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:  # the component swallows the worker's cancellation
                cancels += 1
        raise asyncio.CancelledError  # released: it takes it at last

    worker, running = await _worker_running(temporal_env, stubborn_pass)
    await asyncio.wait_for(started.wait(), 60)
    assert await stop_worker(worker, within=1.0) is False
    assert cancels >= 1  # the worker did ask it to end
    assert not running.done()  # and is still waiting for it: without the bound, so would the process
    release.set()
    await asyncio.wait_for(running, 60)


async def test_components_that_end_on_cancellation_stop_within_the_bound(temporal_env: WorkflowEnvironment) -> None:
    started = asyncio.Event()

    async def idle_pass() -> bool:
        started.set()
        await asyncio.sleep(0.05)
        return False

    worker, running = await _worker_running(temporal_env, idle_pass)
    await asyncio.wait_for(started.wait(), 60)
    assert await stop_worker(worker, within=60.0) is True
    assert running.done()
    with contextlib.suppress(asyncio.CancelledError):
        assert running.exception() is None
