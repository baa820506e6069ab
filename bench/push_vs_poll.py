"""Push (this project) vs. polling Temporal's describe API every second (design D16).

    .venv/bin/python bench/push_vs_poll.py [--workflows 20] [--steps 3] [--step-seconds 6]

The same workload runs three times on one Temporal dev server: K workflows
whose visible state changes every ``step-seconds`` (one activity per step,
heartbeating every 2 s), started one after another over one step interval
so that changes arrive at a steady rate, as they do for independent tasks.

* baseline: no observer at all (measures what the workload itself costs Temporal);
* poll: a separate poller process calls ``describe`` on every workflow each
  second and notices when a new step starts — what a backend would do to feed
  a live view without this project;
* push: the worker has TaskStatusPlugin; the status API and the observer run
  as separate processes on MariaDB, Centrifugo delivers to a WebSocket client.

Latency to see an update = when the viewer first sees a step as started − when
the step's activity started. Server CPU per update = CPU of the processes that
make the view (poll: poller + Temporal's extra CPU over the baseline; push:
status API + observer + Centrifugo + Temporal's extra CPU), from /proc, divided
by the number of step starts. One run; figures and ratios are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from common import (  # type: ignore[import-not-found]
    REPO,
    create_tasks_http,
    percentile,
    scratch_database,
    stack_env,
    wait_observer_settled,
)
from push_poll_workflows import STEP_STARTED_AT, SteppedWorkflow, slow_step  # type: ignore[import-not-found]
from task_status_interceptors import TaskStatusPlugin
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from status.domain.auth import Role, UserPrincipal
from status.infra.tokens import RealtimeTokens, ServiceTokens
from tests.support.processes import CentrifugoNode, free_port, temporal_binary, wait_until
from tests.support.realtime import recording_client

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (and its waited-for children), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(fields[i]) for i in (11, 12, 13, 14))
    return (utime + stime + cutime + cstime) / TICK


# ---------------------------------------------------------------------------- poller process


async def poll_forever(address: str, workflow_ids: list[str], seconds: float) -> None:
    """Describe every workflow each second; print when a new activity is seen running."""
    client = await Client.connect(address)
    cpu_at_start = time.process_time()  # leave interpreter start-up and imports out
    print(json.dumps({"ready": True}), flush=True)
    seen: set[tuple[str, str]] = set()
    done: set[str] = set()
    end = time.monotonic() + seconds
    next_round = time.monotonic()
    while time.monotonic() < end and len(done) < len(workflow_ids):
        for wf in workflow_ids:
            if wf in done:
                continue
            try:
                description = await client.get_workflow_handle(wf).describe()
            except RPCError as error:
                if error.status == RPCStatusCode.NOT_FOUND:
                    continue  # not started yet
                raise
            for pending in description.raw_description.pending_activities:
                key = (wf, pending.activity_id)
                # PENDING_ACTIVITY_STATE_STARTED == 2
                if pending.state == 2 and key not in seen:
                    seen.add(key)
                    print(json.dumps({"wf": wf, "activityId": pending.activity_id, "seen": time.time()}), flush=True)
            if description.status is not None and description.status.name != "RUNNING":
                done.add(wf)
        next_round += 1.0
        await asyncio.sleep(max(0.0, next_round - time.monotonic()))
    # The whole process, all threads (the SDK's Rust runtime included).
    print(json.dumps({"cpu": time.process_time() - cpu_at_start}), flush=True)


# ---------------------------------------------------------------------------- benchmark


class Phase:
    def __init__(self, name: str) -> None:
        self.name = name
        self.latencies_ms: list[float] = []
        self.cpu_seconds = 0.0
        self.changes = 0
        self.temporal_cpu = 0.0


async def start_staggered(
    client: Client, queue: str, ids: list[str], task_ids: list[str], steps: int, step_seconds: float
) -> list[Any]:
    """Start the workflows spread over one step interval: independent tasks change at a steady rate."""
    handles = []
    for i, (wid, tid) in enumerate(zip(ids, task_ids, strict=True)):
        handles.append(
            await client.start_workflow(SteppedWorkflow.run, args=[tid, steps, step_seconds], id=wid, task_queue=queue)
        )
        if i < len(ids) - 1:
            await asyncio.sleep(step_seconds / len(ids))
    return handles


async def run_workload(
    client: Client, plugins: list[Any], task_ids: list[str], steps: int, step_seconds: float
) -> list[str]:
    queue = f"pvp-{uuid.uuid4().hex[:6]}"
    ids = [f"pvp-{uuid.uuid4().hex[:10]}" for _ in task_ids]
    async with Worker(client, task_queue=queue, workflows=[SteppedWorkflow], activities=[slow_step], plugins=plugins):
        handles = await start_staggered(client, queue, ids, task_ids, steps, step_seconds)
        await asyncio.gather(*[h.result() for h in handles])
        if plugins:
            await plugins[0].reporter.drained(60)
    return ids


async def poll_phase(
    client: Client,
    address: str,
    tmp: Path,
    k: int,
    steps: int,
    step_seconds: float,
    viewers: int,
    baseline: Phase,
    temporal_pid: int,
) -> Phase:
    """``viewers`` pages per task, each polling: one poller process per viewer describing every workflow each second."""
    # Poll: a separate poller process describing every workflow each second.
    poll = Phase(f"poll, {viewers} viewer(s)")
    ids_file = tmp / "ids.json"
    ids = [f"pvp-{uuid.uuid4().hex[:10]}" for _ in range(k)]
    ids_file.write_text(json.dumps(ids))
    STEP_STARTED_AT.clear()
    before = cpu_seconds(temporal_pid)
    queue = f"pvp-{uuid.uuid4().hex[:6]}"
    async with Worker(client, task_queue=queue, workflows=[SteppedWorkflow], activities=[slow_step]):
        pollers = [
            subprocess.Popen(
                [sys.executable, __file__, "--poll-worker", address, str(ids_file), str(2 * steps * step_seconds + 60)],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            for _ in range(viewers)
        ]
        for poller in pollers:
            assert poller.stdout is not None
            await asyncio.to_thread(poller.stdout.readline)  # connected and polling
        handles = await start_staggered(client, queue, ids, [""] * k, steps, step_seconds)
        await asyncio.gather(*[h.result() for h in handles])
        outputs = [(await asyncio.to_thread(poller.communicate))[0] for poller in pollers]
    poll.temporal_cpu = cpu_seconds(temporal_pid) - before
    poller_cpu = 0.0
    for index, out in enumerate(outputs):
        for line in out.decode().splitlines():
            record = json.loads(line)
            if "ready" in record:
                continue
            if "cpu" in record:
                poller_cpu += float(record["cpu"])
                continue
            started = STEP_STARTED_AT.get((record["wf"], int(record["activityId"]) - 1))
            if started is not None and index == 0:  # latency as one viewer sees it
                poll.latencies_ms.append((record["seen"] - started) * 1000)
    poll.changes = len(poll.latencies_ms)
    poll.cpu_seconds = poller_cpu + max(0.0, poll.temporal_cpu - baseline.temporal_cpu)
    return poll


async def push_phase(  # noqa: C901
    client: Client,
    node: CentrifugoNode,
    tmp: Path,
    k: int,
    steps: int,
    step_seconds: float,
    viewers: int,
    baseline: Phase,
    processes: list[subprocess.Popen[bytes]],
    temporal_pid: int,
) -> tuple[Phase, str]:
    """``viewers`` open pages per task (WebSocket connections of its owner); the server side does not
    change with them but for Centrifugo's fan-out."""
    # Push: plugin → status API → outbox → observer → Centrifugo → WebSocket client.
    push = Phase(f"push, {viewers} viewer(s)")
    with scratch_database() as url:
        secrets_env = stack_env(url, node, tmp)
        env = {**os.environ, **secrets_env}
        cli = str(REPO / ".venv" / "bin" / "task-observer")
        port = free_port()
        api = subprocess.Popen(
            [cli, "serve", "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        observer = subprocess.Popen(
            [cli, "observer", "--mode", "loops"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        processes += [api, observer]
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: _ready(base), 60, "status API")
        wait_observer_settled(url)  # its start-up is not a change's cost
        token = ServiceTokens(secrets_env["TASK_OBSERVER_SERVICE_TOKEN_SECRET"]).issue(
            "pvp-worker", "bench", "s", [Role.WORKER, Role.COORDINATOR]
        )
        user = UserPrincipal("bench", "viewer")
        conn_token, _ = RealtimeTokens(node.token_secret, 600).connection(user, ["task_user:bench/viewer"])
        clients = [recording_client(node.ws_url, conn_token) for _ in range(viewers)]
        for ws_client, recording in clients:
            await ws_client.connect()
            await recording.next_subscribed()
        ws, recorder = clients[0]  # latency as one viewer sees it; the others only receive

        task_ids = create_tasks_http(base, token, k, steps, owner="viewer")
        seen: dict[tuple[str, str], float] = {}

        async def watch() -> None:
            while True:
                _, _, data = await recorder.publications.get()
                current = (data.get("currentStep") or {}).get("stepId")
                if data.get("kind") == "task.summary" and current:
                    seen.setdefault((data["taskId"], current), time.time())

        watcher = asyncio.create_task(watch())
        cpu_before = {p.pid: cpu_seconds(p.pid) for p in (api, observer, node.process) if p}
        before = cpu_seconds(temporal_pid)
        STEP_STARTED_AT.clear()
        plugin = TaskStatusPlugin(base, token, outbox_path=tmp / "pvp-outbox.sqlite3", heartbeat_interval=2.0)
        wf_ids = await run_workload(client, [plugin], task_ids, steps, step_seconds)
        # Let the last messages through before reading the meters.
        wait_deadline = time.monotonic() + 15
        while len(seen) < k * steps and time.monotonic() < wait_deadline:
            await asyncio.sleep(0.1)
        push.temporal_cpu = cpu_seconds(temporal_pid) - before
        spent = {pid: cpu_seconds(pid) - cpu for pid, cpu in cpu_before.items()}
        push_cpu = sum(spent.values())
        names = {
            api.pid: "status API",
            observer.pid: "observer",
            node.process.pid if node.process else 0: "Centrifugo",
        }
        breakdown = ", ".join(f"{names.get(pid, pid)} {cpu:.2f} s" for pid, cpu in spent.items())
        watcher.cancel()
        for ws_client, _ in clients:
            await ws_client.disconnect()
        for wf, tid in zip(wf_ids, task_ids, strict=True):
            for i in range(steps):
                started = STEP_STARTED_AT.get((wf, i))
                shown = seen.get((tid, f"s{i:02d}"))
                if started is not None and shown is not None:
                    push.latencies_ms.append((shown - started) * 1000)
        push.changes = len(push.latencies_ms)
        push.cpu_seconds = push_cpu + max(0.0, push.temporal_cpu - baseline.temporal_cpu)
        for p in (api, observer):
            p.terminate()
            p.wait(15)
    return push, breakdown


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflows", type=int, default=20)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--step-seconds", type=float, default=6.0)
    parser.add_argument(
        "--viewers",
        type=lambda text: [int(v) for v in text.split(",")],
        default=[1, 10],
        help="open pages per task, comma-separated (polling cost grows with them, push does not)",
    )
    parser.add_argument("--poll-worker", nargs=3, metavar=("ADDRESS", "IDS_FILE", "SECONDS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.poll_worker:
        address, ids_file, seconds = args.poll_worker
        await poll_forever(address, json.loads(Path(ids_file).read_text()), float(seconds))
        return

    k, steps, step_seconds = args.workflows, args.steps, args.step_seconds
    tmp = Path(tempfile.mkdtemp())
    temporal_port = free_port()
    temporal = subprocess.Popen(
        [
            str(temporal_binary()),
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(temporal_port),
            "--ui-port",
            str(free_port()),
            "--log-level",
            "error",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    address = f"127.0.0.1:{temporal_port}"
    temporal_pid = temporal.pid
    processes: list[subprocess.Popen[bytes]] = [temporal]
    node = CentrifugoNode(workdir=tmp).start()
    try:
        client = None
        for _ in range(300):
            try:
                client = await Client.connect(address)
                break
            except Exception:
                await asyncio.sleep(0.2)
        assert client is not None, "Temporal dev server did not start"

        # Warm-up, then the baseline: the workload alone.
        await run_workload(client, [], [""] * 2, 1, 0.1)
        baseline = Phase("baseline")
        before = cpu_seconds(temporal_pid)
        await run_workload(client, [], [""] * k, steps, step_seconds)
        baseline.temporal_cpu = cpu_seconds(temporal_pid) - before

        phases = []
        for viewers in args.viewers:
            poll = await poll_phase(client, address, tmp, k, steps, step_seconds, viewers, baseline, temporal_pid)
            push, breakdown = await push_phase(
                client, node, tmp, k, steps, step_seconds, viewers, baseline, processes, temporal_pid
            )
            phases.append((viewers, poll, push, breakdown))
    finally:
        node.stop()
        for p in processes:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()

    expected = k * steps
    print(f"workload: {k} workflows x {steps} steps, one change every {step_seconds:g} s per task; {expected} changes")
    print(f"temporal CPU for the workload alone: {baseline.temporal_cpu:.2f} s")
    for viewers, poll, push, breakdown in phases:
        print(f"-- {viewers} viewer(s) per task; push-path CPU by process: {breakdown}")
        for phase in (poll, push):
            per_change = phase.cpu_seconds / max(1, phase.changes) * 1000
            p50 = percentile(phase.latencies_ms, 0.5)
            print(
                f"{phase.name:28s} seen {phase.changes}/{expected}  latency p50 {p50:6.0f} ms"
                f"  p99 {percentile(phase.latencies_ms, 0.99):6.0f} ms   server CPU {phase.cpu_seconds:6.2f} s"
                f" = {per_change:6.2f} ms per change"
            )
        poll_cpu = poll.cpu_seconds / max(1, poll.changes)
        push_cpu_per = push.cpu_seconds / max(1, push.changes)
        latency_ratio = percentile(poll.latencies_ms, 0.5) / max(1e-9, percentile(push.latencies_ms, 0.5))
        print(
            f"ratios (poll / push), {viewers} viewer(s): latency p50 {latency_ratio:.1f}x"
            f"   CPU per change {poll_cpu / max(1e-9, push_cpu_per):.1f}x"
            f"   (target: push <= 1/10 of polling = {poll_cpu * 100:.2f} ms per change)"
        )


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    from examples.process import run_then_exit

    run_then_exit(main())
