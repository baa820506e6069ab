"""Workflows that use the Temporal features real workflows use every day (own module: the sandbox
re-imports workflow modules): workflow retries, cron, a reused workflow id, continue-as-new,
thread-pool, process-pool and local activities under each cancellation type, asynchronous
completion, child workflows under each parent close policy, signals, queries and updates."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from task_status_interceptors import TaskStatus, task_step

    from tests.support import stuck_switch

# Task tokens of activities that went asynchronous, for the test to complete them (activities run
# outside the sandbox, in the test's process).
async_tokens: asyncio.Queue[bytes] | None = None


@activity.defn
async def quick() -> str:
    return "done"


@activity.defn
def sync_work(seconds: float) -> str:
    """A thread-pool (or process-pool) activity that heartbeats: Temporal's cancellation reaches it
    through its heartbeat (raised into its thread; in a process, the next heartbeat raises)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        activity.heartbeat()
        if activity.is_cancelled():  # how a process-pool activity learns of it (no exception arrives)
            raise CancelledError("cancelled")
        time.sleep(0.05)
    return "done"


@activity.defn
async def quiet_work(seconds: float) -> str:
    """Never heartbeats: it never hears of a cancellation."""
    await asyncio.sleep(seconds)
    return "done"


@activity.defn
async def beating_work(seconds: float) -> str:
    """An ``async def`` that heartbeats: it hears of a cancellation (asyncio.CancelledError)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        activity.heartbeat()
        await asyncio.sleep(0.05)
    return "done"


@activity.defn
async def refuses() -> str:
    raise ApplicationError("the input is unreadable", type="UNREADABLE", non_retryable=True)


@activity.defn
async def silent_first_attempt(seconds: float) -> str:
    """Attempt 1 stops heartbeating (Temporal times it out on its heartbeat); later attempts succeed."""
    if activity.info().attempt == 1:
        await asyncio.sleep(seconds)
    return "done"


@activity.defn
def returns_after_timeout(seconds: float) -> str:
    """A thread-pool attempt 1 that heartbeats once and then works past its heartbeat timeout
    without a word (it never hears that Temporal timed it out) and returns; later attempts return
    at once. Temporal refuses attempt 1's result ("Activity not found on completion")."""
    if activity.info().attempt == 1:
        activity.heartbeat()
        time.sleep(seconds)
    return "done"


@activity.defn
async def completed_later() -> str:
    """Hands its task token to the test, which completes it through the client."""
    assert async_tokens is not None
    async_tokens.put_nowait(activity.info().task_token)
    activity.raise_complete_async()


_WORK = {"stepId": "01_work", "operationCode": "DOCUMENT.PARSE", "displayName": "Work"}


@dataclass
class Plan:
    owner: str
    title: str
    # fail_first | fail_always | plain | sync_wait | async_wait | quiet_wait | local | async_complete | hold |
    # async_then_hold | continue | heartbeat_lost | returns_late | refuses_first | stuck
    how: str
    seconds: float = 60.0
    cancellation: str = "TRY_CANCEL"  # how the workflow cancels its activity (ActivityCancellationType)


@workflow.defn
class FeatureWorkflow:
    def __init__(self) -> None:
        self.released = False
        self.bumps = 0

    @workflow.signal
    def release(self) -> None:
        self.released = True

    @workflow.query
    def bumped(self) -> int:
        return self.bumps

    @workflow.update
    def bump(self, by: int) -> int:
        self.bumps += by
        return self.bumps

    @workflow.run
    async def run(self, plan: Plan) -> str:  # noqa: C901
        created = await TaskStatus.create_workflow(
            plan.owner,
            plan.title,
            [
                {
                    "clientTaskKey": "job",
                    "title": plan.title,
                    "knownSteps": [_WORK],
                }
            ],
        )
        task_id: str = created["tasks"][0]["taskId"]
        once = RetryPolicy(maximum_attempts=1)
        cancellation = workflow.ActivityCancellationType[plan.cancellation]
        with task_step(task_id, "01_work"):
            if plan.how == "sync_wait":
                await workflow.execute_activity(
                    sync_work,
                    plan.seconds,
                    start_to_close_timeout=timedelta(minutes=5),
                    heartbeat_timeout=timedelta(seconds=2),
                    retry_policy=once,
                    cancellation_type=cancellation,
                )
            elif plan.how == "async_wait":
                await workflow.execute_activity(
                    beating_work,
                    plan.seconds,
                    start_to_close_timeout=timedelta(minutes=5),
                    heartbeat_timeout=timedelta(seconds=2),
                    retry_policy=once,
                    cancellation_type=cancellation,
                )
            elif plan.how == "step_fails":
                await workflow.execute_activity(refuses, start_to_close_timeout=timedelta(seconds=10))
            elif plan.how == "quiet_wait":
                await workflow.execute_activity(
                    quiet_work,
                    plan.seconds,
                    start_to_close_timeout=timedelta(minutes=5),
                    retry_policy=once,
                    cancellation_type=cancellation,
                )
            elif plan.how == "local":
                await workflow.execute_local_activity(quick, start_to_close_timeout=timedelta(seconds=10))
            elif plan.how in ("async_complete", "async_then_hold"):
                await workflow.execute_activity(
                    completed_later, start_to_close_timeout=timedelta(minutes=1), retry_policy=once
                )
            elif plan.how == "heartbeat_lost":
                await workflow.execute_activity(
                    silent_first_attempt,
                    plan.seconds,
                    start_to_close_timeout=timedelta(minutes=1),
                    heartbeat_timeout=timedelta(seconds=1),
                    retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=3),
                )
            elif plan.how == "returns_late":
                await workflow.execute_activity(
                    returns_after_timeout,
                    plan.seconds,
                    start_to_close_timeout=timedelta(minutes=1),
                    heartbeat_timeout=timedelta(seconds=2),
                    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=3), maximum_attempts=3),
                )
            elif plan.how == "refuses_first" and workflow.info().attempt == 1:
                # A non-retryable activity error fails this run; the workflow's own policy retries it.
                await workflow.execute_activity(refuses, start_to_close_timeout=timedelta(seconds=10))
            else:
                await workflow.execute_activity(quick, start_to_close_timeout=timedelta(seconds=10))
        if plan.how == "stuck" and stuck_switch.broken:
            raise RuntimeError("a bug in workflow code")  # fails the workflow task: Temporal retries it
        if plan.how in ("hold", "async_then_hold", "stuck"):
            await workflow.wait_condition(lambda: self.released)
        if plan.how == "continue" and workflow.info().continued_run_id is None:
            workflow.continue_as_new(replace(plan, how="plain"))
        if plan.how == "fail_always" or (plan.how == "fail_first" and workflow.info().attempt == 1):
            raise ApplicationError("the dependency was down", type="DEPENDENCY_DOWN")  # retryable
        return task_id


@dataclass
class Family:
    owner: str
    title: str
    policy: str  # ParentClosePolicy of the child: TERMINATE | REQUEST_CANCEL | ABANDON
    hand_over: bool = False  # the parent's own task is handed to the child, which adopts it
    child_fails: bool = False


@workflow.defn
class ParentWorkflow:
    """Starts a child that holds (its own task) and closes when signalled, leaving the child to its
    parent close policy; or hands its own task to a child that adopts it and does the work."""

    def __init__(self) -> None:
        self.released = False

    @workflow.signal
    def release(self) -> None:
        self.released = True

    @workflow.run
    async def run(self, family: Family) -> str:
        child_id = f"{workflow.info().workflow_id}-child"
        if family.hand_over:
            created = await TaskStatus.create_workflow(
                family.owner, family.title, [{"clientTaskKey": "job", "title": family.title, "knownSteps": [_WORK]}]
            )
            task_id: str = created["tasks"][0]["taskId"]
            await TaskStatus.hand_over(task_id, child_id)
            await workflow.execute_child_workflow(AdoptingWorkflow.run, args=[task_id, family.child_fails], id=child_id)
            return task_id
        await workflow.start_child_workflow(
            FeatureWorkflow.run,
            Plan(family.owner, f"{family.title}-child", "hold"),
            id=child_id,
            parent_close_policy=workflow.ParentClosePolicy[family.policy],
        )
        await workflow.wait_condition(lambda: self.released)  # the test lets it close
        return child_id


@workflow.defn
class AdoptingWorkflow:
    @workflow.run
    async def run(self, task_id: str, fails: bool) -> str:
        await TaskStatus.adopt(task_id)
        with task_step(task_id, "01_work"):
            await workflow.execute_activity(quick, start_to_close_timeout=timedelta(seconds=10))
        if fails:
            raise ApplicationError("the child could not do it", type="CHILD_FAILED", non_retryable=True)
        return task_id
