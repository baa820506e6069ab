"""Shared set-up for benchmarks: a throwaway MariaDB database and a real Centrifugo node."""

from __future__ import annotations

import importlib.util
import os
import random
import secrets
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from status.infra import migrate  # noqa: E402
from tests.support.processes import CentrifugoNode  # noqa: E402


def _driver() -> str:
    """The service's MySQL driver in the benches: the C driver (mysqlclient), the production
    recommendation, where it is installed; PyMySQL otherwise, or as TASK_OBSERVER_BENCH_DRIVER
    says (``pymysql`` compares with figures taken before the C driver was the benches' default)."""
    chosen = os.environ.get("TASK_OBSERVER_BENCH_DRIVER")
    if chosen:
        return chosen
    return "mysqldb" if importlib.util.find_spec("MySQLdb") is not None else "pymysql"


SERVER = os.environ.get("TASK_OBSERVER_TEST_MYSQL_URL", f"mysql+{_driver()}://tso:tso@127.0.0.1:3306")
DRIVER = sa.make_url(SERVER).drivername


@contextmanager
def scratch_database() -> Iterator[str]:
    name = f"tso_bench_{secrets.token_hex(3)}"
    server = sa.create_engine(SERVER + "/", poolclass=sa.pool.NullPool)
    with server.begin() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
    url = f"{SERVER}/{name}?charset=utf8mb4"
    print(f"database: a scratch MariaDB database through {DRIVER}", flush=True)
    try:
        migrate.upgrade(url)
        yield url
    finally:
        with server.begin() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name}"))


def stack_env(url: str, node: CentrifugoNode, data_dir: Path, centrifugo_api_url: str | None = None) -> dict[str, str]:
    """The settings of a bench's own API and observer processes (to merge over ``os.environ``):
    test mode on ``url``, Centrifugo ``node`` (its API through ``centrifugo_api_url`` where a proxy
    stands in front of it), fresh signing secrets, the observer's metrics on a port of the system's."""
    return {
        "TASK_OBSERVER_ENV": "test",
        "TASK_OBSERVER_DATABASE_URL": url,
        "TASK_OBSERVER_CENTRIFUGO_API_URL": centrifugo_api_url or node.api_url,
        "TASK_OBSERVER_CENTRIFUGO_API_KEY": node.api_key,
        "TASK_OBSERVER_CENTRIFUGO_TOKEN_SECRET": node.token_secret,
        "TASK_OBSERVER_CENTRIFUGO_PUBLIC_URL": node.ws_url,
        "TASK_OBSERVER_OBSERVER_METRICS_PORT": "0",
        "TASK_OBSERVER_DATA_DIR": str(data_dir),
        **{
            f"TASK_OBSERVER_{n}": secrets.token_hex(32)
            for n in ("SERVICE_TOKEN_SECRET", "EXECUTION_TOKEN_SECRET", "USER_TOKEN_SECRET")
        },
    }


def running_executions_http(base_url: str, token: str, count: int, owner: str, producer: str) -> list[dict[str, Any]]:
    """``count`` one-step tasks of ``owner`` (a workflow each), each step activated by ``producer``
    and STARTED (eventId ``{producer}-{executionId}-1``): executions ready for progress reports,
    each its binding's answer (``executionId``, ``executionToken`` …) with its ``taskId``."""
    import time
    import uuid

    import httpx

    executions = []
    with httpx.Client(base_url=base_url, timeout=10, headers={"Authorization": f"Bearer {token}"}) as http:
        for n in range(count):
            created = http.post(
                "/internal/v1/workflows",
                json={
                    "clientWorkflowKey": f"wf-{uuid.uuid4().hex}",
                    "ownerId": owner,
                    "title": f"{producer} {n}",
                    "initialTasks": [
                        {
                            "clientTaskKey": "t",
                            "title": "t",
                            "knownSteps": [{"stepId": "s", "operationCode": "DOCUMENT.PARSE"}],
                        }
                    ],
                },
            )
            created.raise_for_status()
            task_id = created.json()["tasks"][0]["taskId"]
            bound = http.post(
                f"/internal/v1/tasks/{task_id}/steps/s:activate", json={"attempt": 1, "producerId": producer}
            )
            bound.raise_for_status()
            execution = {**bound.json(), "taskId": task_id}
            started = http.post(
                "/internal/v1/task-events",
                json={
                    "eventId": f"{producer}-{execution['executionId']}-1",
                    "eventType": "STEP_STARTED",
                    "sourceSeq": 1,
                    "occurredAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                },
                headers={"Authorization": f"Bearer {execution['executionToken']}"},
            )
            started.raise_for_status()
            executions.append(execution)
    return executions


@contextmanager
def centrifugo_node() -> Iterator[CentrifugoNode]:
    with tempfile.TemporaryDirectory() as tmp:
        node = CentrifugoNode(workdir=Path(tmp)).start()
        try:
            yield node
        finally:
            node.stop()


def process_tree_cpu(pid: int) -> float:
    """User+system CPU seconds so far of a process and all its descendants (Linux /proc)."""
    pids, i = [pid], 0
    while i < len(pids):
        for task in Path(f"/proc/{pids[i]}/task").glob("*/children"):
            pids += [int(c) for c in task.read_text().split()]
        i += 1
    total = 0.0
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _threads_of_tree(pid: int) -> list[int]:
    """Every thread of a process and of its descendants."""
    pids, i = [pid], 0
    while i < len(pids):
        for task in Path(f"/proc/{pids[i]}/task").glob("*/children"):
            pids += [int(c) for c in task.read_text().split()]
        i += 1
    return [int(t.name) for p in pids for t in Path(f"/proc/{p}/task").glob("*")]


def _set_affinity(threads: list[int], cpus: set[int]) -> None:
    for tid in threads:
        with suppress(OSError):  # the thread ended meanwhile
            os.sched_setaffinity(tid, cpus)


def local_database_pid() -> int | None:
    """The MariaDB (or MySQL) server on this machine, when there is one."""
    for comm in Path("/proc").glob("[0-9]*/comm"):
        with suppress(OSError):
            if comm.read_text().strip() in ("mariadbd", "mysqld"):
                return int(comm.parent.name)
    return None


@contextmanager
def worker_core_of_its_own(others: list[int]) -> Iterator[None]:
    """This process on CPU 0, ``others`` (process trees: the Temporal server, the API, the local
    database) on the other CPUs, as a worker runs beside a service on other machines: what the
    worker's CPU per activity then measures is its own work, not the cache and core it shares with
    them (docs/benchmarks.md says how much that moves it). Threads made later inherit the
    affinity of the thread that makes them. Every CPU again for ``others`` at the end."""
    every = os.sched_getaffinity(0)
    if len(every) < 2 or 0 not in every:
        raise SystemExit("--worker-core needs two CPUs or more, CPU 0 among them")
    rest = every - {0}
    _set_affinity([int(t.name) for t in Path("/proc/self/task").glob("*")], {0})
    for pid in others:
        _set_affinity(_threads_of_tree(pid), rest)
    try:
        yield
    finally:
        for pid in others:
            with suppress(OSError):
                _set_affinity(_threads_of_tree(pid), every)


def api_thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds so far of the API's threads: its event loop (the main thread: HTTP, parsing,
    answers), its other Python threads (the units of work run off the loop) and the native ones
    by their kernel name (gRPC's)."""
    ticks = os.sysconf("SC_CLK_TCK")
    groups: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            comm = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        group = (
            "event loop (main)"
            if int(task.name) == pid
            else "units of work (Python threads)"
            if comm == "task-observer"
            else f"native: {comm.rstrip('0123456789-')}"
        )
        groups[group] = groups.get(group, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
    return groups


def wait_observer_settled(url: str, settle_seconds: float = 3.0) -> None:
    """Until an observer has registered its relay on this database, then ``settle_seconds`` more:
    its imports, first passes and lease rounds are start-up, not the work a bench measures."""
    import time

    from status.infra import tables as t

    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                if conn.scalar(sa.select(sa.func.count()).select_from(t.outbox_relay)):
                    break
            time.sleep(0.2)
        else:
            raise SystemExit("the observer did not register")
    finally:
        engine.dispose()
    time.sleep(settle_seconds)


def free_port_block(size: int) -> int:
    """The first of ``size`` consecutive loopback ports that are all free now, taken below the
    kernel's ephemeral range: a block inside it can be free when chosen and taken by some outgoing
    connection's local port before the cluster's balancer binds it (the balancer then exits and
    every connection is refused)."""
    ephemeral_low = _ephemeral_ports()[0]
    for _ in range(200):
        base = random.randrange(10000, max(ephemeral_low - size, 10001))
        if all(_port_free(base + i) for i in range(size)):
            return base
    raise RuntimeError(f"no block of {size} free ports")


def _ephemeral_ports() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def commits_at_once(
    connect: Callable[[int], Any], threads: int, seconds: float, commit: Callable[[Any, int, int], None]
) -> float:
    """Commits/s of ``threads`` connections committing at once for ``seconds``, started together:
    ``connect(n)`` opens the n-th's connection, ``commit(cursor, n, done)`` makes and commits its
    next change (``done``: how many it committed before)."""
    counts = [0] * threads
    start_line = threading.Barrier(threads + 1)
    deadline = [0.0]

    def work(n: int) -> None:
        conn = connect(n)
        with conn.cursor() as cur:
            start_line.wait()
            while time.monotonic() < deadline[0]:
                commit(cur, n, counts[n])
                counts[n] += 1
        conn.close()

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    deadline[0] = time.monotonic() + seconds
    start_line.wait()
    began = time.monotonic()
    for worker in workers:
        worker.join()
    return sum(counts) / (time.monotonic() - began)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values) or [0.0]
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def running_task(service: Any, owner: str, title: str = "bench") -> tuple[str, Any]:
    """A task with one DOCUMENT.PARSE step, activated and STARTED, committed through the service.

    Returns the task id and the execution claims to report further events with.
    """
    import uuid

    from status.app import commands as c
    from status.domain.auth import Role, ServicePrincipal
    from status.domain.clock import utcnow

    coordinator = ServicePrincipal("bench", "bench", "s", frozenset({Role.COORDINATOR}))
    created = service.create_workflow(
        coordinator,
        c.CreateWorkflow(
            client_workflow_key=uuid.uuid4().hex,
            owner_id=owner,
            title=title,
            initial_tasks=(c.NewTask("t", title, known_steps=(c.KnownStep("s", "DOCUMENT.PARSE"),)),),
        ),
    )
    task_id = created["tasks"][0]["taskId"]
    ctx = service.activate_step(coordinator, c.ActivateStep(task_id, "s", 1, "p"))
    claims = service._tokens.verify(ctx.execution_token, service.now())
    service.report_event(claims, c.ReportEvent(uuid.uuid4().hex, "STEP_STARTED", 1, utcnow()))
    return task_id, claims


def create_tasks_http(base_url: str, token: str, count: int, steps: int, owner: str) -> list[str]:
    """``count`` tasks of ``steps`` FILE.PREPARE steps each, created through the internal API."""
    import uuid

    import httpx

    ids = []
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}) as client:
        for _ in range(count):
            known = [{"stepId": f"s{i:02d}", "operationCode": "FILE.PREPARE"} for i in range(steps)]
            response = client.post(
                "/internal/v1/workflows",
                json={
                    "clientWorkflowKey": uuid.uuid4().hex,
                    "ownerId": owner,
                    "title": "bench",
                    "initialTasks": [{"clientTaskKey": "t", "title": "t", "knownSteps": known}],
                },
            )
            response.raise_for_status()
            ids.append(response.json()["tasks"][0]["taskId"])
    return ids


@contextmanager
def dashboard_stack(**overrides: Any) -> Iterator[Any]:
    """The status API serving the built dashboard (uvicorn on a thread of this process) on a scratch
    MariaDB database, with a Centrifugo node of its own; yields (settings, engine, service, port, node)."""
    import threading

    import uvicorn

    from status.api.asgi import app_for
    from status.bootstrap import Components
    from tests.support.browser import DASHBOARD_DIR, require_dashboard
    from tests.support.processes import free_port, wait_until
    from tests.support.settings import make_settings

    require_dashboard()
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp, scratch_database() as url:
        node = CentrifugoNode(workdir=Path(tmp), allowed_origins=[f"http://127.0.0.1:{port}"]).start()
        settings = make_settings(
            url,
            Path(tmp),
            centrifugo_api_url=node.api_url,
            centrifugo_api_key=node.api_key,
            centrifugo_token_secret=node.token_secret,
            centrifugo_public_url=node.ws_url,
            dashboard_dir=DASHBOARD_DIR,
            **overrides,
        )
        parts = Components(settings)
        engine, service = parts.engine, parts.service
        service.install_default_definitions()
        server = uvicorn.Server(uvicorn.Config(app_for(parts), host="127.0.0.1", port=port, log_level="warning"))
        threading.Thread(target=server.run, daemon=True).start()
        wait_until(lambda: server.started, 15, "status API")
        try:
            yield settings, engine, service, port, node
        finally:
            server.should_exit = True
            node.stop()
            engine.dispose()


@contextmanager
def py_spy(pid: int, output: Path | None, rate: int = 1000) -> Iterator[None]:
    """Sample ``pid``'s Python stacks with py-spy while the block runs (``output`` None: nothing).

    Collapsed stacks (``--format raw``), only samples holding the interpreter lock (``--gil``): what
    the process's Python spent its CPU on, not where its threads waited. The process is not paused
    (``--nonblocking``): pausing it a thousand times a second slowed a plugin run fourfold and so
    changed what it measured; the price is samples put on the wrong line now and then
    (docs/benchmarks.md, 2026-12-05 late) — confirm a hot spot with cProfile before acting on it.
    py-spy is a profiling tool, not a dependency: install it beside the virtualenv (``pip install
    py-spy``) to use this."""
    if output is None:
        yield
        return
    import shutil
    import signal
    import subprocess

    spy = shutil.which("py-spy") or str(REPO / ".venv" / "bin" / "py-spy")
    if not Path(spy).exists():
        raise SystemExit("--profile needs py-spy (pip install py-spy)")
    args = [spy, "record", "--pid", str(pid), "--format", "raw", "--gil", "--nonblocking", "--nolineno"]
    proc = subprocess.Popen(
        [*args, "--rate", str(rate), "--output", str(output)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        proc.wait(30)


def profile_summary(collapsed: Path, top: int = 20) -> str:
    """The heaviest functions of a collapsed-stack profile, by own time and by time inside them."""
    own: dict[str, int] = {}
    inside: dict[str, int] = {}
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        samples = int(count)
        total += samples
        frames = stack.split(";")  # "function (file)": recorded without line numbers
        own[frames[-1]] = own.get(frames[-1], 0) + samples
        for frame in set(frames):
            inside[frame] = inside.get(frame, 0) + samples
    if not total:
        return "no samples"
    lines = [f"{total} samples holding the GIL"]
    for title, table in (("own time", own), ("inside (own + callees)", inside)):
        lines.append(f"  by {title}:")
        for frame, samples in sorted(table.items(), key=lambda kv: -kv[1])[:top]:
            lines.append(f"    {100 * samples / total:5.1f} %  {frame}")
    return "\n".join(lines)
