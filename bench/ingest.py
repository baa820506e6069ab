"""Ingest benchmark: HTTP event path vs. the bare-driver ceiling, on MariaDB (design D16).

Not a test: it prints figures and ratios.  It needs the MariaDB started by
``scripts/services up mariadb`` and creates (then drops) its own database.

    .venv/bin/python bench/ingest.py [--seconds 10] [--producers 16] [--batch-size 200] [--workers 1]

What is measured, in one run on the same machine:

* ``ceiling``: the event transaction issued directly through PyMySQL from
  threads (lock task, lock steps, dedup lookup, update step, update task,
  insert event, insert dedup, insert two outbox rows, commit) — the same
  statement shape the service issues, without HTTP, validation or SQLAlchemy.
* ``http single``: ``POST /internal/v1/task-events`` against ``task-observer
  serve`` (uvicorn, one process), one producer per task, keep-alive clients.
* ``http batch``: ``POST /internal/v1/task-events:batch`` with many tasks'
  events per request.
* ``grpc single`` / ``grpc batch``: the same two loads through the gRPC adapter
  (``ReportEvent`` / ``ReportEvents``, protobuf over HTTP/2) of the same server.
* ``API CPU per event``: the API process tree's CPU time (from /proc) over the
  events it accepted in that phase — the load generator is this process.
* cost growth: one producer's progress events on a task with 10 vs 1,000
  steps, and with 10k vs 1M rows in the event log and dedup tables.
* heartbeats: 1,000-item batches against 1,000 running executions (items/s),
  checking that they created no versions and no outbox rows.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import httpx
import pymysql
import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from common import SERVER, api_thread_cpu, process_tree_cpu, profile_summary, py_spy  # type: ignore[import-not-found]  # noqa: E402
from task_status_wire import convert  # noqa: E402
from task_status_wire import task_events_pb2 as pb  # noqa: E402
from task_status_wire import task_events_pb2_grpc as pb_grpc  # noqa: E402

from status.domain.auth import Role  # noqa: E402
from status.infra import migrate  # noqa: E402
from status.infra.stores.heartbeats import beats_statement  # noqa: E402
from status.infra.tokens import ServiceTokens  # noqa: E402


@dataclass
class Stats:
    latencies: list[float] = field(default_factory=list)
    events: int = 0
    errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, latency: float, events: int) -> None:
        with self.lock:
            self.latencies.append(latency)
            self.events += events

    def report(self, name: str, seconds: float) -> dict[str, float]:
        lat = sorted(self.latencies) or [0.0]
        p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000  # noqa: E731
        figures = {"events_per_s": self.events / seconds, "p50_ms": p(0.5), "p99_ms": p(0.99), "errors": self.errors}
        print(
            f"{name:<14} {figures['events_per_s']:>9.0f} events/s   p50 {figures['p50_ms']:6.1f} ms   "
            f"p99 {figures['p99_ms']:6.1f} ms   errors {self.errors}"
        )
        return figures


def run_threads(n: int, seconds: float, body: Callable[[int, Callable[[], bool]], None]) -> float:
    deadline = time.monotonic() + seconds
    failures: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            body(i, lambda: time.monotonic() < deadline)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(n)]
    start = time.monotonic()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if failures:
        raise RuntimeError(f"{len(failures)} load threads failed") from failures[0]
    return time.monotonic() - start


# ---------------------------------------------------------------- ceiling
# The project's reference ceiling (kept beside the repository, not in it): one bare PyMySQL
# transaction per event from N threads, on a database of its own.
REFERENCE_CEILING = Path(__file__).resolve().parents[2] / "shared" / "bench" / "db_ceiling.py"


def reference_ceiling(threads: int, seconds: float) -> float | None:
    """Events/s of the reference ceiling, run in its own process in this run (None if it is absent)."""
    if not REFERENCE_CEILING.is_file():
        print("reference ceiling: not found beside the repository; skipped")
        return None
    out = subprocess.run(
        [sys.executable, str(REFERENCE_CEILING), str(threads), str(seconds)],
        capture_output=True,
        text=True,
        timeout=seconds * 6 + 120,
    )
    last = (out.stdout.strip().splitlines() or [""])[-1]
    value = dict(part.split("=", 1) for part in last.split() if "=" in part).get("events_per_s")
    if out.returncode != 0 or value is None:
        print(f"reference ceiling: failed ({out.stderr.strip()[-200:]})")
        return None
    print(f"reference ceiling:    {float(value):.0f} events/s ({last})")
    return float(value)


def ceiling(db: str, producers: int, seconds: float) -> dict[str, float]:
    """The event transaction's statements straight through PyMySQL (no service code)."""
    url = sa.make_url(f"{SERVER}/{db}")
    connect = lambda: pymysql.connect(  # noqa: E731
        host=url.host, port=url.port or 3306, user=url.username, password=url.password, database=db, autocommit=False
    )
    setup = connect()
    now = datetime.now(UTC).replace(tzinfo=None)
    with setup.cursor() as cur:
        for i in range(producers):
            tid = f"ceil_{i}"
            cur.execute(
                "INSERT INTO task (id, workflow_id, client_task_key, tenant_id, owner_id, authority_scope, bucket_id,"
                " title, lifecycle_status, business_status, version, request_hash, created_at, updated_at)"
                " VALUES (%s,%s,'k','t','u','s',0,'t','RUNNING','RUNNING',1,'h',%s,%s)",
                (tid, f"wf_ceil_{i}", now, now),
            )
            cur.execute(
                "INSERT INTO task_step (task_id, step_id, attempt, client_step_key, operation_code,"
                " operation_definition_version, service_name, lifecycle_status, business_status, version, updated_at,"
                " execution_id, producer_id) VALUES (%s,'s',1,'s','OP',1,'p','RUNNING','RUNNING',1,%s,%s,'p')",
                (tid, now, f"exe_ceil_{i}"),
            )
    setup.commit()
    setup.close()
    stats = Stats()

    def producer(i: int, running: Callable[[], bool]) -> None:
        conn = connect()
        try:
            produce(conn, i, running)
        finally:
            conn.close()

    def produce(conn: Any, i: int, running: Callable[[], bool]) -> None:
        conn.query("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        tid, seq = f"ceil_{i}", 0
        payload = json.dumps({"kind": "task.summary", "taskId": tid, "state": {"x": "y" * 400}})
        while running():
            seq += 1
            start = time.perf_counter()
            now = datetime.now(UTC).replace(tzinfo=None)
            eid = f"ceil-{i}-{seq}-{uuid.uuid4().hex[:6]}"
            with conn.cursor() as cur:
                cur.execute("SELECT * FROM task WHERE id=%s FOR UPDATE", (tid,))
                row = cur.fetchone()
                version = row[[d[0] for d in cur.description].index("version")]
                cur.execute("SELECT * FROM task_step WHERE task_id=%s FOR UPDATE", (tid,))
                cur.fetchall()
                cur.execute(
                    "SELECT payload_hash, result FROM task_event_dedup WHERE tenant_id='t' AND event_id=%s", (eid,)
                )
                cur.fetchall()
                cur.execute(
                    "UPDATE task_step SET source_seq=%s, version=version+1, updated_at=%s, progress_current=%s"
                    " WHERE task_id=%s AND step_id='s' AND attempt=1",
                    (seq, now, seq, tid),
                )
                cur.execute("UPDATE task SET version=version+1, updated_at=%s WHERE id=%s", (now, tid))
                new_version = int(version) + 1
                cur.execute(
                    "INSERT INTO task_event_log (tenant_id, event_id, workflow_id, task_id, task_version, step_id,"
                    " task_attempt, step_attempt, producer_id, source_seq, event_type, lifecycle_status,"
                    " business_status, health, occurred_at, received_at, committed_at, payload) VALUES"
                    " ('t',%s,'wf',%s,%s,'s',1,1,'p',%s,'STEP_PROGRESS','RUNNING','RUNNING','HEALTHY',%s,%s,%s,%s)",
                    (eid, tid, new_version, seq, now, now, now, '{"a":1}'),
                )
                cur.execute(
                    "INSERT INTO task_event_dedup (tenant_id, event_id, task_id, payload_hash, result, created_at)"
                    " VALUES ('t',%s,%s,%s,%s,%s)",
                    (eid, tid, "h" * 64, '{"accepted":true}', now),
                )
                cur.execute(
                    "INSERT INTO task_outbox (aggregate_type, aggregate_id, aggregate_version, channel, projection,"
                    " must_deliver, event_id, payload, status, available_at, created_at, publish_key, partition_no)"
                    " VALUES ('TASK',%s,%s,%s,'USER_SUMMARY',0,%s,%s,'PENDING',%s,%s,%s,%s),"
                    " ('TASK',%s,%s,%s,'TASK_DETAIL',0,%s,%s,'PENDING',%s,%s,%s,%s)",
                    (
                        tid,
                        new_version,
                        "task_user:t/u",
                        eid,
                        payload,
                        now,
                        now,
                        uuid.uuid4().hex,
                        zlib.crc32(b"task_user:t/u") % 16,
                        tid,
                        new_version,
                        f"task_detail:t/{tid}",
                        eid,
                        payload,
                        now,
                        now,
                        uuid.uuid4().hex,
                        zlib.crc32(f"task_detail:t/{tid}".encode()) % 16,
                    ),
                )
            conn.commit()
            stats.add(time.perf_counter() - start, 1)

    elapsed = run_threads(producers, seconds, producer)
    return stats.report("ceiling", elapsed)


# ---------------------------------------------------------------- HTTP
class Api:
    """``task-observer serve`` as a separate process (or process tree with --workers)."""

    def __init__(self, db: str, port: int, secrets_env: dict[str, str], workers: int, grpc_port: int) -> None:
        env = {
            **os.environ,
            **secrets_env,
            "TASK_OBSERVER_ENV": "test",
            "TASK_OBSERVER_DATABASE_URL": f"{SERVER}/{db}?charset=utf8mb4",
            "TASK_OBSERVER_INTERNAL_RATE_PER_SECOND": "0",
        }
        command = [
            str(REPO / ".venv" / "bin" / "task-observer"),
            "serve",
            "--port",
            str(port),
            "--grpc-port",
            str(grpc_port),
        ]
        self.grpc_target = f"127.0.0.1:{grpc_port}"
        self.workers = workers
        # Its log kept until it stops: what it said about a failure is printed with the bench's.
        handle, name = tempfile.mkstemp(prefix="ingest-api-", suffix=".log")
        self.log = Path(name)
        with os.fdopen(handle, "wb") as log:
            self.proc = subprocess.Popen(
                [*command, "--workers", str(workers)], env=env, stdout=log, stderr=subprocess.STDOUT
            )
        self.base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.base}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.proc.kill()
        raise RuntimeError("the API did not start")

    def cpu_seconds(self) -> float:
        """User+system CPU of the API process and its workers so far."""
        return process_tree_cpu(self.proc.pid)

    def thread_cpu(self) -> dict[str, float]:
        """One API process's CPU so far by thread group (nothing with several processes)."""
        return api_thread_cpu(self.proc.pid) if self.workers == 1 else {}

    def errors(self, most: int = 10) -> str:
        """The last lines of its log at level error or above (a 500's traceback is among them)."""
        lines = self.log.read_text(errors="replace").splitlines()
        serious = [line for line in lines if '"level": "error"' in line or '"level": "critical"' in line]
        return "\n".join(serious[-most:])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.log.unlink(missing_ok=True)


class Load:
    """Executions and credentials on the API, for the load phases."""

    def __init__(self, api: Api, tokens: ServiceTokens, db: str) -> None:
        self.api = api
        url = sa.make_url(f"{SERVER}/{db}")
        self.db = {"host": url.host, "port": url.port or 3306, "user": url.username, "password": url.password}
        self.db["database"] = db
        self.coordinator = {
            "Authorization": "Bearer " + tokens.issue("bench-coordinator", "bench", "s", [Role.COORDINATOR])
        }
        self.worker = {"Authorization": "Bearer " + tokens.issue("bench-worker", "bench", "s", [Role.WORKER])}
        self.client = httpx.Client(base_url=api.base, timeout=60)

    def task(self, steps: int = 1, padding: int = 0) -> str:
        """A task with ``steps`` known steps (at most 200 over the API) plus ``padding`` extra step rows."""
        created = self.client.post(
            "/internal/v1/workflows",
            headers=self.coordinator,
            json={
                "clientWorkflowKey": uuid.uuid4().hex,
                "ownerId": "u",
                "title": "bench",
                "initialTasks": [
                    {
                        "clientTaskKey": "t",
                        "title": "t",
                        "knownSteps": [{"stepId": f"s{i}", "operationCode": "DOCUMENT.PARSE"} for i in range(steps)],
                    }
                ],
            },
        )
        created.raise_for_status()
        task_id = str(created.json()["tasks"][0]["taskId"])
        if padding:
            # Written before any event touches the task, so no cached view predates them.
            with pymysql.connect(**self.db) as conn, conn.cursor() as cur:
                cur.execute(
                    "INSERT INTO task_step (task_id, step_id, attempt, client_step_key, step_kind, display_name,"
                    " step_order, depth, operation_code, operation_definition_version, service_name, superseded,"
                    " source_seq, version, lifecycle_status, business_status, health, last_heartbeat_seq, updated_at)"
                    " SELECT task_id, CONCAT('pad', seq), 1, CONCAT('pad', seq), 'DYNAMIC', display_name,"
                    " 10000 + seq, 1, operation_code, operation_definition_version, service_name, 0, 0, 1,"
                    " 'SUCCEEDED', 'SUCCEEDED', 'HEALTHY', 0, updated_at"
                    f" FROM task_step JOIN seq_1_to_{padding} WHERE task_id=%s AND step_id='s0'",
                    (task_id,),
                )
                conn.commit()
        return task_id

    def execution(self, task_id: str, step: str = "s0") -> dict[str, Any]:
        """Activate a step and report STARTED; returns the execution context (with ``seq``)."""
        ctx = self.client.post(
            f"/internal/v1/tasks/{task_id}/steps/{step}:activate",
            headers=self.coordinator,
            json={"attempt": 1, "producerId": "bench-worker", "heartbeatTimeoutSeconds": 3600},
        ).json()
        started = _event("STEP_STARTED", 1, ctx["executionHandle"])
        self.client.post("/internal/v1/task-events", headers=self.worker, json=started).raise_for_status()
        return {**ctx, "seq": 1}


def measure(name: str, api: Api, stats: Stats, run: Callable[[], float]) -> dict[str, float]:
    cpu_before, load_before, threads_before = api.cpu_seconds(), time.process_time(), api.thread_cpu()
    elapsed = run()
    cpu, load_cpu = api.cpu_seconds() - cpu_before, time.process_time() - load_before
    threads = {group: seconds - threads_before.get(group, 0.0) for group, seconds in api.thread_cpu().items()}
    figures = stats.report(name, elapsed)
    figures["cpu_ms_per_event"] = 1000 * cpu / max(1, stats.events)
    # The load generator shares the machine's cores with the API and the database: its own CPU
    # per event says how much of the machine the measurement itself took.
    figures["load_cpu_ms_per_event"] = 1000 * load_cpu / max(1, stats.events)
    print(
        f"{'':<14} API CPU {figures['cpu_ms_per_event']:.2f} ms/event ({cpu:.1f} s for {stats.events} events);"
        f" load generator {figures['load_cpu_ms_per_event']:.2f} ms/event"
    )
    # Where the API's part goes: the event loop (HTTP, parsing, answers) or the units of work.
    split = [
        f"{group} {1000 * seconds / max(1, stats.events):.2f}" for group, seconds in threads.items() if seconds > 0
    ]
    if split:
        print(f"{'':<14} by thread, ms/event: {'; '.join(split)}")
    return figures


class KeepAlive:
    """One HTTP/1.1 keep-alive connection that posts JSON and reads the answer, nothing more.

    The single-event phase sends a request per event from 16 threads; through httpx the load
    generator spent about as much CPU per event as the API (0.55 ms, docs/benchmarks.md), on the
    same two cores. This costs a few tens of microseconds, so the figure measures the service.
    """

    def __init__(self, base: str, headers: dict[str, str]) -> None:
        url = httpx.URL(base)
        self._sock = socket.create_connection((url.host, url.port or 80), timeout=30)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        fixed = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        self._head = f"Host: {url.host}\r\nContent-Type: application/json\r\n{fixed}"
        self._buffer = b""

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        payload = json.dumps(body).encode()
        request = f"POST {path} HTTP/1.1\r\n{self._head}Content-Length: {len(payload)}\r\n\r\n"
        self._sock.sendall(request.encode() + payload)
        while b"\r\n\r\n" not in self._buffer:
            self._receive()
        head, _, rest = self._buffer.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = next(int(line.split(b":", 1)[1]) for line in lines if line.lower().startswith(b"content-length:"))
        while len(rest) < length:
            self._buffer = rest
            self._receive()
            rest = self._buffer
        self._buffer = rest[length:]
        return int(lines[0].split(b" ", 2)[1]), rest[:length]

    def _receive(self) -> None:
        chunk = self._sock.recv(65536)
        if not chunk:
            raise ConnectionError("the API closed the connection")
        self._buffer += chunk

    def close(self) -> None:
        self._sock.close()


def http_single(load: Load, producers: int, seconds: float) -> dict[str, float]:
    executions = [load.execution(load.task()) for _ in range(producers)]
    stats = Stats()

    def producer(i: int, running: Callable[[], bool]) -> None:
        ctx = executions[i]
        connection = KeepAlive(load.api.base, load.worker)
        try:
            while running():
                ctx["seq"] += 1
                start = time.perf_counter()
                body = _event("STEP_PROGRESS", ctx["seq"], ctx["executionHandle"])
                status, _ = connection.post("/internal/v1/task-events", body)
                if status != 200:
                    stats.errors += 1
                    continue
                stats.add(time.perf_counter() - start, 1)
        finally:
            connection.close()

    return measure("http single", load.api, stats, lambda: run_threads(producers, seconds, producer))


def http_batch(load: Load, producers: int, seconds: float, batch_size: int) -> dict[str, float]:
    executions = [load.execution(load.task()) for _ in range(batch_size)]
    stats = Stats()
    lock = threading.Lock()
    clients = max(2, producers // 4)

    def batcher(i: int, running: Callable[[], bool]) -> None:
        mine = executions[i::clients]
        with httpx.Client(base_url=load.api.base, timeout=60) as c:
            while running():
                with lock:
                    for ctx in mine:
                        ctx["seq"] += 1
                    events = [_event("STEP_PROGRESS", ctx["seq"], ctx["executionHandle"]) for ctx in mine]
                start = time.perf_counter()
                r = c.post("/internal/v1/task-events:batch", headers=load.worker, json={"events": events})
                accepted = sum(1 for x in r.json().get("results", []) if x.get("accepted"))
                stats.errors += len(events) - accepted
                stats.add(time.perf_counter() - start, accepted)

    return measure("http batch", load.api, stats, lambda: run_threads(clients, seconds, batcher))


def grpc_single(load: Load, producers: int, seconds: float) -> dict[str, float]:
    executions = [load.execution(load.task()) for _ in range(producers)]
    stats = Stats()
    metadata = (("authorization", load.worker["Authorization"]),)

    def producer(i: int, running: Callable[[], bool]) -> None:
        ctx = executions[i]
        with grpc.insecure_channel(load.api.grpc_target) as channel:
            stub = pb_grpc.TaskEventsStub(channel)
            while running():
                ctx["seq"] += 1
                start = time.perf_counter()
                message = convert.event_from_json(_event("STEP_PROGRESS", ctx["seq"], ctx["executionHandle"]))
                try:
                    stub.ReportEvent(message, metadata=metadata, timeout=30)
                except grpc.RpcError:
                    stats.errors += 1
                    continue
                stats.add(time.perf_counter() - start, 1)

    return measure("grpc single", load.api, stats, lambda: run_threads(producers, seconds, producer))


def grpc_batch(load: Load, producers: int, seconds: float, batch_size: int) -> dict[str, float]:
    executions = [load.execution(load.task()) for _ in range(batch_size)]
    stats = Stats()
    lock = threading.Lock()
    clients = max(2, producers // 4)
    metadata = (("authorization", load.worker["Authorization"]),)

    def batcher(i: int, running: Callable[[], bool]) -> None:
        mine = executions[i::clients]
        with grpc.insecure_channel(load.api.grpc_target) as channel:
            stub = pb_grpc.TaskEventsStub(channel)
            while running():
                with lock:
                    for ctx in mine:
                        ctx["seq"] += 1
                    events = [_event("STEP_PROGRESS", ctx["seq"], ctx["executionHandle"]) for ctx in mine]
                start = time.perf_counter()
                batch = pb.EventBatch(events=[convert.event_from_json(e) for e in events])
                reply = stub.ReportEvents(batch, metadata=metadata, timeout=60)
                accepted = sum(1 for x in reply.results if x.accepted)
                stats.errors += len(events) - accepted
                stats.add(time.perf_counter() - start, accepted)

    return measure("grpc batch", load.api, stats, lambda: run_threads(clients, seconds, batcher))


def one_producer(load: Load, name: str, ctx: dict[str, Any], seconds: float) -> dict[str, float]:
    """Sequential progress events of one execution: the per-event cost without contention."""
    stats = Stats()

    def producer(_: int, running: Callable[[], bool]) -> None:
        with httpx.Client(base_url=load.api.base, timeout=30) as c:
            while running():
                ctx["seq"] += 1
                start = time.perf_counter()
                body = _event("STEP_PROGRESS", ctx["seq"], ctx["executionHandle"])
                c.post("/internal/v1/task-events", headers=load.worker, json=body).raise_for_status()
                stats.add(time.perf_counter() - start, 1)

    return measure(name, load.api, stats, lambda: run_threads(1, seconds, producer))


def grow_event_log(db: str, rows: int) -> int:
    """Pad the event log and dedup tables with other tasks' rows until they hold ``rows`` rows."""
    url = sa.make_url(f"{SERVER}/{db}")
    conn = pymysql.connect(
        host=url.host, port=url.port or 3306, user=url.username, password=url.password, database=db, autocommit=True
    )
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM task_event_log")
        have = int(cur.fetchone()[0])
        if have == 0:
            raise RuntimeError("the event log is empty: report some events before padding it")
        while have < rows:
            round_ = secrets.token_hex(3)
            take = min(have, rows - have)
            cur.execute(
                "INSERT INTO task_event_log (event_id, workflow_id, task_id, task_version, step_id, task_attempt,"
                " step_attempt, producer_id, source_seq, event_type, lifecycle_status, business_status, health,"
                " occurred_at, received_at, committed_at, payload)"
                f" SELECT CONCAT('p{round_}-', MD5(event_id)), workflow_id,"
                f" CONCAT('p{round_}-', LEFT(MD5(task_id), 16)), task_version, step_id, task_attempt, step_attempt,"
                " producer_id, source_seq, event_type,"
                " lifecycle_status, business_status, health, occurred_at, received_at, committed_at, payload"
                f" FROM task_event_log LIMIT {take}"
            )
            cur.execute(
                "INSERT INTO task_event_dedup (event_id, task_id, payload_hash, result, created_at)"
                f" SELECT CONCAT('p{round_}-', MD5(event_id)), CONCAT('p{round_}-', LEFT(MD5(task_id), 16)),"
                f" payload_hash, result, created_at FROM task_event_dedup LIMIT {take}"
            )
            have += take
    conn.close()
    return have


def heartbeats(load: Load, db: str, seconds: float, per_batch: int = 1000, clients: int = 2) -> dict[str, float]:
    """1,000-item heartbeat batches (each client a worker beating for its own executions): items/s,
    and a check that they created no versions and no outbox rows."""
    per_task = 200  # the most known steps a task takes over the API
    contexts = [
        [load.execution(task_id, f"s{i}") for task_id in tasks for i in range(per_task)]
        for tasks in [[load.task(steps=per_task) for _ in range(per_batch // per_task)] for _ in range(clients)]
    ]
    handles = [[ctx["executionHandle"] for ctx in mine] for mine in contexts]
    engine = sa.create_engine(f"{SERVER}/{db}", poolclass=sa.pool.NullPool)

    def state() -> tuple[int, int]:
        with engine.connect() as conn:
            version = conn.execute(sa.text("SELECT SUM(version) FROM task")).scalar_one()
            outbox = conn.execute(sa.text("SELECT COUNT(*) FROM task_outbox")).scalar_one()
        return int(version), int(outbox)

    before = state()
    stats = Stats()

    def sender(i: int, running: Callable[[], bool]) -> None:
        seq = 0
        with httpx.Client(base_url=load.api.base, timeout=60) as c:
            while running():
                seq += 1
                items = [{"executionHandle": h, "heartbeatSeq": seq} for h in handles[i]]
                start = time.perf_counter()
                r = c.post("/internal/v1/task-heartbeats:batch", headers=load.worker, json={"heartbeats": items})
                r.raise_for_status()
                accepted = sum(1 for x in r.json()["results"] if x["accepted"])
                stats.errors += len(items) - accepted
                stats.add(time.perf_counter() - start, accepted)

    figures = measure("heartbeats", load.api, stats, lambda: run_threads(clients, seconds, sender))
    after = state()
    engine.dispose()
    print(f"{'':<14} versions created {after[0] - before[0]}, outbox rows created {after[1] - before[1]}")
    figures["ceiling_per_s"] = heartbeat_ceiling(load, contexts, seconds)
    return figures


def heartbeat_ceiling(load: Load, contexts: list[list[dict[str, Any]]], seconds: float) -> float:
    """The same guarded statement the service writes a batch with, on the same rows, from as many
    threads as clients, straight through PyMySQL: beats/s with no HTTP, parsing or answer."""
    stats = Stats()

    def beater(i: int, running: Callable[[], bool]) -> None:
        beats = sorted((c["taskId"], c["stepId"], int(c["stepAttempt"]), c["executionId"]) for c in contexts[i])
        statement = beats_statement(len(beats), guarded=True)
        seq = 1_000_000  # past what the API phase wrote
        with pymysql.connect(**load.db, autocommit=False) as conn, conn.cursor() as cur:
            while running():
                seq += 1
                now = datetime.now(UTC).replace(tzinfo=None)
                start = time.perf_counter()
                written = cur.execute(statement, (*[v for beat in beats for v in (beat[3], seq)], now, now, now))
                conn.commit()
                stats.add(time.perf_counter() - start, written)

    return stats.report("beat ceiling", run_threads(len(contexts), seconds, beater))["events_per_s"]


def _event(kind: str, seq: int, handle: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "eventId": f"evt-{uuid.uuid4().hex}",
        "eventType": kind,
        "sourceSeq": seq,
        "occurredAt": datetime.now(UTC).isoformat(),
        "executionHandle": handle,
    }
    if kind == "STEP_PROGRESS":
        body["progress"] = {"current": seq % 100, "total": 100, "unit": "page"}
    return body


def _growth(name: str, small: dict[str, float], large: dict[str, float]) -> None:
    cpu = large["cpu_ms_per_event"] / small["cpu_ms_per_event"] - 1
    p50 = large["p50_ms"] / small["p50_ms"] - 1
    print(f"growth {name:<22} API CPU {cpu:+.0%}, p50 latency {p50:+.0%}  (target within ±20%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--producers", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=200, help="events per batch request")
    parser.add_argument("--workers", type=int, default=1, help="API processes (serve --workers)")
    parser.add_argument("--port", type=int, default=18080)
    parser.add_argument("--skip-growth", action="store_true", help="skip the 1M-row event log figure")
    parser.add_argument("--http-only", action="store_true", help="stop after the HTTP single and batch figures")
    parser.add_argument("--json", type=Path, help="write the ceiling's and the HTTP figures here too")
    parser.add_argument(
        "--profile",
        type=Path,
        help="directory: py-spy the API through the HTTP phases (api-single.txt, api-batch.txt) and print the heaviest",
    )
    args = parser.parse_args()
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)

    db = f"tso_bench_{secrets.token_hex(3)}"
    server = sa.create_engine(SERVER + "/", poolclass=sa.pool.NullPool)
    with server.begin() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {db} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
    try:
        migrate.upgrade(f"{SERVER}/{db}?charset=utf8mb4")
        print(
            f"machine: {os.cpu_count()} cores; producers={args.producers}; API workers={args.workers};"
            f" {args.seconds:.0f}s per figure; the API's driver: {sa.make_url(SERVER).drivername}"
        )
        ceil = ceiling(db, args.producers, args.seconds)
        reference = reference_ceiling(args.producers, args.seconds)
        env = {
            f"TASK_OBSERVER_{n}": secrets.token_hex(32)
            for n in (
                "CENTRIFUGO_API_KEY",
                "CENTRIFUGO_TOKEN_SECRET",
                "SERVICE_TOKEN_SECRET",
                "EXECUTION_TOKEN_SECRET",
                "USER_TOKEN_SECRET",
            )
        }
        api = Api(db, args.port, env, args.workers, args.port + 1)
        try:
            load = Load(api, ServiceTokens(env["TASK_OBSERVER_SERVICE_TOKEN_SECRET"]), db)
            profiles = (
                (None, None)
                if args.profile is None
                else (args.profile / "api-single.txt", args.profile / "api-batch.txt")
            )
            with py_spy(api.proc.pid, profiles[0]):
                single = http_single(load, args.producers, args.seconds)
            with py_spy(api.proc.pid, profiles[1]):
                batch = http_batch(load, args.producers, args.seconds, args.batch_size)
            for profile in profiles:
                if profile is not None:
                    print(f"profile of the API ({profile.name}):\n{profile_summary(profile, 25)}")
            print(
                f"ratio single/ceiling: {single['events_per_s'] / ceil['events_per_s']:.2f}"
                f"  (target >= 0.75 at p99 < 50 ms; p99 {single['p99_ms']:.0f} ms)"
            )
            print(f"ratio batch/ceiling:  {batch['events_per_s'] / ceil['events_per_s']:.2f}  (target >= 3)")
            if reference:
                print(
                    f"vs the reference ceiling ({reference:.0f} events/s, measured in this run):"
                    f" single {single['events_per_s'] / reference:.2f}x (target >= 1),"
                    f" batch {batch['events_per_s'] / reference:.2f}x (target >= 3)"
                )
            print(
                f"API CPU per event:    single {single['cpu_ms_per_event']:.2f} ms,"
                f" batch {batch['cpu_ms_per_event']:.2f} ms  (target <= 0.7 single, <= 0.25 batch)"
            )
            if args.json is not None:
                args.json.write_text(json.dumps({"ceiling": ceil, "single": single, "batch": batch}))
            if args.http_only:
                return
            g_single = grpc_single(load, args.producers, args.seconds)
            g_batch = grpc_batch(load, args.producers, args.seconds, args.batch_size)
            print(
                f"gRPC / HTTP:          single {g_single['events_per_s'] / single['events_per_s']:.2f}x events/s"
                f" ({g_single['cpu_ms_per_event']:.2f} vs {single['cpu_ms_per_event']:.2f} ms API CPU/event),"
                f" batch {g_batch['events_per_s'] / batch['events_per_s']:.2f}x"
                f" ({g_batch['cpu_ms_per_event']:.2f} vs {batch['cpu_ms_per_event']:.2f} ms)"
            )
            few = one_producer(load, "10 steps", load.execution(load.task(steps=10)), args.seconds / 2)
            # 50 steps fill the detail window (a detail message lists at most 50): from there on only
            # the step count grows, which is what must not cost more per event.
            window = one_producer(load, "50 steps", load.execution(load.task(steps=10, padding=40)), args.seconds / 2)
            many = one_producer(load, "1000 steps", load.execution(load.task(steps=10, padding=990)), args.seconds / 2)
            _growth("10 -> 1,000 steps", few, many)
            _growth("50 -> 1,000 steps", window, many)
            if not args.skip_growth:
                grow_event_log(db, 10_000)
                small = one_producer(load, "10k log rows", load.execution(load.task()), args.seconds / 2)
                grown = grow_event_log(db, 1_000_000)
                large = one_producer(load, f"{grown // 1000}k log rows", load.execution(load.task()), args.seconds / 2)
                _growth("10k -> 1M log rows", small, large)
            beats = heartbeats(load, db, args.seconds)
            print(
                f"heartbeats/s:         {beats['events_per_s']:.0f}  (target >= 100,000);"
                f" {beats['events_per_s'] / beats['ceiling_per_s']:.2f}x the bare statement's"
                f" {beats['ceiling_per_s']:.0f} beats/s on the same rows; {beats['cpu_ms_per_event'] * 1000:.1f} µs"
                " API CPU per beat"
            )
        except Exception:
            print(f"the API's errors:\n{api.errors() or '(none logged)'}", file=sys.stderr)
            raise
        finally:
            api.stop()
    finally:
        with server.begin() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {db}"))


if __name__ == "__main__":
    main()
