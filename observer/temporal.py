"""The observer as Temporal activities (``task-observer observer --mode temporal``).

Choice: **long-running, heartbeating activities** rather than many short
scheduled passes.  The relay must react to a commit within milliseconds (it
is woken, see ``status.infra.wakeup``); a workflow timer + activity per pass
would write several history events per pass (thousands per minute).  Instead one
``ObserverWorkflow`` per component runs an activity that loops passes for a
bounded period (``run_seconds``), heartbeating after every pass; if a worker
dies, the heartbeat timeout hands the component to another worker, and the
database's ``SKIP LOCKED`` claims keep any overlap safe.  The workflow
continues-as-new periodically so its history stays small.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.common import RetryPolicy

COMPONENTS = ("relay", "projector", "reconciler", "retention", "runs", "completions")
TASK_QUEUE = "task-observer"


@dataclass
class RunComponent:
    component: str
    run_seconds: float = 60.0


@dataclass
class ObserverInput:
    component: str
    run_seconds: float = 60.0
    iterations_before_continue: int = 100


class ObserverActivities:
    """Activities bound to one process's passes (relay, projector, reconciler, retention)."""

    def __init__(
        self,
        passes: dict[str, Callable[[], Awaitable[object]]],
        idle_sleep: dict[str, float],
        wake: dict[str, asyncio.Event] | None = None,
    ) -> None:
        self.passes = passes
        self.idle_sleep = idle_sleep
        # Components with a wake-up sleep until it (or their idle sleep, the safety poll) comes.
        self.wake = wake or {}

    @activity.defn(name="task_observer.run_component")
    async def run_component(self, request: RunComponent) -> int:
        """Loop one component's passes for ``run_seconds``; heartbeat after each pass."""
        run_pass = self.passes[request.component]
        wake = self.wake.get(request.component) or asyncio.Event()
        deadline = time.monotonic() + request.run_seconds
        busy_passes = 0
        while time.monotonic() < deadline:
            wake.clear()  # before the pass: a commit during it wakes the next one
            result = await run_pass()
            activity.heartbeat(busy_passes)
            if result:
                busy_passes += 1
            else:
                idle = min(self.idle_sleep.get(request.component, 0.1), max(0.0, deadline - time.monotonic()))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), idle)
        return busy_passes


@workflow.defn(name="TaskObserverComponent")
class ObserverWorkflow:
    @workflow.run
    async def run(self, params: ObserverInput) -> None:
        for _ in range(params.iterations_before_continue):
            await workflow.execute_activity(
                "task_observer.run_component",
                RunComponent(params.component, params.run_seconds),
                start_to_close_timeout=timedelta(seconds=params.run_seconds + 60),
                heartbeat_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)),
            )
        workflow.continue_as_new(params)
