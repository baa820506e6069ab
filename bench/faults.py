"""Faults under load (design P27, P29, P31): one fault per run, steady producers, a live client.

    .venv/bin/python bench/faults.py [--fault all|api-kill|observer-kill|centrifugo-unreachable|mariadb-restart|
                                              centrifugo-node-kill|redis-restart|database-failover|
                                              redis-failover|rolling-restart] [--seconds 20]

Each run starts its own status API (``serve``) and observer (``observer --mode
loops``) processes on a throwaway MariaDB database and a Centrifugo node of its
own; HTTP producers report progress for a set of tasks (every report retried
with its eventId until acknowledged, as the plugin does), a Temporal worker
with TaskStatusPlugin runs the document example workflow after workflow on a
Temporal dev server, and a WebSocket client follows the user's summary
channel. Midway the fault is injected:

* ``api-kill``: kill -9 of the status API, restarted 2 s later;
* ``observer-kill``: kill -9 of the observer while it holds its partitions and
  publishes, restarted 2 s later (it takes its partitions back at once);
* ``centrifugo-unreachable``: the relay's way to Centrifugo drops every
  connection for 20 s (a proxy), clients stay connected;
* ``mariadb-restart``: the MariaDB server this machine runs is stopped and
  started again (``scripts/services down/up mariadb``; only when that script
  started it);
* ``centrifugo-node-kill``: two Centrifugo nodes on the Redis engine, the
  client on node B through a failover proxy, the relay publishing to node A;
  kill -9 of node B (the client reconnects to A);
* ``redis-restart``: the same two nodes; the Redis server is stopped and
  started again (``scripts/services``);
* ``database-failover``: the database is a three-node MariaDB Galera cluster behind HAProxy
  (``deploy/galera``, ``deploy/haproxy``); kill -9 of the node HAProxy writes to. Also printed:
  how long until writes were acknowledged again (no process restarted), and until the killed
  node rejoined the cluster (restarted 2 s after the kill, it catches up by IST or SST);
* ``redis-failover``: the two Centrifugo nodes on Redis behind three sentinels (``deploy/redis``);
  kill -9 of the Redis primary: the sentinels promote the replica and both nodes follow it (the
  killed one comes back as a replica; the sentinels' reconfig script starts the streams' new
  epochs, deploy/redis/new-epochs.sh). Also printed: how long until the promotion, and the
  client's stream epochs;
* ``rolling-restart``: two API replicas, two Centrifugo nodes on Redis and two
  observers behind nginx (deploy/nginx), each restarted in turn with SIGTERM
  under load (``tests/support/rolling.py``, also run by the suite).

Printed per fault: events acknowledged, acknowledged but lost (not in the
event log), versions committed twice, versions the client saw go backwards,
the plugin's workflows whose task did not end SUCCEEDED or whose reports were
dropped, and the time from the end of the load until the client shows every
task at its database version. Target: 0 lost, 0 duplicated, 0 regressions,
0 plugin losses, < 10 s.

"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import itertools
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
from common import (  # type: ignore[import-not-found]
    REPO,
    centrifugo_node,
    free_port_block,
    running_executions_http,
    scratch_database,
    stack_env,
)
from task_status_interceptors import TaskStatusPlugin, read_undeliverable
from temporalio.client import Client
from temporalio.worker import Worker

from examples.document_processing import (
    DocumentRequest,
    DocumentWorkflow,
    parse_document,
    prepare_file,
    search_web,
    store_result,
)
from status.domain.auth import Role, UserPrincipal
from status.infra import tables as t
from status.infra.tokens import RealtimeTokens, ServiceTokens, UserTokens
from tests.support.processes import CentrifugoNode, free_port, temporal_binary, wait_until
from tests.support.proxy import FailoverProxy
from tests.support.realtime import recording_client
from tests.support.rolling import Tally, report_progress

TENANT = "faults"
USER = "viewer"
CLI = str(REPO / ".venv" / "bin" / "task-observer")


class DroppingProxy:
    """TCP forwarding to Centrifugo that can refuse and cut every connection for a while."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.port = 0
        self.down = False
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[Any]] = set()

    async def start(self) -> DroppingProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def cut(self, down: bool) -> None:
        self.down = down
        if down:
            for writer in list(self._writers):
                writer.close()

    async def close(self) -> None:
        self.cut(True)
        if self._server is not None:
            self._server.close()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        current = asyncio.current_task()
        if current is not None:
            self._handlers.add(current)
        if self.down:
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        self._writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers -= {writer, up_writer}


class Stack:
    def __init__(self, url: str, node: Any, centrifugo_api_url: str) -> None:
        self.url = url
        self.node = node
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.tmp = Path(tempfile.mkdtemp())
        self.env = {
            **os.environ,
            **stack_env(url, node, self.tmp, centrifugo_api_url),
            "TASK_OBSERVER_INTERNAL_RATE_PER_SECOND": "0",
        }
        self.api: subprocess.Popen[bytes] | None = None
        self.observer: subprocess.Popen[bytes] | None = None

    def start_api(self) -> None:
        self.api = subprocess.Popen(
            [CLI, "serve", "--port", str(self.port)], env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_until(self._ready, 60, "status API")

    def start_observer(self) -> None:
        self.observer = subprocess.Popen(
            [CLI, "observer", "--mode", "loops"], env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def _ready(self) -> bool:
        try:
            return httpx.get(f"{self.base}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        for proc in (self.api, self.observer):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(15)


@contextlib.contextmanager
def centrifugo_nodes(
    engine: str | None, sentinels: list[str] | None = None
) -> Iterator[tuple[CentrifugoNode, CentrifugoNode | None]]:
    """One node, or two sharing the Redis engine (and one API key and token secret): the Redis
    server this machine runs (``redis``), or Redis behind the given sentinels (``sentinel``)."""
    if engine is None:
        with centrifugo_node() as node:
            yield node, None
        return
    workdir = Path(tempfile.mkdtemp())
    shared: dict[str, Any] = {"api_key": secrets.token_hex(16), "token_secret": secrets.token_hex(32)}
    if engine == "sentinel":
        shared["redis_sentinels"] = sentinels
    else:
        shared["redis_address"] = "redis://127.0.0.1:6379"
    a = CentrifugoNode(workdir=workdir, **shared).start()
    b = CentrifugoNode(workdir=workdir, **shared).start()
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()


@contextlib.contextmanager
def sentinel_redis(wanted: bool) -> Iterator[Any]:
    """Redis behind three sentinels of its own (deploy/redis/sentinel.py), removed afterwards."""
    if not wanted:
        yield None
        return
    sys.path.insert(0, str(REPO / "deploy" / "redis"))
    from sentinel import SentinelRedis  # type: ignore[import-not-found]

    workdir = Path(tempfile.mkdtemp(prefix="sentinel-"))
    redis = SentinelRedis(workdir, free_port_block(20))
    try:
        redis.up()
        yield redis
    finally:
        redis.down()
        shutil.rmtree(workdir, ignore_errors=True)


async def _restart_service(name: str) -> None:
    """Stop a service this machine runs through scripts/services, and start it again 2 s later."""
    services = str(REPO / "scripts" / "services")
    await asyncio.to_thread(subprocess.run, [services, "down", name], check=True, capture_output=True)
    await asyncio.sleep(2)
    await asyncio.to_thread(subprocess.run, [services, "up", name], check=True, capture_output=True)


@contextlib.contextmanager
def galera_database() -> Iterator[tuple[Any, str]]:
    """A Galera cluster of its own (three nodes and HAProxy, deploy/galera/cluster.py) and a migrated
    database on it, reached through HAProxy; the cluster is removed afterwards."""
    sys.path.insert(0, str(REPO / "deploy" / "galera"))
    from cluster import Cluster  # type: ignore[import-not-found]

    from status.infra import migrate

    workdir = Path(tempfile.mkdtemp(prefix="galera-"))
    cluster = Cluster(workdir, free_port_block(50))
    try:
        cluster.up()
        name = f"tso_bench_{secrets.token_hex(3)}"
        server = sa.create_engine(cluster.url(""), poolclass=sa.pool.NullPool)
        with server.begin() as conn:
            conn.execute(sa.text(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
        server.dispose()
        url = cluster.url(name)
        migrate.upgrade(url)
        yield cluster, url
    finally:
        cluster.down()
        shutil.rmtree(workdir, ignore_errors=True)


@contextlib.contextmanager
def fault_database(fault: str) -> Iterator[tuple[Any, str]]:
    if fault == "database-failover":
        with galera_database() as (cluster, url):
            yield cluster, url
    else:
        with scratch_database() as url:
            yield None, url


async def run_fault(fault: str, seconds: float, temporal_address: str) -> dict[str, Any]:  # noqa: C901
    engine = {"centrifugo-node-kill": "redis", "redis-restart": "redis", "redis-failover": "sentinel"}.get(fault)
    with (
        sentinel_redis(engine == "sentinel") as sentinels,
        centrifugo_nodes(engine, sentinels.sentinel_addresses if sentinels else None) as (node, node_b),
        fault_database(fault) as (cluster, url),
    ):
        proxy = await DroppingProxy(node.port).start()
        # The client's way in: node B first when there are two, failing over to A.
        balancer = await FailoverProxy([p.port for p in (node_b, node) if p is not None]).start()
        stack = Stack(url, node, f"http://127.0.0.1:{proxy.port}/api")
        stack.start_api()
        stack.start_observer()
        try:
            token = ServiceTokens(stack.env["TASK_OBSERVER_SERVICE_TOKEN_SECRET"]).issue(
                "faults", TENANT, "s", [Role.COORDINATOR, Role.WORKER]
            )
            executions = running_executions_http(stack.base, token, 8, USER, "faults")

            conn_token, _ = RealtimeTokens(node.token_secret, 3600).connection(
                UserPrincipal(TENANT, USER), [f"task_user:{TENANT}/{USER}"]
            )
            client, recorder = recording_client(f"ws://127.0.0.1:{balancer.port}/connection/websocket", conn_token)
            await client.connect()
            first = await recorder.next_subscribed(30)
            epochs = [first.stream_position.epoch if first.stream_position else ""]  # the user channel's, in order
            seen: dict[str, list[int]] = {}  # publications, in arrival order
            snapshots: dict[str, int] = {}  # versions loaded after a resubscribe that could not recover

            offsets: list[int] = []  # the user channel's positions, in arrival order (for the report)
            resubscribes: list[tuple[bool, bool, str]] = []  # (was_recovering, recovered, epoch:offset)

            async def watch() -> None:
                while True:
                    _, offset, data = await recorder.publications.get()
                    offsets.append(offset)
                    if data.get("kind") == "task.summary":
                        seen.setdefault(data["taskId"], []).append(int(data["taskVersion"]))

            user_token = UserTokens(stack.env["TASK_OBSERVER_USER_TOKEN_SECRET"]).issue(TENANT, USER)

            def snapshot_versions() -> dict[str, int]:
                """What a client does when history could not fill the gap (design P30): the tasks' snapshots."""
                with sa.create_engine(url).connect() as conn:
                    ids = list(conn.scalars(sa.select(t.task.c.id).where(t.task.c.tenant_id == TENANT)))
                found: dict[str, int] = {}
                for start in range(0, len(ids), 100):
                    response = httpx.post(
                        f"{stack.base}/api/tasks/status:batchGet",
                        json={"taskIds": ids[start : start + 100]},
                        headers={"Authorization": f"Bearer {user_token}"},
                        timeout=10,
                    )
                    found |= {s["taskId"]: int(s["taskVersion"]) for s in response.json().get("tasks", [])}
                return found

            async def resubscribed() -> None:
                while True:
                    context = await recorder.subscribed.get()
                    position = context.stream_position
                    at = f"{position.epoch}:{position.offset}" if position else ""
                    resubscribes.append((context.was_recovering, context.recovered, at))
                    if position and position.epoch != epochs[-1]:
                        epochs.append(position.epoch)
                    if context.was_recovering and not context.recovered:
                        with contextlib.suppress(httpx.HTTPError, ValueError):
                            for task_id, version in (await asyncio.to_thread(snapshot_versions)).items():
                                snapshots[task_id] = max(version, snapshots.get(task_id, 0))

            watcher = asyncio.create_task(watch())
            recoverer = asyncio.create_task(resubscribed())
            plugin_stop = asyncio.Event()
            plugin = TaskStatusPlugin(stack.base, token, outbox_path=stack.tmp / "worker.outbox.sqlite3")
            temporal = await Client.connect(temporal_address)
            queue = f"faults-{uuid.uuid4().hex[:8]}"
            runs: list[Any] = []

            async def plugin_load() -> None:  # the document example, one run after the other
                n = 0
                while not plugin_stop.is_set():
                    n += 1
                    request = DocumentRequest(USER, f"doc-{n}.pdf", pages=4, page_seconds=0.2)
                    runs.append(
                        await temporal.start_workflow(
                            DocumentWorkflow.run, request, id=f"faults-{uuid.uuid4()}", task_queue=queue
                        )
                    )
                    with contextlib.suppress(Exception):
                        await runs[-1].result()

            executor = concurrent.futures.ThreadPoolExecutor(8)
            worker = Worker(
                temporal,
                task_queue=queue,
                workflows=[DocumentWorkflow],
                activities=[prepare_file, parse_document, store_result, search_web],
                activity_executor=executor,
                plugins=[plugin],
            )
            worker_run = asyncio.create_task(worker.run())
            plugin_task = asyncio.create_task(plugin_load())
            stop = threading.Event()
            tally = Tally()
            acked = tally.acked
            failover: dict[str, Any] = {}
            threads = [
                threading.Thread(target=report_progress, args=(stack.base, executions[i::2], stop, tally))
                for i in range(2)
            ]
            for th in threads:
                th.start()
            await asyncio.sleep(seconds / 2)
            if fault == "api-kill":
                assert stack.api is not None
                stack.api.send_signal(signal.SIGKILL)
                stack.api.wait()
                await asyncio.sleep(2)
                await asyncio.to_thread(stack.start_api)
            elif fault == "observer-kill":
                assert stack.observer is not None
                stack.observer.send_signal(signal.SIGKILL)
                stack.observer.wait()
                await asyncio.sleep(2)
                stack.start_observer()
            elif fault == "mariadb-restart":
                await _restart_service("mariadb")
            elif fault == "centrifugo-node-kill":
                assert node_b is not None
                node_b.stop(kill=True)
            elif fault == "redis-restart":
                await _restart_service("redis")
            elif fault == "centrifugo-unreachable":
                proxy.cut(True)
                await asyncio.sleep(20)
                proxy.cut(False)
            elif fault == "redis-failover":
                killed_at = time.monotonic()
                primary = await asyncio.to_thread(sentinels.primary_port)
                killed = await asyncio.to_thread(sentinels.kill_primary)
                while await asyncio.to_thread(sentinels.primary_port) in (primary, None):
                    await asyncio.sleep(0.1)
                failover = {"killed_redis": killed, "promoted_s": time.monotonic() - killed_at}
                await asyncio.to_thread(sentinels.restart_redis, killed)  # back as the new primary's replica
            elif fault == "database-failover":
                writer = await asyncio.to_thread(cluster.writer)
                killed_at = time.monotonic()
                await asyncio.to_thread(cluster.kill_node, writer)
                await asyncio.sleep(2)
                await asyncio.to_thread(cluster.start_node, writer)
                await asyncio.to_thread(cluster.wait_synced, writer)
                failover = {"killed_node": writer, "rejoined_s": time.monotonic() - killed_at}
            await asyncio.sleep(seconds / 2)
            stop.set()
            plugin_stop.set()
            if fault == "database-failover":
                after = [at for at in list(tally.acked_at) if at > killed_at]
                failover["resumed_s"] = (min(after) - killed_at) if after else None
                failover["writer_after"] = await asyncio.to_thread(cluster.writer)
            for th in threads:
                await asyncio.to_thread(th.join)
            await asyncio.wait_for(plugin_task, 120)
            await plugin.reporter.drained(120)
            load_ended = time.monotonic()

            database = sa.create_engine(url)

            def database_versions() -> dict[str, int]:
                with database.connect() as conn:
                    return {
                        r.id: int(r.version)
                        for r in conn.execute(
                            sa.select(t.task.c.id, t.task.c.version).where(t.task.c.tenant_id == TENANT)
                        )
                    }

            converged = None
            behind: dict[str, tuple[int, int]] = {}
            while time.monotonic() - load_ended < 60:
                versions = database_versions()
                # What the client shows: the newest version it has, by publication or snapshot.
                shown = {task_id: max([*seen.get(task_id, [0]), snapshots.get(task_id, 0)]) for task_id in versions}
                behind = {task_id: (shown[task_id], v) for task_id, v in versions.items() if shown[task_id] != v}
                if not behind:
                    converged = time.monotonic() - load_ended
                    break
                await asyncio.sleep(0.1)
            with database.connect() as conn:
                logged = set(
                    conn.scalars(sa.select(t.task_event_log.c.event_id).where(t.task_event_log.c.tenant_id == TENANT))
                )
                duplicated = conn.execute(
                    sa.select(sa.func.count()).select_from(
                        sa.select(t.task_event_log.c.task_id, t.task_event_log.c.task_version)
                        .where(t.task_event_log.c.tenant_id == TENANT)
                        .group_by(t.task_event_log.c.task_id, t.task_event_log.c.task_version)
                        .having(sa.func.count() > 1)
                        .subquery()
                    )
                ).scalar_one()
            regressions = sum(1 for versions in seen.values() for a, b in itertools.pairwise(versions) if b < a)
            plugin_tasks = []
            failed_runs: list[str] = []  # why a run gave no task: what to look at when one is lost
            for run in runs:
                try:
                    plugin_tasks.append((await run.result())["taskId"])
                except Exception as exc:
                    failed_runs.append(f"{run.id}: {exc!r} (cause {exc.__cause__!r})")
            with database.connect() as conn:
                endings: dict[str, str] = dict(
                    conn.execute(
                        sa.select(t.task.c.id, t.task.c.lifecycle_status).where(t.task.c.id.in_(plugin_tasks))
                    ).all()
                )
            succeeded = {task_id for task_id, lifecycle in endings.items() if lifecycle == "SUCCEEDED"}
            database.dispose()
            worker_run.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker_run
            executor.shutdown(wait=False)
            watcher.cancel()
            recoverer.cancel()
            await client.disconnect()
            return {
                **failover,
                "plugin_runs": len(runs),
                "plugin_lost": (len(runs) - len(succeeded)) + plugin.reporter.dropped,
                "plugin_failed_runs": failed_runs,
                "plugin_not_succeeded": {k: v for k, v in endings.items() if v != "SUCCEEDED"},
                "plugin_dropped": [
                    f"{row['eventId']}: {row['reason']}"
                    for row in read_undeliverable(stack.tmp / "worker.outbox.sqlite3")
                ],
                "fault": fault,
                "acked": len(set(acked)),
                "lost": len(set(acked) - logged),
                "duplicated": int(duplicated),
                "regressions": regressions,
                "converged_s": converged,
                # When it did not converge: what the client showed against the database, and
                # how its subscription went (positions seen, resubscriptions) — to tell why.
                "behind": {task_id: list(pair) for task_id, pair in behind.items()},
                "resubscribes": resubscribes,
                "epochs": epochs,
                # Sentinel's own account: more than one failover, or a retried reconfig script,
                # each start new epochs again.
                **(sentinels.events() if sentinels else {}),
                "offsets_tail": offsets[-40:] if behind else [],
            }
        finally:
            stack.stop()
            await proxy.close()
            await balancer.close()


async def run_rolling_restart(seconds: float) -> dict[str, Any]:
    """Every process behind nginx restarted in turn under load (tests/support/rolling.py)."""
    from tests.support.rolling import rolling_restart

    with centrifugo_nodes("redis") as (node_a, node_b), scratch_database() as url:
        assert node_b is not None
        secrets_env = {
            f"TASK_OBSERVER_{n}": secrets.token_hex(32)
            for n in ("SERVICE_TOKEN_SECRET", "EXECUTION_TOKEN_SECRET", "USER_TOKEN_SECRET")
        }
        workdir = Path(tempfile.mkdtemp())
        env = {
            **os.environ,
            **secrets_env,
            "TASK_OBSERVER_ENV": "test",
            "TASK_OBSERVER_DATABASE_URL": url,
            "TASK_OBSERVER_CENTRIFUGO_API_KEY": node_a.api_key,
            "TASK_OBSERVER_CENTRIFUGO_TOKEN_SECRET": node_a.token_secret,
            "TASK_OBSERVER_OBSERVER_METRICS_PORT": "0",
            "TASK_OBSERVER_DATA_DIR": str(workdir),
            "TASK_OBSERVER_DRAIN_SECONDS": "2",
        }
        coordinator = ServiceTokens(secrets_env["TASK_OBSERVER_SERVICE_TOKEN_SECRET"]).issue(
            "faults", TENANT, "s", [Role.COORDINATOR, Role.WORKER]
        )
        viewer = UserTokens(secrets_env["TASK_OBSERVER_USER_TOKEN_SECRET"]).issue(TENANT, "user-1")
        result = await rolling_restart(
            cli=CLI,
            env=env,
            workdir=workdir,
            database_url=url,
            tenant=TENANT,
            coordinator_token=coordinator,
            user_token=viewer,
            nodes=(node_a, node_b),
            tasks=8,
            producers=2,
            settle_seconds=max(2.5, seconds / 7),  # load before, between and after the six restarts
        )
    return result


def print_rolling(result: dict[str, Any]) -> None:
    converged = f"{result['converged_s']:.1f} s" if result["converged_s"] is not None else "no (60 s)"
    print("rolling restart behind nginx (2 API replicas, 2 Centrifugo nodes on Redis, 2 observers):")
    for name, took in result["phases"]:
        print(f"  {name:14s} restarted in {took:.1f} s")
    print(
        f"  acked {result['acked']}, lost {result['lost']}, backwards {result['backwards']}, "
        f"retried {result['retried']} {result['answers'] or ''}, client resubscribes {result['resubscribes']} "
        f"({result['unrecovered_resubscribes']} from snapshots), converged {converged}"
    )
    print("  target: 0 lost, 0 backwards, converged < 10 s (retries with the same eventId allowed)")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    choices = [
        "all",
        "api-kill",
        "observer-kill",
        "centrifugo-unreachable",
        "mariadb-restart",
        "centrifugo-node-kill",
        "redis-restart",
        "database-failover",
        "redis-failover",
        "rolling-restart",
    ]
    parser.add_argument("--fault", default="all", choices=choices)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--json", type=Path, help="also write each fault's figures to this file (a JSON list)")
    args = parser.parse_args()
    faults = choices[1:] if args.fault == "all" else [args.fault]
    rolling = "rolling-restart" in faults
    faults = [f for f in faults if f != "rolling-restart"]
    if not faults:
        print_rolling(await run_rolling_restart(args.seconds))
        return
    temporal_port = free_port()
    command = [str(temporal_binary()), "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
    temporal = subprocess.Popen(
        [*command, "--port", str(temporal_port), "--ui-port", str(free_port()), "--log-level", "error"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        address = f"127.0.0.1:{temporal_port}"
        for _ in range(300):
            try:
                await Client.connect(address)
                break
            except Exception:
                await asyncio.sleep(0.2)
        rows = [await run_fault(fault, args.seconds, address) for fault in faults]
    finally:
        temporal.terminate()
        temporal.wait(30)
    if args.json is not None:
        args.json.write_text(json.dumps(rows))
    print(f"{'fault':24s} {'acked':>7s} {'lost':>5s} {'dup':>4s} {'backwards':>9s} {'plugin':>12s} {'converged':>10s}")
    for r in rows:
        converged = f"{r['converged_s']:.1f} s" if r["converged_s"] is not None else "no (60 s)"
        plugin = f"{r['plugin_lost']}/{r['plugin_runs']} lost"
        counts = f"{r['acked']:7d} {r['lost']:5d} {r['duplicated']:4d} {r['regressions']:9d} {plugin:>12s}"
        print(f"{r['fault']:24s} {counts} {converged:>10s}")
    print("target: 0 lost, 0 duplicated, 0 backwards, 0 plugin runs lost, converged < 10 s")
    for r in rows:
        if "killed_redis" in r:
            print(
                f"redis-failover: the Redis primary (redis{r['killed_redis']}) killed; the sentinels promoted its"
                f" replica after {r['promoted_s']:.1f} s; both Centrifugo nodes followed it, no process restarted;"
                f" the client's stream epochs {' -> '.join(r['epochs'])} (new-epochs.sh: history after a promotion"
                " is not trusted, the client loads a snapshot)"
            )
        if "killed_node" in r:
            resumed = f"{r['resumed_s']:.1f} s" if r.get("resumed_s") is not None else "never"
            print(
                f"database-failover: node{r['killed_node']} (the writer) killed; writes acknowledged again after"
                f" {resumed} through node{r['writer_after']}, no process restarted; node{r['killed_node']}"
                f" rejoined and synced {r['rejoined_s']:.1f} s after the kill"
            )
    if rolling:
        print_rolling(await run_rolling_restart(args.seconds))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    from examples.process import run_then_exit

    run_then_exit(main())
