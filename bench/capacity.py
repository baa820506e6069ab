"""Capacity: the capacity model (design D16) scaled to this machine, with the ratio printed.

    .venv/bin/python bench/capacity.py [--connections 20000] [--tasks 2000] [--seconds 30]

The model: 100,000 online connections, 20,000 active tasks each changing every 30 s
(~667 commits/s, 2 publications each), 20,000 running steps heartbeating every 15 s
(~1,333 items/s). Here: the given numbers of connections and tasks at the model's
intervals, and every figure's ratio to the model.

Real parts, each in its own process: MariaDB, Redis, Centrifugo nodes on the Redis engine
(one per 15,000 connections: a process may hold 20,000 files here), the status API
(``serve``), the observer (``observer --mode loops``), and load generators: processes that
hold idle WebSocket connections (``--role idle``: the Centrifugo JSON protocol over
``websockets``, a connect with the user's channel in its token, pongs to the server's
pings, recovery on reconnect and the snapshot a UI loads when recovery fails), and this
process, which creates the tasks and sends their changes and heartbeats in batches as
plugin workers do. Every user has two connections (two tabs); the active tasks belong to the
first users, ten each, so a change reaches two connections (the model's two deliveries).

Phases, each printed with its figures:

1. **idle connections**: how many are held, how long the ramp took, Centrifugo's and the
   clients' memory per connection;
2. **steady model load**: changes and heartbeats per second against the model's, commit ->
   client p50/p99 (the producer's acknowledgement to a subscriber's arrival), commit ->
   publish (the observer's histogram), publications delivered per second, CPU per
   component per change, database commits per second, and what saturates first;
3. **reconnect 10 % and 30 % at once** under that load: how long until every one is
   connected again, how many recovered from history and how many loaded a snapshot;
4. **a hot project**: ten tasks granted to one project whose members hold a quarter of the
   connections, changed ``--hot-rate`` times a second: deliveries/s, commit -> member p50/p99,
   the API's and Centrifugo's CPU per hot change;
5. **an outbox backlog**: ``--backlog`` messages (100,000) pile up while the observer is stopped,
   the steady load going on; then it goes on: how long until the outbox is empty, and how long
   live changes take to reach their clients meanwhile;
6. **history gone -> snapshot storm**: Centrifugo's history removed from Redis, 30 %
   reconnect: none can recover, every one loads its snapshot (GET /api/me/tasks): how long
   until all have, and the snapshot's p50/p99;
7. **heartbeat renewal after a status-service outage**: the API killed for ``--outage``
   seconds (60) while every step keeps beating, then started again: how long until every
   running step's beat is accepted again, and how many steps went STALE.

``--shards 1,3`` runs phases 1 and 2 once per count, each on a stack of its own: with more than
one shard the API routes through a bucket map over that many scratch databases of the MariaDB
server (the tasks' owners spread over the buckets), and each shard has its own observer
(``OBSERVE_SHARD``); the last lines compare the runs (changes/s per shard, CPU per change, what
saturates). On one machine the shards share its cores and its one MariaDB server: the ratio
says what routing costs and where the machine saturates, not what shards on hosts of their own
would carry.

The relay's drain alone is ``bench/relay.py``; the loss of a node of each kind is
``bench/faults.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import os
import random
import secrets
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

MODEL = {"connections": 100_000, "tasks": 20_000, "change_interval": 30.0, "heartbeat_interval": 15.0}
TENANT = "capacity"
TASKS_PER_USER = 10
# Every user has two tabs open; the active tasks belong to the first users, so each change reaches
# two connections: the model's two deliveries per change. The other connections are users with
# nothing running, who only hold their connection (most of the model's 100,000).
TABS_PER_USER = 2
# Three missed intervals make a step STALE (design D8.7: a timeout of tens of seconds).
HEARTBEAT_TIMEOUT = int(3 * MODEL["heartbeat_interval"])
# The hot project: its members' connections hold its shared channel; a few tasks granted to it
# change often, and each change goes to every member.
HOT_PROJECT = "hot"
HOT_CHANNEL = f"task_shared:{TENANT}/project.{HOT_PROJECT}"
HOT_TASKS = 10
CONNECTIONS_PER_NODE = 15_000
CONNECTIONS_PER_CLIENT = {"python": 5_000, "go": 15_000}  # a process may hold 20,000 files here
GO_CLIENTS = Path(__file__).resolve().parent / "idle-clients"  # bench/idle-clients (--client go)


# ------------------------------------------------------------------ the idle clients (own processes)
def _connection_channels(i: int, hot_members: int) -> tuple[str, list[str]]:
    """Connection ``i``: its user (two tabs each) and the channels in its token (the user's own,
    and the hot project's for the first ``hot_members``)."""
    user = f"u{i // TABS_PER_USER}"
    return user, [f"task_user:{TENANT}/{user}", *([HOT_CHANNEL] if i < hot_members else [])]


class IdleConnection:
    """One browser tab, as far as Centrifugo can tell: connected, subscribed (to the channels in its
    token: the user's own, and its project's when it is a member of the hot one), answering pings."""

    def __init__(self, client: IdleClients, user: str, channels: list[str], token: str) -> None:
        self.client = client
        self.user = user
        self.channels = channels
        self.token = token
        self.positions: dict[str, tuple[int, str | None]] = {}  # channel -> (offset, epoch) seen
        self.ws: Any = None
        self.connected = asyncio.Event()  # connected and current (recovered, or its snapshot loaded)
        self.recovered: bool | None = None
        self.loading: asyncio.Task[None] | None = None

    async def run(self) -> None:
        import websockets

        while True:
            try:
                async with websockets.connect(
                    self.client.url, compression=None, ping_interval=None, open_timeout=120, max_queue=4
                ) as ws:
                    self.ws = ws
                    await self._session(ws)
            except (OSError, websockets.ConnectionClosed, TimeoutError):
                pass
            self.ws = None
            self.connected.clear()
            await asyncio.sleep(random.uniform(0.05, 0.5))  # a client's reconnect jitter

    async def _session(self, ws: Any) -> None:
        connect: dict[str, Any] = {"token": self.token}
        if self.positions:
            connect["subs"] = {
                channel: {"recover": True, "offset": offset, "epoch": epoch}
                for channel, (offset, epoch) in self.positions.items()
            }
        await ws.send(json.dumps({"id": 1, "connect": connect}))
        async for frame in ws:
            for line in frame.splitlines():
                if not line:
                    continue
                message = json.loads(line)
                if not message:  # the server's ping
                    await ws.send("{}")
                elif "connect" in message:
                    await self._connected(message["connect"])
                elif "push" in message:
                    self._push(message["push"], len(line))

    async def _connected(self, reply: dict[str, Any]) -> None:
        """Connected: current at once when every channel recovered (or is new), else once its
        snapshot is loaded (what the UI does when history cannot fill the gap), which goes on
        beside the connection (its pings are answered meanwhile)."""
        was, recovered = bool(self.positions), True
        for channel, sub in (reply.get("subs") or {}).items():
            ok = bool(sub.get("recovered"))
            recovered = recovered and ok
            offset, epoch = self.positions.get(channel, (0, None))
            top = int(sub.get("offset", 0))
            self.positions[channel] = (max(offset, top) if ok else top, sub.get("epoch", epoch))
            for pub in sub.get("publications") or []:
                self._pub(channel, pub, 0)
        self.recovered = recovered if was else None
        if was and not recovered:
            self.loading = asyncio.create_task(self._current_after_snapshot())
        else:
            self.connected.set()

    async def _current_after_snapshot(self) -> None:
        await self.client.snapshot(self.user)
        self.connected.set()

    def _push(self, push: dict[str, Any], size: int) -> None:
        if "pub" in push:
            self._pub(push.get("channel", ""), push["pub"], size)

    def _pub(self, channel: str, pub: dict[str, Any], size: int) -> None:
        if "offset" in pub and channel in self.positions:
            offset, epoch = self.positions[channel]
            self.positions[channel] = (max(offset, int(pub["offset"])), epoch)
        data = pub.get("data") or {}
        self.client.delivered(data.get("taskId"), data.get("taskVersion"), size)


class IdleClients:
    """``--role idle``: holds connections and answers the parent's commands on stdin."""

    def __init__(self, args: argparse.Namespace) -> None:
        from status.domain.auth import UserPrincipal
        from status.infra.tokens import RealtimeTokens, UserTokens

        self.url = args.url
        self.api = args.api
        realtime = RealtimeTokens(args.token_secret, 6 * 3600)
        self.user_tokens = UserTokens(args.user_token_secret)
        self.connections = []
        for i in range(args.first, args.first + args.count):
            user, channels = _connection_channels(i, args.hot_members)
            token, _ = realtime.connection(UserPrincipal(TENANT, user), channels)
            self.connections.append(IdleConnection(self, user, channels, token))
        self.arrivals: list[tuple[str, str, float]] = []
        self.pushes = 0
        self.bytes = 0
        self.snapshots: list[float] = []  # seconds each snapshot took
        self.snapshot_failures = 0
        self._http: Any = None
        self._slots: asyncio.Semaphore | None = None

    def delivered(self, task_id: str | None, version: str | None, size: int) -> None:
        self.pushes += 1
        self.bytes += size
        if task_id and version:
            self.arrivals.append((task_id, str(version), time.time()))

    async def snapshot(self, user: str) -> None:
        import httpx

        if self._http is None:
            # Thousands of requests queued inside httpx's pool cost the generator more than the
            # API (its pool scans its waiters): they wait here instead, fifty at a time.
            self._http = httpx.AsyncClient(base_url=self.api, timeout=60, limits=httpx.Limits(max_connections=50))
            self._slots = asyncio.Semaphore(50)
        token = self.user_tokens.issue(TENANT, user)
        started = time.perf_counter()
        assert self._slots is not None
        async with self._slots:
            try:
                response = await self._http.get("/api/me/tasks", headers={"Authorization": f"Bearer {token}"})
                if response.status_code == 200:
                    self.snapshots.append(time.perf_counter() - started)
                    return
            except httpx.HTTPError:
                pass
        self.snapshot_failures += 1

    async def main(self) -> None:
        tasks = []
        for n, conn in enumerate(self.connections):
            tasks.append(asyncio.create_task(conn.run()))
            if n % 200 == 199:
                await asyncio.sleep(0.05)  # a ramp, not a SYN flood
        await asyncio.gather(*(c.connected.wait() for c in self.connections))
        self._say({"ready": len(self.connections)})
        reader = asyncio.StreamReader()
        await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := (await reader.readline()).decode().strip():
            command, *rest = line.split()
            if command == "stats":
                self._say(
                    {
                        "held": sum(c.connected.is_set() for c in self.connections),
                        "pushes": self.pushes,
                        "bytes": self.bytes,
                        "rss": _rss(os.getpid()),
                    }
                )
            elif command == "reconnect":
                await self._reconnect(float(rest[0]))
            elif command == "dump":
                Path(rest[0]).write_text(json.dumps(self.arrivals))
                self.arrivals = []
                self._say({"dumped": True})
        for task in tasks:
            task.cancel()

    async def _reconnect(self, fraction: float) -> None:
        chosen = random.sample(self.connections, max(1, int(len(self.connections) * fraction)))
        self.snapshots, self.snapshot_failures = [], 0
        started = time.perf_counter()
        for conn in chosen:
            conn.recovered = None
            conn.connected.clear()
            if conn.ws is not None:
                conn.ws.transport.abort()  # the network dropped it: no close handshake
        await asyncio.gather(*(c.connected.wait() for c in chosen))
        took = time.perf_counter() - started
        self._say(
            {
                "reconnected": len(chosen),
                "seconds": took,
                "recovered": sum(c.recovered is True for c in chosen),
                "not_recovered": sum(c.recovered is False for c in chosen),
                "snapshots": self.snapshots,
                "snapshot_failures": self.snapshot_failures,
            }
        )

    @staticmethod
    def _say(message: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def _rss(pid: int) -> int:
    """Resident memory of a process in bytes (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


# ------------------------------------------------------------------ the parent
class Clients:
    """The idle-connection processes, and commands to all of them at once: this file's
    ``--role idle`` (Python), or ``bench/idle-clients`` (Go, for more connections than Python
    holds here), which answer the same commands."""

    def __init__(self, specs: list[dict[str, Any]], common: list[str], go_binary: Path | None = None) -> None:
        self.procs = [
            subprocess.Popen(
                self._go_command(go_binary, spec, common) if go_binary else self._python_command(spec, common),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for spec in specs
        ]

    @staticmethod
    def _python_command(spec: dict[str, Any], common: list[str]) -> list[str]:
        return [
            sys.executable,
            __file__,
            *("--role", "idle", "--url", spec["url"]),
            *("--first", str(spec["first"]), "--count", str(spec["count"])),
            *common,
        ]

    @staticmethod
    def _go_command(binary: Path, spec: dict[str, Any], common: list[str]) -> list[str]:
        """The Go clients take their connections from a file: the user, the connection token
        (the channels the Python clients would put in it) and a user token for snapshots."""
        from status.domain.auth import UserPrincipal
        from status.infra.tokens import RealtimeTokens, UserTokens

        given = dict(zip(common[::2], common[1::2], strict=True))
        realtime = RealtimeTokens(given["--token-secret"], 6 * 3600)
        user_tokens = UserTokens(given["--user-token-secret"])
        lines = []
        for i in range(spec["first"], spec["first"] + spec["count"]):
            user, channels = _connection_channels(i, int(given["--hot-members"]))
            token, _ = realtime.connection(UserPrincipal(TENANT, user), channels)
            lines.append(f"{user}\t{token}\t{user_tokens.issue(TENANT, user, ttl_seconds=6 * 3600)}")
        path = Path(tempfile.mkdtemp(prefix="idle-clients-")) / "connections.tsv"
        path.write_text("\n".join(lines) + "\n")
        return [str(binary), "-url", spec["url"], "-api", given["--api"], "-connections", str(path)]

    def read_all(self) -> list[dict[str, Any]]:
        return [json.loads(proc.stdout.readline()) for proc in self.procs]  # type: ignore[union-attr]

    def command(self, line: str) -> list[dict[str, Any]]:
        for proc in self.procs:
            proc.stdin.write(line + "\n")  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
        return self.read_all()

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(OSError):
                proc.stdin.close()  # type: ignore[union-attr]
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


class Producer:
    """The active tasks' changes (every ``interval`` s each, batched as plugin workers send them) and
    their steps' heartbeats; commit times kept for the sampled tasks."""

    def __init__(self, base: str, worker_token: str, executions: list[dict[str, Any]], sampled: set[str]) -> None:
        import httpx

        self.base = base
        self.headers = {"Authorization": f"Bearer {worker_token}"}
        self.executions = executions
        self.sampled = sampled
        self.committed: dict[tuple[str, str], float] = {}
        self.changes = 0
        self.beats = 0
        self.failures = 0
        self.beat_at: dict[int, float] = {}  # execution index -> time.monotonic() of its last accepted beat
        self.beat_batches: list[float] = []  # seconds each heartbeat batch took to be answered
        self.retried = 0  # refusals answered UNAVAILABLE (a bucket between shards), sent again as they were
        self.paused = threading.Event()  # changes held (an outage: a worker's reports wait in its outbox)
        self.stop = threading.Event()
        self._httpx = httpx

    def run_changes(self, part: list[dict[str, Any]], interval: float) -> None:
        client = self._httpx.Client(base_url=self.base, headers=self.headers, timeout=60)
        now = time.monotonic()
        due = {i: now + random.uniform(0, interval) for i in range(len(part))}  # spread, not in step
        again: dict[int, dict[str, Any]] = {}  # refused for now: the same event, its eventId kept, soon
        while not self.stop.is_set():
            now = time.monotonic()
            ready = [i for i, at in due.items() if at <= now] if not self.paused.is_set() else []
            for start in range(0, len(ready), 200):
                batch = ready[start : start + 200]
                events = [again.pop(i, None) or next_progress(part[i]) for i in batch]
                try:
                    response = client.post("/internal/v1/task-events:batch", json={"events": events})
                    results = response.json()["results"] if response.status_code == 200 else []
                except (self._httpx.HTTPError, ValueError):
                    results = []
                self._record(part, batch, events, results, again)
            for i in ready:
                due[i] = now + 0.05 if i in again else due[i] + interval
            self.stop.wait(0.05)

    def _record(
        self,
        part: list[dict[str, Any]],
        batch: list[int],
        events: list[dict[str, Any]],
        results: list[dict[str, Any]],
        again: dict[int, dict[str, Any]],
    ) -> None:
        """A batch's answers: accepted changes counted (and timed), retryable refusals kept to send
        again as they were, the rest failures."""
        at = time.time()
        if len(results) != len(batch):
            self.failures += len(batch)
        for i, event, result in zip(batch, events, results, strict=False):
            if result.get("error", {}).get("retryable"):
                self.retried += 1
                again[i] = event
            elif result.get("accepted"):
                self.changes += 1
                task_id = part[i]["taskId"]
                if task_id in self.sampled:
                    self.committed[(task_id, str(result.get("taskVersion")))] = at
            else:
                self.failures += 1
                if os.environ.get("CAPACITY_DEBUG"):
                    print("refused:", result, file=sys.stderr)

    def run_heartbeats(self, interval: float) -> None:
        client = self._httpx.Client(base_url=self.base, headers=self.headers, timeout=60)
        now = time.monotonic()
        due = {i: now + random.uniform(0, interval) for i in range(len(self.executions))}
        seq = dict.fromkeys(due, 0)
        while not self.stop.is_set():
            now = time.monotonic()
            ready = [i for i, at in due.items() if at <= now]
            for start in range(0, len(ready), 2000):
                chosen = ready[start : start + 2000]
                items = []
                for i in chosen:
                    seq[i] += 1
                    items.append({"executionHandle": self.executions[i]["executionHandle"], "heartbeatSeq": seq[i]})
                with contextlib.suppress(self._httpx.HTTPError):
                    sent = time.monotonic()
                    response = client.post("/internal/v1/task-heartbeats:batch", json={"heartbeats": items})
                    self.beat_batches.append(time.monotonic() - sent)
                    if response.status_code == 200:
                        at = time.monotonic()
                        for i, result in zip(chosen, response.json()["results"], strict=True):
                            if result.get("accepted"):
                                self.beats += 1
                                self.beat_at[i] = at
            for i in ready:
                due[i] += interval
            self.stop.wait(0.2)


def next_progress(ex: dict[str, Any]) -> dict[str, Any]:
    """The execution's next STEP_PROGRESS, with its handle (the events batch's shape)."""
    ex["seq"] += 1
    return {
        "eventId": f"cap-{ex['executionId']}-{ex['seq']}",
        "eventType": "STEP_PROGRESS",
        "sourceSeq": ex["seq"],
        "occurredAt": _now_iso(),
        "progress": {"current": ex["seq"] % 1000, "total": 1000},
        "executionHandle": ex["executionHandle"],
    }


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _histogram(urls: list[str], name: str) -> dict[float, float]:
    """Cumulative bucket counts of a Prometheus histogram (upper bound -> count), summed over the
    observers' endpoints."""
    buckets: dict[float, float] = {}
    for url in urls:
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        for line in text.splitlines():
            if line.startswith(f"{name}_bucket"):
                bound = line.split('le="', 1)[1].split('"', 1)[0]
                key = math.inf if bound == "+Inf" else float(bound)
                buckets[key] = buckets.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return buckets


def _bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> str:
    """The histogram bucket the q-quantile of the observations between two scrapes falls in."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    if not counts or counts[-1] <= 0:
        return "n/a"
    for bound, count in zip(bounds, counts, strict=True):
        if count >= q * counts[-1]:
            return f"<= {bound * 1000:.0f} ms" if bound != math.inf else "> last bucket"
    return "n/a"


def _pid_of(name: str) -> int | None:
    for comm in Path("/proc").glob("[0-9]*/comm"):
        with contextlib.suppress(OSError):
            if comm.read_text().strip() == name:
                return int(comm.parent.name)
    return None


def _commits(url: str) -> int:
    import sqlalchemy as sa

    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        row = conn.exec_driver_sql("SHOW GLOBAL STATUS LIKE 'Com_commit'").fetchone()
    engine.dispose()
    return int(row[1]) if row else 0


@contextlib.contextmanager
def databases(shards: int) -> Iterator[dict[str, str]]:
    """Scratch databases by shard name (one: a single-database install), a map over them when more."""
    from common import scratch_database  # type: ignore[import-not-found]

    from status.infra.db import create_engine
    from status.infra.shards import install_map

    with contextlib.ExitStack() as scratch:
        urls = {f"s{n}": scratch.enter_context(scratch_database()) for n in range(max(1, shards))}
        if shards > 1:
            engines = {name: create_engine(url) for name, url in urls.items()}
            install_map(engines["s0"], engines, datetime.now(UTC).replace(tzinfo=None))
            for engine in engines.values():
                engine.dispose()
        yield urls


@contextlib.contextmanager
def stack(connections: int, shards: int = 1) -> Iterator[dict[str, Any]]:
    """Centrifugo nodes on Redis, the API and an observer per shard, on scratch databases."""
    from common import REPO  # type: ignore[import-not-found]

    from tests.support.processes import CentrifugoNode, free_port

    workdir = Path(tempfile.mkdtemp(prefix="capacity-"))
    shared = {
        "api_key": secrets.token_hex(16),
        "token_secret": secrets.token_hex(32),
        "redis_address": "redis://127.0.0.1:6379",
    }
    nodes = [
        CentrifugoNode(workdir=workdir, **shared).start()
        for _ in range(max(1, math.ceil(connections / CONNECTIONS_PER_NODE)))
    ]
    secrets_env = {
        f"TASK_OBSERVER_{n}": secrets.token_hex(32)
        for n in ("SERVICE_TOKEN_SECRET", "EXECUTION_TOKEN_SECRET", "USER_TOKEN_SECRET")
    }
    metrics_ports = [free_port() for _ in range(max(1, shards))]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with databases(shards) as urls:
            url = urls["s0"]
            sharding = (
                {
                    "TASK_OBSERVER_SHARD_NAME": "s0",
                    "TASK_OBSERVER_SHARDS": " ".join(f"{name}={u}" for name, u in urls.items() if name != "s0"),
                }
                if shards > 1
                else {}
            )
            env = {
                **os.environ,
                **secrets_env,
                "TASK_OBSERVER_ENV": "test",
                "TASK_OBSERVER_DATABASE_URL": url,
                "TASK_OBSERVER_CENTRIFUGO_API_URL": nodes[0].api_url,
                "TASK_OBSERVER_CENTRIFUGO_API_KEY": shared["api_key"],
                "TASK_OBSERVER_CENTRIFUGO_TOKEN_SECRET": shared["token_secret"],
                "TASK_OBSERVER_DATA_DIR": str(workdir),
                "TASK_OBSERVER_INTERNAL_RATE_PER_SECOND": "0",
                **sharding,
            }
            port = free_port()
            cli = str(REPO / ".venv" / "bin" / "task-observer")
            procs.append(
                subprocess.Popen(
                    [cli, "serve", "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
            )
            for name, port_of_metrics in zip(urls, metrics_ports, strict=True):
                observer_env = {**env, "TASK_OBSERVER_OBSERVER_METRICS_PORT": str(port_of_metrics)}
                if shards > 1:
                    observer_env["TASK_OBSERVER_OBSERVE_SHARD"] = name
                procs.append(
                    subprocess.Popen(
                        [cli, "observer", "--mode", "loops"],
                        env=observer_env,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
            base = f"http://127.0.0.1:{port}"
            _wait_ready(base)

            def restart_api() -> subprocess.Popen[bytes]:
                procs[0] = subprocess.Popen(
                    [cli, "serve", "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
                _wait_ready(base)
                return procs[0]

            yield {
                "restart_api": restart_api,
                "url": url,
                "urls": urls,
                "base": base,
                "nodes": nodes,
                "api": procs[0],
                "observer": procs[1],
                "observers": procs[1:],
                "metrics": [f"http://127.0.0.1:{p}/metrics" for p in metrics_ports],
                "secrets": secrets_env,
                "token_secret": shared["token_secret"],
            }
    finally:
        for proc in procs:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(15)
        for node in nodes:
            node.stop()


def _wait_ready(base: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{base}/readyz", timeout=1) as response:
            if response.status == 200:
                return
        time.sleep(0.1)
    raise RuntimeError("the API did not start")


def create_tasks(base: str, coordinator: str, tasks: int) -> list[str]:
    """``tasks`` tasks of one known step each: a workflow of ten per user."""
    import httpx

    client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {coordinator}"}, timeout=120)
    task_ids: list[str] = []
    for user in range(math.ceil(tasks / TASKS_PER_USER)):
        count = min(TASKS_PER_USER, tasks - len(task_ids))
        created = client.post(
            "/internal/v1/workflows",
            json={
                "clientWorkflowKey": uuid.uuid4().hex,
                "ownerId": f"u{user}",
                "title": f"capacity {user}",
                "initialTasks": [
                    {
                        "clientTaskKey": f"t{n}",
                        "title": f"task {n}",
                        "knownSteps": [{"stepId": "s", "operationCode": "DOCUMENT.PARSE"}],
                    }
                    for n in range(count)
                ],
            },
        )
        created.raise_for_status()
        task_ids += [t["taskId"] for t in created.json()["tasks"]]
    return task_ids


def bind_executions(base: str, coordinator: str, task_ids: list[str]) -> list[dict[str, Any]]:
    """Each task's step running: bound with its STARTED (executions:bind, a hundred at a time, as
    the plugin binds a burst). Done just before the steady load, whose heartbeats then begin within
    one interval, as a worker's do: bound before the connections' ramp (half a minute at 100,000),
    a step heard from only after its heartbeat timeout went STALE, and its first beats took the
    careful path and held step rows against the changes of the measured phase."""
    import httpx

    client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {coordinator}"}, timeout=120)
    executions: list[dict[str, Any]] = []
    for start in range(0, len(task_ids), 100):
        part = task_ids[start : start + 100]
        items = [
            {
                "activate": {
                    "taskId": task_id,
                    "stepId": "s",
                    "attempt": 1,
                    "producerId": "capacity",
                    "heartbeatIntervalSeconds": int(MODEL["heartbeat_interval"]),
                    "heartbeatTimeoutSeconds": HEARTBEAT_TIMEOUT,
                    "startedEvent": {"eventId": f"cap-start-{task_id}", "occurredAt": _now_iso(), "sourceSeq": 1},
                }
            }
            for task_id in part
        ]
        answer = client.post("/internal/v1/executions:bind", json={"items": items})
        answer.raise_for_status()
        for task_id, item in zip(part, answer.json()["results"], strict=True):
            executions.append({**item, "taskId": task_id, "seq": 1})
    return executions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=20_000)
    parser.add_argument("--tasks", type=int, default=2_000)
    parser.add_argument("--seconds", type=float, default=30.0, help="of steady model load")
    parser.add_argument("--steady-only", action="store_true", help="phases 1 and 2 only (no reconnects)")
    parser.add_argument("--outage", type=float, default=60.0, help="seconds the API is down in phase 7")
    parser.add_argument("--hot-members", type=int, help="connections in the hot project (default: a quarter)")
    parser.add_argument("--hot-rate", type=float, default=10.0, help="changes/s to the hot project's tasks")
    parser.add_argument("--backlog", type=int, default=100_000, help="outbox messages piled up in phase 5")
    parser.add_argument(
        "--move",
        action="store_true",
        help="with several shards: move a bucket of active tasks halfway through the steady load",
    )
    parser.add_argument(
        "--shards",
        default="1",
        help="shard counts, comma-separated, each run on a stack of its own and compared (1,3: needs --steady-only)",
    )
    parser.add_argument(
        "--client",
        default="python",
        choices=["python", "go"],
        help="the idle connections' processes: Python (asyncio), or Go (bench/idle-clients) past ~40,000",
    )
    parser.add_argument("--role", default="parent", choices=["parent", "idle"])
    # the idle clients' own arguments
    parser.add_argument("--url")
    parser.add_argument("--api")
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--token-secret")
    parser.add_argument("--user-token-secret")
    args = parser.parse_args()
    if args.hot_members is None:
        args.hot_members = args.connections // 4
    if args.role == "idle":
        asyncio.run(IdleClients(args).main())
        return
    run(args)


def _build_go_clients() -> Path:
    """bench/idle-clients built with the machine's Go (its one module comes from the module proxy)."""
    binary = Path(tempfile.mkdtemp(prefix="idle-clients-")) / "idle-clients"
    subprocess.run(["go", "build", "-o", str(binary), "."], cwd=GO_CLIENTS, check=True)
    return binary


def run(args: argparse.Namespace) -> None:
    from common import process_tree_cpu  # type: ignore[import-not-found]

    users = math.ceil(args.connections / TABS_PER_USER)
    active = math.ceil(args.tasks / TASKS_PER_USER)
    if active > users:
        raise SystemExit(f"{args.tasks} tasks need {active} users, more than {args.connections} connections hold")
    scale_c, scale_t = args.connections / MODEL["connections"], args.tasks / MODEL["tasks"]
    print(
        f"model (design D16): {MODEL['connections']:,} connections, {MODEL['tasks']:,} tasks changing every"
        f" {MODEL['change_interval']:.0f} s, heartbeats every {MODEL['heartbeat_interval']:.0f} s"
    )
    print(
        f"this run: {args.connections:,} connections ({scale_c:.2f}x), {args.tasks:,} tasks ({scale_t:.2f}x),"
        f" {users:,} users of {TABS_PER_USER} connections, {active:,} of them with {TASKS_PER_USER} active tasks"
    )
    counts = [int(n) for n in args.shards.split(",")]
    if (len(counts) > 1 or counts[0] > 1) and not args.steady_only:
        raise SystemExit("--shards with more than one shard, or several counts, runs phases 1 and 2: add --steady-only")
    runs = {}
    for shards in counts:
        if len(counts) > 1:
            print(f"\n=== {shards} shard(s) ===")
        runs[shards] = run_one(args, shards, process_tree_cpu)
    if len(runs) > 1:
        _compare(runs)


def _compare(runs: dict[int, dict[str, Any]]) -> None:
    """The runs side by side: what more shards carried, per shard, at what CPU per change."""
    first, *_ = runs
    print("\nshards compared (the same load asked of each; one machine, one MariaDB server):")
    for shards, figures in runs.items():
        base = runs[first]
        print(
            f"  {shards} shard(s): {figures['changes_per_s']:,.0f} changes/s"
            f" ({figures['changes_per_s'] / base['changes_per_s']:.2f}x {first} shard(s);"
            f" {figures['changes_per_s'] / shards:,.0f} per shard), CPU per change {figures['ms_per_change']:.2f} ms"
            f" ({figures['ms_per_change'] / base['ms_per_change']:.2f}x), commit -> client p99 {figures['p99']},"
            f" saturates first: {figures['busiest']}"
        )


def run_one(args: argparse.Namespace, shards: int, process_tree_cpu: Any) -> dict[str, Any]:
    """Phases 1 and 2 (and, on one shard without --steady-only, the rest) on a stack of its own."""
    from status.domain.auth import Role
    from status.infra.tokens import ServiceTokens

    with stack(args.connections, shards) as s:
        tokens = ServiceTokens(s["secrets"]["TASK_OBSERVER_SERVICE_TOKEN_SECRET"])
        coordinator = tokens.issue("capacity", TENANT, "s", [Role.COORDINATOR, Role.WORKER])
        s["coordinator"] = coordinator
        task_ids = create_tasks(s["base"], coordinator, args.tasks)
        nodes = s["nodes"]
        node_rss = sum(_rss(n.process.pid) for n in nodes)
        specs, first = [], 0
        per_client = min(CONNECTIONS_PER_CLIENT[args.client], math.ceil(args.connections / len(nodes)))
        while first < args.connections:
            count = min(per_client, args.connections - first)
            specs.append({"url": nodes[len(specs) % len(nodes)].ws_url, "first": first, "count": count})
            first += count
        common = ["--api", s["base"], "--token-secret", s["token_secret"], "--hot-members", str(args.hot_members)]
        common += ["--user-token-secret", s["secrets"]["TASK_OBSERVER_USER_TOKEN_SECRET"]]
        # 1. idle connections
        started = time.perf_counter()
        clients = Clients(specs, common, _build_go_clients() if args.client == "go" else None)
        try:
            clients.read_all()
            ramp = time.perf_counter() - started
            stats = clients.command("stats")
            held = sum(x["held"] for x in stats)
            node_mem = (sum(_rss(n.process.pid) for n in nodes) - node_rss) / max(1, held)
            client_mem = sum(x["rss"] for x in stats) / max(1, held)
            print(
                f"\n1. idle connections: {held:,} held ({held / MODEL['connections']:.2f}x the model) on"
                f" {len(nodes)} Centrifugo node(s), ramp {ramp:.1f} s; Centrifugo {node_mem / 1024:.1f} KiB per"
                f" connection, the {'Go' if args.client == 'go' else 'Python'} clients {client_mem / 1024:.1f} KiB"
            )
            executions = bind_executions(s["base"], coordinator, task_ids)
            return steady(args, s, clients, executions, process_tree_cpu)
        finally:
            clients.stop()


def steady(
    args: argparse.Namespace, s: dict[str, Any], clients: Clients, executions: list[dict[str, Any]],
    process_tree_cpu: Any,
) -> dict[str, Any]:  # fmt: skip
    producer = Producer(s["base"], _worker_token(s), executions, {ex["taskId"] for ex in executions})
    parts = [executions[i::2] for i in range(2)]
    threads = [
        threading.Thread(target=producer.run_changes, args=(part, MODEL["change_interval"]), daemon=True)
        for part in parts
    ]
    threads.append(threading.Thread(target=producer.run_heartbeats, args=(MODEL["heartbeat_interval"],), daemon=True))
    components = {
        "API": s["api"].pid,
        **{("observer" if len(s["observers"]) == 1 else f"observer {i}"): o.pid for i, o in enumerate(s["observers"])},
        "MariaDB": _pid_of("mariadbd"),
        "Redis": _pid_of("redis-server"),
        **{f"Centrifugo {i + 1}": n.process.pid for i, n in enumerate(s["nodes"])},
    }
    moving = _BucketMove(s, executions) if args.move and len(s["urls"]) > 1 else None
    for thread in threads:
        thread.start()
    time.sleep(min(10.0, args.seconds / 3))  # into the steady state: every task has changed at least once
    # 2. steady model load
    cpu = {name: process_tree_cpu(pid) for name, pid in components.items() if pid}
    cpu["idle clients"] = sum(process_tree_cpu(p) for p in clients.pids())
    cpu["producer"] = time.process_time()
    histogram = _histogram(s["metrics"], "state_commit_to_publish_seconds")
    commits = _commits(s["url"])
    stats = clients.command("stats")
    changes, beats, began = producer.changes, producer.beats, time.perf_counter()
    beat_batches = len(producer.beat_batches)
    if moving is not None:
        moving.start_after(args.seconds / 2)
    time.sleep(args.seconds)
    took = time.perf_counter() - began
    beat_latency = sorted(producer.beat_batches[beat_batches:])
    changes, beats = producer.changes - changes, producer.beats - beats
    after = clients.command("stats")
    pushes = sum(a["pushes"] - b["pushes"] for a, b in zip(after, stats, strict=True))
    push_bytes = sum(a["bytes"] - b["bytes"] for a, b in zip(after, stats, strict=True))
    used = {name: process_tree_cpu(pid) - cpu[name] for name, pid in components.items() if pid}
    used["idle clients"] = sum(process_tree_cpu(p) for p in clients.pids()) - cpu["idle clients"]
    used["producer"] = time.process_time() - cpu["producer"]
    commit_rate = (_commits(s["url"]) - commits) / took
    target_changes = args.tasks / MODEL["change_interval"]
    target_beats = args.tasks / MODEL["heartbeat_interval"]
    publish = _histogram(s["metrics"], "state_commit_to_publish_seconds")
    arrivals = _dump_arrivals(clients)
    latencies = sorted(
        at - producer.committed[(task_id, version)]
        for task_id, version, at in arrivals
        if (task_id, version) in producer.committed
    )
    print(
        f"\n2. steady model load for {took:.0f} s: {changes / took:,.0f} changes/s (target {target_changes:,.0f}:"
        f" {changes / took / target_changes:.2f}x; the model's {MODEL['tasks'] / MODEL['change_interval']:,.0f}/s is"
        f" {changes / took / (MODEL['tasks'] / MODEL['change_interval']):.2f}x), heartbeats {beats / took:,.0f}/s"
        f" (target {target_beats:,.0f}), producer failures {producer.failures}"
    )
    print(
        f"   commit -> client p50 {_ms(latencies, 0.5)} p99 {_ms(latencies, 0.99)} ({len(latencies):,} arrivals timed);"
        f" commit -> publish p50 {_bucket_quantile(histogram, publish, 0.5)},"
        f" p99 {_bucket_quantile(histogram, publish, 0.99)} (observer histogram)"
    )
    print(
        f"   delivered {pushes / took:,.0f} publications/s to clients, {push_bytes / max(1, pushes):.0f} bytes each"
        f" (model: 800); database commits {commit_rate:,.0f}/s"
    )
    print(
        f"   heartbeat batches (up to 2,000 beats, one sender): {len(beat_latency)} answered,"
        f" p50 {_ms(beat_latency, 0.5)} p99 {_ms(beat_latency, 0.99)}"
    )
    print("   CPU per component: cores used, and ms per change")
    for name, seconds in sorted(used.items(), key=lambda kv: -kv[1]):
        print(f"     {name:14s} {seconds / took:5.2f} cores  {1000 * seconds / max(1, changes):6.2f} ms/change")
    system = {name: seconds for name, seconds in used.items() if name not in ("idle clients", "producer")}
    busiest = max(system.items(), key=lambda kv: kv[1])
    print(
        f"   saturates first: {busiest[0]} ({busiest[1] / took:.2f} of one core, {os.cpu_count()} cores here;"
        f" the load generators left aside); the machine: {sum(used.values()) / took:.2f} cores busy"
    )
    if moving is not None:
        moving.report(producer, arrivals)
    figures = {
        "changes_per_s": changes / took,
        "ms_per_change": 1000 * sum(system.values()) / max(1, changes),
        "p99": _ms(latencies, 0.99),
        "busiest": f"{busiest[0]} ({busiest[1] / took:.2f} cores)",
    }
    if args.steady_only:
        producer.stop.set()
        return figures
    # 3. reconnects under that load
    for fraction in (0.1, 0.3):
        _reconnect(clients, fraction, f"3. reconnect {fraction:.0%} at once")
    # 4. history gone: every reconnect must load its snapshot
    hot_project(args, s, clients, producer)
    backlog(args, s, clients, producer)
    _drop_history()
    _reconnect(clients, 0.3, "6. history gone, reconnect 30 %")
    # 7. the status service down for a while: every executor's heartbeats come back at once
    outage(args, s, producer)
    producer.stop.set()
    for thread in threads:
        thread.join(30)
    return figures


def hot_project(args: argparse.Namespace, s: dict[str, Any], clients: Clients, producer: Producer) -> None:
    """Ten tasks granted to one project whose members hold a quarter of the connections, changed
    ``--hot-rate`` times a second beside the steady load: deliveries per second, commit -> member
    p50/p99 (the generators' own backlog included when they cannot keep up), and the cores the API
    and Centrifugo were busy meanwhile."""
    import httpx

    executions = producer.executions[:HOT_TASKS]
    admin = httpx.Client(base_url=s["base"], headers={"Authorization": f"Bearer {s['coordinator']}"}, timeout=60)
    for ex in executions:
        admin.put(f"/internal/v1/tasks/{ex['taskId']}/acl/PROJECT/{HOT_PROJECT}", json={}).raise_for_status()
    components = {"API": s["api"].pid, **{f"Centrifugo {i + 1}": n.process.pid for i, n in enumerate(s["nodes"])}}
    cpu = {name: _cpu_of(pid) for name, pid in components.items()}
    before = clients.command("stats")
    _dump_arrivals(clients)  # the steady phase's arrivals are not this phase's
    seconds = max(3.0, args.seconds / 2)
    # A change of each hot task per tick, in one request (as a worker's burst): ticks at the rate
    # that makes --hot-rate changes a second in all.
    tick = len(executions) / args.hot_rate
    sent, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        events = [next_progress(ex) for ex in executions]
        results = admin.post("/internal/v1/task-events:batch", json={"events": events}).json()["results"]
        at = time.time()
        for ex, result in zip(executions, results, strict=True):
            if result.get("accepted"):
                producer.committed[(ex["taskId"], str(result.get("taskVersion")))] = at
                sent += 1
        time.sleep(max(0.0, (sent / len(executions)) * tick - (time.perf_counter() - began)))
    took = time.perf_counter() - began
    for ex in executions:  # the project cools down: its members get no more of these tasks' changes
        admin.delete(f"/internal/v1/tasks/{ex['taskId']}/acl/PROJECT/{HOT_PROJECT}").raise_for_status()
    time.sleep(2)  # the last deliveries
    after = clients.command("stats")
    pushes = sum(a["pushes"] - b["pushes"] for a, b in zip(after, before, strict=True))
    hot = {ex["taskId"] for ex in executions}
    latencies = sorted(
        at - producer.committed[(task_id, version)]
        for task_id, version, at in _dump_arrivals(clients)
        if task_id in hot and (task_id, version) in producer.committed
    )
    used = {name: _cpu_of(pid) - cpu[name] for name, pid in components.items()}
    print(
        f"\n4. hot project: {args.hot_members:,} member connections, {HOT_TASKS} tasks granted to it changed"
        f" {sent / took:.1f} times/s: {pushes / took:,.0f} publications/s delivered in all,"
        f" {len(latencies):,} hot arrivals timed: commit -> member p50 {_ms(latencies, 0.5)}"
        f" p99 {_ms(latencies, 0.99)};"
        f" cores busy meanwhile (the steady load goes on beside it): "
        + ", ".join(f"{name} {value / took:.2f}" for name, value in used.items())
    )


def backlog(args: argparse.Namespace, s: dict[str, Any], clients: Clients, producer: Producer) -> None:
    """The observer stopped while ``--backlog`` messages pile up in the outbox (copies of the active
    tasks' own summary and detail rows, as a long relay outage leaves them), the steady load going
    on; then the observer goes on: how long until the outbox is empty and a live change committed
    now reaches its client, and the catch-up's publications per second."""
    import signal

    import orjson
    import sqlalchemy as sa

    from status.domain.clock import utcnow
    from status.domain.messages import Aggregate, Message
    from status.infra import tables as t
    from status.infra.outbox_rows import stored_columns, unpack
    from status.infra.stores import sql

    ot = t.task_outbox
    engine = sa.create_engine(s["url"], poolclass=sa.pool.NullPool)
    task_ids = [ex["taskId"] for ex in producer.executions[:500]]
    with engine.connect() as conn:
        templates = [
            [
                (m.projection, m.channels, orjson.loads(m.data))
                for m in unpack(*r)
                if m.projection in ("USER_SUMMARY", "TASK_DETAIL")
            ]
            for r in conn.execute(
                sa.select(*stored_columns(ot))
                .where(ot.c.aggregate_id.in_(task_ids))
                .order_by(ot.c.id.desc())
                .limit(1000)
            )
        ]
    templates = [template for template in templates if template]
    s["observer"].send_signal(signal.SIGSTOP)
    try:
        now = utcnow()
        with engine.begin() as conn:
            for start in range(0, args.backlog, 5000):
                messages = []
                for i in range(start, min(args.backlog, start + 5000)):
                    parts = templates[i % len(templates)]
                    # Its own aggregate: the relay coalesces a backlog per aggregate and
                    # channel, and these must neither swallow nor be swallowed by live rows.
                    backlogged = Aggregate("TASK", f"backlog-{i}", i, parts[0][1][0])
                    messages += [Message(backlogged, ch, proj, data, False, None, now) for proj, ch, data in parts]
                sql.insert_outbox(conn, messages)
        before = clients.command("stats")
        _dump_arrivals(clients)
    finally:
        s["observer"].send_signal(signal.SIGCONT)
    resumed = time.perf_counter()
    changes_at_resume = time.time()

    def pending() -> int:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    sa.select(sa.func.count())
                    .select_from(ot)
                    .where(ot.c.status.in_(["PENDING", "PROCESSING"]), ot.c.aggregate_id.like("backlog-%"))
                ).scalar_one()
            )

    while pending() > 0 and time.perf_counter() - resumed < 600:
        time.sleep(0.5)
    drained = time.perf_counter() - resumed
    after = clients.command("stats")
    pushes = sum(a["pushes"] - b["pushes"] for a, b in zip(after, before, strict=True))
    live = sorted(
        at - producer.committed[(task_id, version)]
        for task_id, version, at in _dump_arrivals(clients)
        if (task_id, version) in producer.committed and producer.committed[(task_id, version)] >= changes_at_resume
    )
    engine.dispose()
    print(
        f"\n5. outbox backlog: {args.backlog:,} messages written while the observer was stopped, then it went on:"
        f" the outbox empty after {drained:.1f} s ({args.backlog / max(drained, 1e-9):,.0f} messages/s with the"
        f" steady load beside), {pushes:,} deliveries to"
        f" clients; live changes committed meanwhile reached their"
        f" clients p50 {_ms(live, 0.5)} p99 {_ms(live, 0.99)} ({len(live):,} timed)"
    )


class _BucketMove:
    """A bucket with active tasks moved to another shard halfway through the steady load, and what
    the move did to them: how long its writes were refused, and whether anything acknowledged was
    lost or stored twice, or a client saw a version go back."""

    def __init__(self, s: dict[str, Any], executions: list[dict[str, Any]]) -> None:
        from status.domain import ids
        from status.infra.bucket_move import BucketMover
        from status.infra.db import create_engine

        self.engines = {name: create_engine(url) for name, url in s["urls"].items()}
        self.mover = BucketMover(self.engines["s0"], self.engines)
        self.bucket = ids.bucket_hint(executions[0]["taskId"])
        assert self.bucket is not None
        self.source = self.mover.route(self.bucket).shard
        self.target = next(name for name in self.engines if name != self.source)
        self.tasks = {ex["taskId"] for ex in executions if ids.bucket_hint(ex["taskId"]) == self.bucket}
        self.outcome: Any = None
        self.thread: threading.Thread | None = None

    def start_after(self, seconds: float) -> None:
        def move() -> None:
            time.sleep(seconds)
            try:
                self.outcome = self.mover.move(self.bucket, self.target)  # type: ignore[arg-type]
            except Exception as exc:  # reported below
                self.outcome = exc

        self.thread = threading.Thread(target=move, daemon=True)
        self.thread.start()

    def report(self, producer: Producer, arrivals: list[tuple[str, str, float]]) -> None:
        import sqlalchemy as sa

        from status.infra import tables as t

        assert self.thread is not None
        self.thread.join(60)
        if isinstance(self.outcome, Exception) or self.outcome is None:
            print(f"   the move of bucket {self.bucket} failed: {self.outcome!r}")
            return
        log = t.task_event_log
        with self.engines[self.target].connect() as conn:
            rows = conn.execute(
                sa.select(log.c.event_id, log.c.task_id, log.c.task_version).where(log.c.task_id.in_(self.tasks))
            ).all()
        stored = {(str(task), str(version)) for _, task, version in rows}
        acked = {key for key in producer.committed if key[0] in self.tasks}
        twice = len(rows) - len({event for event, _, _ in rows})
        gaps = 0
        for task in self.tasks:
            versions = sorted(int(v) for _, k, v in rows if k == task)
            gaps += sum(1 for a, b in itertools.pairwise(versions) if b != a + 1)
        back, seen = 0, {}
        for task, version, _ in arrivals:
            if task in self.tasks and version is not None:
                back += int(version) < seen.get(task, 0)
                seen[task] = max(seen.get(task, 0), int(version))
        print(
            f"   bucket {self.bucket} ({len(self.tasks)} active tasks) moved {self.source} -> {self.target} under the"
            f" load: its writes refused {1000 * self.outcome.fenced_seconds:.0f} ms ({producer.retried} refusals, each"
            f" sent again); acknowledged changes lost {len(acked - stored)} of {len(acked)}, stored twice {twice},"
            f" versions skipped {gaps}, seen going back by a client {back}"
        )
        for engine in self.engines.values():
            engine.dispose()


def _dump_arrivals(clients: Clients) -> list[tuple[str, str, float]]:
    """Every arrival the idle clients recorded since the last dump."""
    arrivals: list[tuple[str, str, float]] = []
    for n, proc in enumerate(clients.procs):
        path = Path(tempfile.mkdtemp()) / f"arrivals-{n}.json"
        proc.stdin.write(f"dump {path}\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        proc.stdout.readline()  # type: ignore[union-attr]
        arrivals += [tuple(a) for a in json.loads(path.read_text())]  # type: ignore[misc]
    return arrivals


def outage(args: argparse.Namespace, s: dict[str, Any], producer: Producer) -> None:
    """kill -9 of the API for ``--outage`` seconds while every step keeps beating (the beats fail,
    as a worker's do); then the API is started again: how long until every running step's beat is
    accepted again, what the API spends on the renewal, and how many steps went STALE."""
    import signal

    import sqlalchemy as sa

    from status.infra import tables as t

    producer.paused.set()
    s["api"].send_signal(signal.SIGKILL)
    s["api"].wait()
    time.sleep(args.outage)
    back = time.monotonic()
    s["api"] = s["restart_api"]()
    cpu = _cpu_of(s["api"].pid)
    deadline = back + 4 * MODEL["heartbeat_interval"]
    while time.monotonic() < deadline:
        if all(producer.beat_at.get(i, 0.0) >= back for i in range(len(producer.executions))):
            break
        time.sleep(0.1)
    renewed = sum(1 for i in range(len(producer.executions)) if producer.beat_at.get(i, 0.0) >= back)
    took = max((producer.beat_at.get(i, 0.0) for i in range(len(producer.executions))), default=back) - back
    api_cpu = _cpu_of(s["api"].pid) - cpu
    producer.paused.clear()
    engine = sa.create_engine(s["url"], poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        stale = conn.execute(
            sa.select(sa.func.count()).select_from(t.task_step).where(t.task_step.c.health == "STALE")
        ).scalar_one()
    engine.dispose()
    print(
        f"\n7. API down {args.outage:.0f} s (kill -9, then started again): {renewed:,} of"
        f" {len(producer.executions):,} running steps' heartbeats accepted again within {took:.1f} s of its return"
        f" (they beat every {MODEL['heartbeat_interval']:.0f} s); the API's CPU meanwhile {api_cpu:.1f} s;"
        f" steps STALE now: {stale} (timeout {HEARTBEAT_TIMEOUT} s: an outage of every executor suspends STALE)"
    )


def _cpu_of(pid: int) -> float:
    from common import process_tree_cpu  # type: ignore[import-not-found]

    return float(process_tree_cpu(pid))


def _drop_history() -> None:
    """Centrifugo's history streams removed from Redis: no reconnect can recover."""
    keys = subprocess.run(
        ["redis-cli", "--scan", "--pattern", "centrifugo.stream*"], capture_output=True, text=True, check=False
    ).stdout.split()
    for start in range(0, len(keys), 500):
        subprocess.run(["redis-cli", "DEL", *keys[start : start + 500]], capture_output=True, check=False)


def _reconnect(clients: Clients, fraction: float, title: str) -> None:
    results = clients.command(f"reconnect {fraction}")
    count = sum(r["reconnected"] for r in results)
    slowest = max(r["seconds"] for r in results)
    recovered = sum(r["recovered"] for r in results)
    snapshots = sorted(x for r in results for x in r["snapshots"])
    failures = sum(r["snapshot_failures"] for r in results)
    print(
        f"\n{title}: {count:,} connections back in {slowest:.1f} s; {recovered:,} recovered from history,"
        f" {count - recovered:,} did not and loaded a snapshot ({len(snapshots):,} loaded, {failures} failed;"
        f" p50 {_ms(snapshots, 0.5, 0)} p99 {_ms(snapshots, 0.99, 0)})"
    )


def _ms(values: list[float], q: float, base: float = 0.0) -> str:
    if not values:
        return "n/a"
    return f"{1000 * (values[min(len(values) - 1, int(q * len(values)))] - base):.0f} ms"


def _worker_token(s: dict[str, Any]) -> str:
    from status.domain.auth import Role
    from status.infra.tokens import ServiceTokens

    return ServiceTokens(s["secrets"]["TASK_OBSERVER_SERVICE_TOKEN_SECRET"]).issue(
        "capacity", TENANT, "s", [Role.WORKER]
    )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    main()
