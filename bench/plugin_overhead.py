"""Plugin overhead: the same worker with and without TaskStatusPlugin (design D16).

    .venv/bin/python bench/plugin_overhead.py [--workflows 40] [--steps 20] [--worker-core]

Same workflow, same machine, one run: a real Temporal dev server, the status
API as a separate process on MariaDB, and the plugin delivering to it.  The
two costs are printed apart: the worker process's CPU per activity (this
process: the worker, its Temporal core threads and the plugin's reporter,
until its outbox is drained) with and without the plugin, and the status
API's CPU per activity; throughput beside them.  The plugin runs three times: reporting
over REST, over the gRPC adapter (``grpc_target``), and answered in this process (its own
cost, without the API and its database busy on the same cores). Each thread group's CPU and
context switches per activity are printed after the figures.

The anchor (design D16: no dearer than Temporal's own tracing) is measured in the same run:
``temporalio.contrib.opentelemetry``'s TracingInterceptor on the same workflows, with the
OpenTelemetry SDK's tracer provider and a batch span processor into an exporter that keeps
nothing — what a worker with tracing on pays, less the network.

``--worker-core``: this process (the worker) on CPU 0, the Temporal server, the API and the local
MariaDB on the other CPUs, in every phase — the worker's own cost without the cores it shares with
the service; the figures move less between runs, too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
from common import (  # type: ignore[import-not-found]
    REPO,
    api_thread_cpu,
    create_tasks_http,
    local_database_pid,
    process_tree_cpu,
    profile_summary,
    py_spy,
    scratch_database,
    worker_core_of_its_own,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from plugin_workflows import OverheadWorkflow, tiny  # type: ignore[import-not-found]
from task_status_interceptors import TaskStatusPlugin
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Interceptor, Worker

from status.domain.auth import Role
from status.infra.tokens import ServiceTokens
from tests.support.processes import TEMPORAL_STARTUP, free_port, temporal_binary


def thread_cpu() -> dict[str, tuple[float, int]]:
    """CPU seconds and context switches so far of this process's threads, grouped by what they
    are: Python threads by their name (the outbox writer, the reporter's sender, the activity
    executor, the event loop),
    native ones by their kernel name (Temporal's core runs in Rust threads). A switch is a thread
    put to sleep or woken (a hand-off between threads, a wait for the GIL): each costs the kernel's
    time, which the thread's CPU carries."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    ticks = os.sysconf("SC_CLK_TCK")
    groups: dict[str, tuple[float, int]] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            comm = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            status = (task / "status").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        name = names.get(int(task.name), comm)
        group = (
            "event loop (main)"
            if name == "MainThread"
            else "outbox writer"
            if name == "task-status-outbox"
            else "reporter's sender"
            if name == "task-status-sender"
            else "activity/to_thread pool"
            if name.startswith(("ThreadPoolExecutor", "asyncio_"))
            else "workflow threads"
            if name.startswith("temporal_workflow")
            else f"native: {comm.rstrip('0123456789-')}"
        )
        switches = sum(int(line.split()[1]) for line in status.splitlines() if "ctxt_switches:" in line)
        cpu, before = groups.get(group, (0.0, 0))
        groups[group] = (cpu + (int(fields[11]) + int(fields[12])) / ticks, before + switches)
    return groups


class DiscardingExporter(SpanExporter):
    """Takes every span and keeps none: the tracing phase pays for spans, not for a network."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def tracing() -> tuple[TracingInterceptor, TracerProvider, DiscardingExporter]:
    exporter = DiscardingExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return TracingInterceptor(provider.get_tracer("bench.plugin_overhead")), provider, exporter


async def run_batch(
    env: WorkflowEnvironment,
    plugins: list,
    task_ids: list[str],
    steps: int,
    interceptors: Sequence[Interceptor] = (),
    provider: TracerProvider | None = None,
    rate: float = 0.0,
) -> tuple[float, float]:
    """Activities per second, and this process's CPU ms per activity (until the plugin's outbox
    drained, or the tracer provider's spans were all exported). ``rate``: the activities offered
    per second (the workflows started one by one at ``rate / steps`` a second); 0, all at once."""
    queue = f"overhead-{uuid.uuid4().hex[:6]}"
    interval = steps / rate if rate else 0.0

    async def execute(index: int, task_id: str) -> None:
        await asyncio.sleep(index * interval)
        await env.client.execute_workflow(
            OverheadWorkflow.run, args=[task_id, steps], id=f"ov-{uuid.uuid4()}", task_queue=queue
        )

    async with Worker(
        env.client,
        task_queue=queue,
        workflows=[OverheadWorkflow],
        activities=[tiny],
        plugins=plugins,
        interceptors=interceptors,
        max_concurrent_activities=100,
    ):
        started, cpu, threads = time.perf_counter(), time.process_time(), thread_cpu()
        await asyncio.gather(*(execute(index, task_id) for index, task_id in enumerate(task_ids)))
        elapsed = time.perf_counter() - started
        if plugins:
            await plugins[0].reporter.drained(120)
        if provider is not None:
            await asyncio.to_thread(provider.force_flush)
        cpu = time.process_time() - cpu
        after = thread_cpu()
    activities = len(task_ids) * steps
    LAST_THREADS.clear()
    LAST_SWITCHES.clear()
    for group, (cpu_now, switches_now) in after.items():
        cpu_then, switches_then = threads.get(group, (0.0, 0))
        if cpu_now - cpu_then > 0:
            LAST_THREADS[group] = 1000 * (cpu_now - cpu_then) / activities
        if switches_now - switches_then > 0:
            LAST_SWITCHES[group] = (switches_now - switches_then) / activities
    return activities / elapsed, 1000 * cpu / activities


def answer_in_memory(plugin: TaskStatusPlugin) -> None:
    """The plugin with its reports answered in this process (``reporter_path.py``'s transport):
    the worker's own cost of the plugin without the API and its database busy on the same cores,
    which the REST and gRPC phases carry as well."""
    from reporter_path import InstantService  # type: ignore[import-not-found]

    reporter = plugin.reporter
    start = reporter.start

    async def started() -> None:
        await start()
        reporter._events = reporter._binds_over = InstantService()

    reporter.start = started  # type: ignore[method-assign]


PHASES = ["without", "OpenTelemetry", "REST", "gRPC", "memory"]


@dataclass
class Measured:
    """One phase of one round."""

    rate: float  # activities per second
    cpu: float  # this process's CPU ms per activity
    api_ms: float  # the API's CPU ms per activity
    temporal_ms: float  # the Temporal server's CPU ms per activity
    threads: dict[str, float]  # this process's CPU ms per activity by thread group
    switches: dict[str, float]  # its context switches per activity by thread group
    api_threads: dict[str, float]  # the API's CPU ms per activity by thread group
    spans: int  # spans the tracer exported (the OpenTelemetry phase)


def paired(measured: Sequence[Measured], against: Sequence[Measured], figure: str = "cpu") -> float:
    """The median of each round's ratio of ``figure`` to the same round's ``against``."""
    ratios = [float(getattr(m, figure)) / float(getattr(a, figure)) for m, a in zip(measured, against, strict=True)]
    return statistics.median(ratios)


def middle(groups: Sequence[dict[str, float]]) -> dict[str, float]:
    """Each key's median over the rounds (0 where a round has none of it)."""
    return {key: statistics.median(g.get(key, 0.0) for g in groups) for key in {k for g in groups for k in g}}


LAST_THREADS: dict[str, float] = {}  # ms per activity by thread group, of the last batch
LAST_SWITCHES: dict[str, float] = {}  # context switches per activity by thread group, of the last batch


def dev_server_pid() -> int:
    """The Temporal dev server this process started (a child named ``temporal``): what the
    observer observes, whose CPU per activity the API's is read against."""
    for children in Path("/proc/self/task").glob("*/children"):
        for pid in children.read_text().split():
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/comm").read_text().strip().startswith("temporal"):
                    return int(pid)
    raise RuntimeError("the Temporal dev server is not a child of this process")


async def main() -> None:  # noqa: C901
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflows", type=int, default=40)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="sample the API and this worker with py-spy during each plugin phase; collapsed stacks"
        " and a summary of each go to DIR",
    )
    parser.add_argument(
        "--worker-core",
        action="store_true",
        help="the worker on CPU 0, the Temporal server, the API and MariaDB on the other CPUs",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        metavar="ACTIVITIES_PER_S",
        help="offer every phase the same load, this many activities a second (below what each phase"
        " can do: its throughput says whether it kept up), instead of as many as it can take",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every phase this many times, in a rotating order, and print medians (a shared"
        " machine's speed moves between phases: one round's ratio may swing by a quarter)",
    )
    args = parser.parse_args()
    rounds: dict[str, list[Measured]] = {}
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    secrets_env = {
        f"TASK_OBSERVER_{n}": secrets.token_hex(32)
        for n in (
            "CENTRIFUGO_API_KEY",
            "CENTRIFUGO_TOKEN_SECRET",
            "SERVICE_TOKEN_SECRET",
            "EXECUTION_TOKEN_SECRET",
            "USER_TOKEN_SECRET",
        )
    }
    tokens = ServiceTokens(secrets_env["TASK_OBSERVER_SERVICE_TOKEN_SECRET"])
    worker_token = tokens.issue("bench-worker", "bench", "s", [Role.WORKER, Role.COORDINATOR])
    with scratch_database() as url:
        port, grpc_port = free_port(), free_port()
        api = subprocess.Popen(
            [
                str(REPO / ".venv" / "bin" / "task-observer"),
                "serve",
                "--port",
                str(port),
                "--grpc-port",
                str(grpc_port),
            ],
            env={**os.environ, **secrets_env, "TASK_OBSERVER_ENV": "test", "TASK_OBSERVER_DATABASE_URL": url},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(300):
                try:
                    if httpx.get(f"{base}/readyz").status_code == 200:
                        break
                except httpx.HTTPError:
                    await asyncio.sleep(0.1)

            def new_tasks(n: int) -> list[str]:
                return create_tasks_http(base, worker_token, n, args.steps, owner="u")

            env = await WorkflowEnvironment.start_local(
                dev_server_existing_path=str(temporal_binary()),
                dev_server_startup_timeout=TEMPORAL_STARTUP,
                dev_server_log_level="error",
            )
            server = dev_server_pid()
            activities = args.workflows * args.steps
            database = local_database_pid()
            pinned = [server, api.pid, *([database] if database is not None else [])]
            placement = contextlib.ExitStack()
            if args.worker_core:
                placement.enter_context(worker_core_of_its_own(pinned))
            transports = {"REST": None, "gRPC": f"127.0.0.1:{grpc_port}", "memory": None}

            async def measure(phase: str, first: bool) -> Measured:
                """One phase: a fresh plugin (or tracer) on fresh tasks, its figures."""
                plugins, interceptors, provider, exporter = [], [], None, None
                if phase == "OpenTelemetry":
                    interceptor, provider, exporter = tracing()
                    interceptors = [interceptor]
                elif phase in transports:
                    outbox = Path(tempfile.mkdtemp()) / "o.sqlite3"
                    plugin = TaskStatusPlugin(base, worker_token, outbox_path=outbox, grpc_target=transports[phase])
                    if phase == "memory":
                        answer_in_memory(plugin)
                    plugins = [plugin]
                tasks = new_tasks(args.workflows)
                server_cpu, api_cpu, api_threads = (
                    process_tree_cpu(server),
                    process_tree_cpu(api.pid),
                    api_thread_cpu(api.pid),
                )
                profiles = (
                    (None, None)
                    if args.profile is None or not first or not plugins
                    else (args.profile / f"api-{phase}.txt", args.profile / f"worker-{phase}.txt")
                )
                with py_spy(api.pid, profiles[0]), py_spy(os.getpid(), profiles[1]):
                    rate, cpu = await run_batch(env, plugins, tasks, args.steps, interceptors, provider, args.rate)
                if provider is not None:
                    provider.shutdown()
                return Measured(
                    rate,
                    cpu,
                    api_ms=1000 * (process_tree_cpu(api.pid) - api_cpu) / activities,
                    temporal_ms=1000 * (process_tree_cpu(server) - server_cpu) / activities,
                    threads=dict(LAST_THREADS),
                    switches=dict(LAST_SWITCHES),
                    api_threads={
                        group: 1000 * (seconds - api_threads.get(group, 0.0)) / activities
                        for group, seconds in api_thread_cpu(api.pid).items()
                    },
                    spans=exporter.spans if exporter is not None else 0,
                )

            try:
                await run_batch(env, [], new_tasks(5), args.steps)  # warm-up
                for round_ in range(args.rounds):
                    # Each round in another order: a machine whose speed drifts favours no phase.
                    order = PHASES[round_ % len(PHASES) :] + PHASES[: round_ % len(PHASES)]
                    for phase in order:
                        rounds.setdefault(phase, []).append(await measure(phase, round_ == 0))
            finally:
                placement.close()
                await env.shutdown()
        finally:
            api.terminate()
            api.wait(10)
    if args.worker_core:
        print("the worker on CPU 0; the Temporal server, the API and the local database on the others")
    if args.rate:
        print(f"every phase offered {args.rate:.0f} activities/s (the same load: CPU per activity compared at it)")
    if args.rounds > 1:
        print(
            f"{args.rounds} rounds, the phases in a rotating order; each figure the median of its rounds,"
            " each ratio the median of the rounds' own ratios"
        )
    without, traced = rounds["without"], rounds["OpenTelemetry"]
    temporal_ms = statistics.median(m.temporal_ms for m in without)
    traced_ratio = paired(traced, without)
    print(
        f"without plugin  {statistics.median(m.rate for m in without):8.1f} activities/s"
        f"   worker CPU {statistics.median(m.cpu for m in without):6.2f} ms/activity"
        f"   Temporal server CPU {temporal_ms:6.2f} ms/activity (in-memory persistence: its floor)"
    )
    print(
        f"OpenTelemetry   {statistics.median(m.rate for m in traced):8.1f} activities/s"
        f"   worker CPU {statistics.median(m.cpu for m in traced):6.2f} ms/activity"
        f"   worker CPU ratio {traced_ratio:5.2f}   throughput ratio {paired(traced, without, 'rate'):5.2f}"
        f"   ({traced[-1].spans} spans exported)"
    )
    figures = {phase: rounds[phase] for phase in transports}
    for transport, measured in figures.items():
        api_ms = statistics.median(m.api_ms for m in measured)
        api_text = (
            f"   API CPU {api_ms:6.2f} ms/activity (target <= 1.5)"
            f" = {api_ms / temporal_ms:.2f} x the Temporal server's (target <= 0.125)"
            if transport != "memory"
            else "   (answered in memory: no API, no database at work beside it)"
        )
        each = " / ".join(f"{m.cpu / w.cpu:.2f}" for m, w in zip(measured, without, strict=True))
        per_round = f"   rounds: worker CPU ratio {each}" if args.rounds > 1 else ""
        print(
            f"plugin ({transport:<4}) {statistics.median(m.rate for m in measured):8.1f} activities/s"
            f"   worker CPU {statistics.median(m.cpu for m in measured):6.2f} ms/activity{api_text}"
            f"   worker CPU ratio {paired(measured, without):5.2f} (target <= 1.1 and <= OpenTelemetry's"
            f" {traced_ratio:.2f}; plugin / OpenTelemetry {paired(measured, traced):.2f})"
            f"   throughput ratio {paired(measured, without, 'rate'):5.2f}{per_round}"
        )
    breakdown = {phase: middle([m.threads for m in measured]) for phase, measured in rounds.items()}
    switches = {phase: middle([m.switches for m in measured]) for phase, measured in rounds.items()}
    api_breakdown = {phase: middle([m.api_threads for m in rounds[phase]]) for phase in ("REST", "gRPC")}
    if args.profile is not None:
        for transport in transports:
            for who in ("api", "worker"):
                collapsed = args.profile / f"{who}-{transport}.txt"
                summary = profile_summary(collapsed)
                (args.profile / f"{who}-{transport}.summary").write_text(summary + "\n")
                print(f"{who} profile ({transport}, py-spy --gil): {collapsed}")
                print(summary)
    print("API CPU by thread group, ms/activity (REST / gRPC):")
    for group in sorted({g for b in api_breakdown.values() for g in b}, key=lambda g: -api_breakdown["REST"].get(g, 0)):
        cells = " / ".join(f"{api_breakdown[k].get(group, 0.0):5.2f}" for k in api_breakdown)
        if any(b.get(group, 0.0) >= 0.005 for b in api_breakdown.values()):
            print(f"  {group:32s} {cells}")
    columns = [k for k in ("without", "OpenTelemetry", "REST", "gRPC", "memory") if k in breakdown]
    print(f"worker CPU by thread group, ms/activity ({' / '.join(columns)}):")
    groups = sorted({g for b in breakdown.values() for g in b}, key=lambda g: -breakdown.get("REST", {}).get(g, 0.0))
    for group in groups:
        cells = " / ".join(f"{breakdown[k].get(group, 0.0):5.2f}" for k in columns)
        print(f"  {group:28s} {cells}")
    print(f"worker context switches by thread group, per activity ({' / '.join(columns)}):")
    for group in sorted({g for b in switches.values() for g in b}, key=lambda g: -switches["REST"].get(g, 0.0)):
        cells = " / ".join(f"{switches[k].get(group, 0.0):5.1f}" for k in columns)
        print(f"  {group:28s} {cells}")
    print(f"  {'all':28s} " + " / ".join(f"{sum(switches[k].values()):5.1f}" for k in columns))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    from examples.process import run_then_exit

    run_then_exit(main())
