"""Temporal's verdict under load: how soon tasks end after their runs close, and what it costs.

    .venv/bin/python bench/run_verdicts.py [--seconds 30] [--rate 10] [--idle 1000]

A real Temporal dev server and a scratch MariaDB. The run follower runs in its own process (as
in the observer) on its shipped interval. This process is the load: ``--rate`` runs close per
second, cycling through terminate, cancel (not handled), execution timeout, complete, fail, and a
workflow retried by its RetryPolicy (one that completes on its second attempt, one that fails both:
the task follows the chain and ends with its last run; convergence counts from that run's close),
each owning one task created through the status service (no plugin: nothing but Temporal's
record ends them). One more way, ``elsewhere``, ends a step mid-run: its activity completes
through its task token while the run goes on (the step was activated as the plugin would, its
last heartbeat saying so); convergence counts from Temporal's ActivityTaskCompleted to the
step's commit, by the observer's completion watch, which runs beside the follower. The
measurement runs twice in the same process tree, first with no other open tasks, then with
``--idle`` open tasks owned by runs that never close, and prints:
convergence p50/p99 from the run's close (Temporal's CloseTime) to the task's terminal commit,
the follower's Temporal RPCs per minute (which must not grow with the open tasks), and its CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, timedelta
from typing import Any, NoReturn

import sqlalchemy as sa
import verdict_bench_workflows as bench_workflows  # type: ignore[import-not-found]
from common import REPO, percentile, process_tree_cpu, scratch_database  # type: ignore[import-not-found]
from temporalio.common import RetryPolicy
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from verdict_bench_workflows import EndsWorkflow, goes_async  # type: ignore[import-not-found]

from status.app import commands as c
from status.bootstrap import build_service
from status.domain.auth import Role, ServicePrincipal
from status.infra import tables as t
from tests.support.processes import TEMPORAL_STARTUP, temporal_binary
from tests.support.settings import make_settings

WAYS = ("terminate", "cancel", "timeout", "complete", "fail", "retried", "retried_out", "elsewhere")
TENANT = "bench-verdicts"
STEP = "01_wait"


def _completes_elsewhere(service: Any, task_id: str, workflow_id: str, run_id: str) -> None:
    """What the plugin does for an activity that goes asynchronous: activate the step with its
    Temporal activity, report it started, and send the heartbeat that says it completes elsewhere."""
    coordinator = ServicePrincipal("bench", TENANT, "content", frozenset({Role.COORDINATOR}))
    worker = ServicePrincipal("bench-worker", TENANT, "content", frozenset({Role.WORKER}))
    ctx = service.activate_step(
        coordinator,
        c.ActivateStep(
            task_id,
            STEP,
            1,
            "bench-worker",
            temporal_activity=c.TemporalActivity("default", workflow_id, run_id, "1"),
        ),
    )
    claims = service._tokens.verify(ctx.execution_token, service.now())
    service.report_event(
        claims,
        c.ReportEvent(
            event_id=f"{ctx.execution_id}:started",
            event_type="STEP_STARTED",
            source_seq=1,
            occurred_at=service.now(),
        ),
    )
    service.record_heartbeats(worker, [c.Heartbeat(1, execution_handle=ctx.execution_handle, completes_elsewhere=True)])


def follower_main(database_url: str, address: str, seconds: float) -> NoReturn:
    """The follower process: the shipped RunFollower on the shipped interval, for ``seconds``."""
    from temporalio.client import Client

    from observer.activities import ActivityProbe
    from observer.loops import LoopConfig, Reconciler
    from observer.runs import RunFollower

    settings = make_settings(database_url, REPO / ".cache")
    service = build_service(settings)

    async def run() -> None:
        client = await Client.connect(address)

        async def connect(namespace: str) -> Client:
            return client

        follower = RunFollower(service, connect, ["default"])
        probe = ActivityProbe(connect)
        probe.bind(asyncio.get_running_loop())
        reconciler = Reconciler(service, LoopConfig(), probe)
        deadline = time.monotonic() + seconds

        async def every(run_pass: Any) -> None:  # as ObserverLoops runs them: each on its own cadence
            interval = LoopConfig().run_follow_interval
            while time.monotonic() < deadline:
                started = time.monotonic()
                await run_pass()
                await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

        await asyncio.gather(every(follower.run_once), every(lambda: asyncio.to_thread(reconciler.watch_completions)))
        print(json.dumps({"rpcs": follower.rpcs, "completion_rpcs": probe.rpcs}), flush=True)

    from examples.process import run_then_exit

    run_then_exit(run())


def _task(service: Any, coordinator: ServicePrincipal, workflow_id: str, run_id: str | None) -> str:
    created = service.create_workflow(
        coordinator,
        c.CreateWorkflow(
            client_workflow_key=f"{workflow_id}-{uuid.uuid4().hex[:6]}",
            owner_id="bench-user",
            title=workflow_id,
            initial_tasks=(
                c.NewTask(client_task_key="job", title=workflow_id, known_steps=(c.KnownStep(STEP, "DOCUMENT.PARSE"),)),
            ),
            temporal_owner=c.TemporalOwner("default", workflow_id, run_id),
        ),
    )
    return str(created["tasks"][0]["taskId"])


async def phase(env: WorkflowEnvironment, database_url: str, seconds: float, rate: float) -> dict[str, Any]:  # noqa: C901
    settings = make_settings(database_url, REPO / ".cache")
    service = build_service(settings)
    coordinator = ServicePrincipal("bench", TENANT, "content", frozenset({Role.COORDINATOR}))
    follower = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--follower",
            database_url,
            env.client.service_client.config.target_host,
            str(seconds + 15),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'interceptors'}:{REPO / 'bench'}"},
    )
    cpu_before = process_tree_cpu(follower.pid)
    runs: list[tuple[str, Any, str]] = []  # (way, handle, task id)
    queue = f"bench-verdicts-{uuid.uuid4().hex[:6]}"
    bench_workflows.tokens = asyncio.Queue()
    async with Worker(env.client, task_queue=queue, workflows=[EndsWorkflow], activities=[goes_async]):
        started = time.monotonic()
        i = 0
        while time.monotonic() - started < seconds:
            way = WAYS[i % len(WAYS)]
            wid = f"bench-{way}-{uuid.uuid4().hex[:8]}"
            how = {
                "complete": "complete",
                "fail": "fail",
                "retried": "fail_once",
                "retried_out": "fail_always",
                "elsewhere": "elsewhere",
            }.get(way, "wait")
            kwargs: dict[str, Any] = {"execution_timeout": timedelta(seconds=2)} if way == "timeout" else {}
            if way.startswith("retried"):  # a workflow retry: the task follows the chain to its last run
                kwargs["retry_policy"] = RetryPolicy(initial_interval=timedelta(milliseconds=100), maximum_attempts=2)
            handle = await env.client.start_workflow(EndsWorkflow.run, how, id=wid, task_queue=queue, **kwargs)
            task_id = await asyncio.to_thread(_task, service, coordinator, wid, handle.result_run_id)
            if way == "terminate":
                await handle.terminate(reason="bench")
            elif way == "cancel":
                await handle.cancel()
            elif way == "elsewhere":
                _, token = await bench_workflows.tokens.get()
                await asyncio.to_thread(_completes_elsewhere, service, task_id, wid, handle.result_run_id)
                await env.client.get_async_activity_handle(task_token=token).complete("approved")
            runs.append((way, handle, task_id))
            i += 1
            await asyncio.sleep(max(0.0, started + i / rate - time.monotonic()))
        # Wait for every task to end (bounded), then read close times and commit times; a run whose
        # step completed elsewhere ends once its step has (it is terminated then).
        deadline = time.monotonic() + 30
        elsewhere = [(handle, task_id) for way, handle, task_id in runs if way == "elsewhere"]
        while elsewhere and time.monotonic() < deadline:
            with service.db.engine.connect() as conn:
                done = set(
                    conn.scalars(
                        sa.select(t.task_step.c.task_id).where(
                            t.task_step.c.task_id.in_([task_id for _, task_id in elsewhere]),
                            t.task_step.c.lifecycle_status == "SUCCEEDED",
                        )
                    )
                )
            for handle, _ in [e for e in elsewhere if e[1] in done]:
                await handle.terminate(reason="bench: its step ended")
            elsewhere = [e for e in elsewhere if e[1] not in done]
            await asyncio.sleep(0.2)
        ids = [task_id for *_, task_id in runs]
        while time.monotonic() < deadline:
            with service.db.engine.connect() as conn:
                open_left = conn.execute(
                    sa.select(sa.func.count())
                    .select_from(t.task)
                    .where(t.task.c.id.in_(ids), t.task.c.lifecycle_status.in_(["PENDING", "RUNNING"]))
                ).scalar_one()
            if not open_left:
                break
            await asyncio.sleep(0.2)
    cpu = process_tree_cpu(follower.pid) - cpu_before
    out, _ = follower.communicate(timeout=60)
    counts = json.loads(out.strip().splitlines()[-1])
    rpcs = counts["rpcs"]
    lags: dict[str, list[float]] = {way: [] for way in WAYS}
    steps = await _step_lags(service, env, [(h, task_id) for way, h, task_id in runs if way == "elsewhere"])
    with service.db.engine.connect() as conn:
        finished = dict(
            conn.execute(
                sa.select(t.task_event_log.c.task_id, sa.func.max(t.task_event_log.c.committed_at))
                .where(
                    t.task_event_log.c.task_id.in_(ids),
                    t.task_event_log.c.event_type.like("TASK_%"),
                    t.task_event_log.c.event_type != "TASK_CREATED",
                )
                .group_by(t.task_event_log.c.task_id)
            ).all()
        )
    for way, handle, task_id in runs:
        if way == "elsewhere":
            continue  # its run was ended by the bench; its step's convergence is counted apart
        closed = (await handle.describe()).close_time
        if closed is None or task_id not in finished:
            continue
        lags[way].append((finished[task_id].replace(tzinfo=UTC) - closed).total_seconds())
    every = [x for values in lags.values() for x in values]
    return {
        "runs": len(runs),
        "ended": len(every),
        "p50_s": round(percentile(every, 0.5), 2),
        "p99_s": round(percentile(every, 0.99), 2),
        "by_way_p99_s": {way: round(percentile(v, 0.99), 2) for way, v in lags.items() if v},
        "step_completed_elsewhere": {
            "steps": len(steps),
            "p50_s": round(percentile(steps, 0.5), 2),
            "p99_s": round(percentile(steps, 0.99), 2),
            "completion_rpcs_per_min": round(counts["completion_rpcs"] / ((seconds + 15) / 60), 1),
        },
        "rpcs_per_min": round(rpcs / ((seconds + 15) / 60), 1),
        "follower_cpu_s": round(cpu, 2),
        "follower_cpu_ms_per_run": round(1000 * cpu / max(1, len(runs)), 1),
    }


async def _step_lags(service: Any, env: WorkflowEnvironment, runs: list[tuple[Any, str]]) -> list[float]:
    """Temporal's ActivityTaskCompleted to the step's STEP_COMPLETED commit, per run."""
    from temporalio.api.enums.v1 import EventType as HistoryEventType

    lags = []
    for handle, task_id in runs:
        recorded = [
            e.event_time.ToDatetime(tzinfo=UTC)
            async for e in handle.fetch_history_events()
            if e.event_type == HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
        ]
        with service.db.engine.connect() as conn:
            committed = conn.scalar(
                sa.select(t.task_event_log.c.committed_at).where(
                    t.task_event_log.c.task_id == task_id, t.task_event_log.c.event_type == "STEP_COMPLETED"
                )
            )
        if recorded and committed is not None:
            lags.append((committed.replace(tzinfo=UTC) - recorded[0]).total_seconds())
    return lags


async def main(args: argparse.Namespace) -> None:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_binary()),
        dev_server_startup_timeout=TEMPORAL_STARTUP,
        dev_server_log_level="error",
    )
    try:
        with scratch_database() as url:
            build_service(make_settings(url, REPO / ".cache")).install_default_definitions()
            quiet = await phase(env, url, args.seconds, args.rate)
            service = build_service(make_settings(url, REPO / ".cache"))
            coordinator = ServicePrincipal("bench", TENANT, "content", frozenset({Role.COORDINATOR}))
            for n in range(args.idle):  # open tasks owned by runs that never close
                _task(service, coordinator, f"idle-{n}", None)
            loaded = await phase(env, url, args.seconds, args.rate)
    finally:
        await env.shutdown()
    print(json.dumps({"open_tasks_0": quiet, f"open_tasks_{args.idle}": loaded}, indent=2))
    ratio = loaded["rpcs_per_min"] / max(0.1, quiet["rpcs_per_min"])
    print(f"RPCs per minute with {args.idle} more open tasks: x{ratio:.2f} (the same closes in both phases)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--follower":
        follower_main(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="how long runs close in each phase")
    parser.add_argument("--rate", type=float, default=10.0, help="runs closing per second")
    parser.add_argument("--idle", type=int, default=1000, help="open tasks of runs that never close (phase 2)")
    from examples.process import run_then_exit

    run_then_exit(main(parser.parse_args()))
