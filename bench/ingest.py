"""Ingest benchmark: HTTP event path vs. the bare-driver ceiling, on MariaDB (SPEC §16).

Not a test: it prints figures and ratios.  It needs the MariaDB started by
``scripts/services up mariadb`` and creates (then drops) its own database.

    .venv/bin/python bench/ingest.py [--seconds 10] [--producers 16] [--batch-size 50]

What is measured, in one run on the same machine:

* ``ceiling``: the event transaction issued directly through PyMySQL from
  threads (lock task, lock steps, dedup lookup, update step, update task,
  insert event, insert dedup, insert two outbox rows, commit) — the same
  statement shape the service issues, without HTTP, validation or SQLAlchemy.
* ``http single``: ``POST /internal/v1/task-events`` against ``task-observer
  serve`` (uvicorn, one process), one producer per task, keep-alive clients.
* ``http batch``: ``POST /internal/v1/task-events:batch`` with many tasks'
  events per request.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pymysql
import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from status.domain.auth import Role  # noqa: E402
from status.infra import migrate  # noqa: E402
from status.infra.tokens import ServiceTokens  # noqa: E402

SERVER = os.environ.get("TASK_OBSERVER_TEST_MYSQL_URL", "mysql+pymysql://tso:tso@127.0.0.1:3306")


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
                cur.execute("SELECT payload_hash, result FROM task_event_dedup WHERE event_id=%s", (eid,))
                cur.fetchall()
                cur.execute(
                    "UPDATE task_step SET source_seq=%s, version=version+1, updated_at=%s, progress_current=%s"
                    " WHERE task_id=%s AND step_id='s' AND attempt=1",
                    (seq, now, seq, tid),
                )
                cur.execute("UPDATE task SET version=version+1, updated_at=%s WHERE id=%s", (now, tid))
                new_version = int(version) + 1
                cur.execute(
                    "INSERT INTO task_event_log (event_id, workflow_id, task_id, task_version, step_id, task_attempt,"
                    " step_attempt, producer_id, source_seq, event_type, lifecycle_status, business_status, health,"
                    " occurred_at, received_at, committed_at, payload) VALUES"
                    " (%s,'wf',%s,%s,'s',1,1,'p',%s,'STEP_PROGRESS','RUNNING','RUNNING','HEALTHY',%s,%s,%s,%s)",
                    (eid, tid, new_version, seq, now, now, now, '{"a":1}'),
                )
                cur.execute(
                    "INSERT INTO task_event_dedup (event_id, task_id, payload_hash, result, created_at)"
                    " VALUES (%s,%s,%s,%s,%s)",
                    (eid, tid, "h" * 64, '{"accepted":true}', now),
                )
                cur.execute(
                    "INSERT INTO task_outbox (aggregate_type, aggregate_id, aggregate_version, channel, projection,"
                    " must_deliver, event_id, payload, status, available_at, created_at) VALUES"
                    " ('TASK',%s,%s,%s,'USER_SUMMARY',0,%s,%s,'PENDING',%s,%s),"
                    " ('TASK',%s,%s,%s,'TASK_DETAIL',0,%s,%s,'PENDING',%s,%s)",
                    (
                        tid,
                        new_version,
                        "task_user:t/u",
                        eid,
                        payload,
                        now,
                        now,
                        tid,
                        new_version,
                        f"task_detail:t/{tid}",
                        eid,
                        payload,
                        now,
                        now,
                    ),
                )
            conn.commit()
            stats.add(time.perf_counter() - start, 1)

    elapsed = run_threads(producers, seconds, producer)
    return stats.report("ceiling", elapsed)


# ---------------------------------------------------------------- HTTP
def start_api(db: str, port: int, secrets_env: dict[str, str]) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        **secrets_env,
        "TASK_OBSERVER_ENV": "test",
        "TASK_OBSERVER_DATABASE_URL": f"{SERVER}/{db}?charset=utf8mb4",
    }
    proc = subprocess.Popen(
        [str(REPO / ".venv" / "bin" / "task-observer"), "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the API did not start")


def http_bench(
    base: str, tokens: ServiceTokens, producers: int, seconds: float, batch_size: int
) -> tuple[dict[str, float], dict[str, float]]:
    coordinator = {"Authorization": "Bearer " + tokens.issue("bench-coordinator", "bench", "s", [Role.COORDINATOR])}
    worker = {"Authorization": "Bearer " + tokens.issue("bench-worker", "bench", "s", [Role.WORKER])}
    client = httpx.Client(base_url=base, timeout=30)

    def new_execution() -> dict[str, Any]:
        created = client.post(
            "/internal/v1/workflows",
            headers=coordinator,
            json={
                "clientWorkflowKey": uuid.uuid4().hex,
                "ownerId": "u",
                "title": "bench",
                "initialTasks": [
                    {
                        "clientTaskKey": "t",
                        "title": "t",
                        "knownSteps": [{"stepId": "s", "operationCode": "DOCUMENT.PARSE"}],
                    }
                ],
            },
        ).json()
        task_id = created["tasks"][0]["taskId"]
        ctx = client.post(
            f"/internal/v1/tasks/{task_id}/steps/s:activate",
            headers=coordinator,
            json={"attempt": 1, "producerId": "bench-worker"},
        ).json()
        started = _event("STEP_STARTED", 1, ctx["executionHandle"])
        client.post("/internal/v1/task-events", headers=worker, json=started).raise_for_status()
        return ctx

    executions = [new_execution() for _ in range(producers)]
    single = Stats()

    def producer(i: int, running: Callable[[], bool]) -> None:
        handle, seq = executions[i]["executionHandle"], 1
        with httpx.Client(base_url=base, timeout=30) as c:
            while running():
                seq += 1
                start = time.perf_counter()
                r = c.post("/internal/v1/task-events", headers=worker, json=_event("STEP_PROGRESS", seq, handle))
                if r.status_code != 200:
                    single.errors += 1
                    continue
                single.add(time.perf_counter() - start, 1)
        executions[i]["seq"] = seq

    single_figures = single.report("http single", run_threads(producers, seconds, producer))

    batch = Stats()
    batch_execs = [new_execution() for _ in range(batch_size)]
    seqs = [1] * len(batch_execs)
    lock = threading.Lock()
    clients = max(2, producers // 4)

    def batcher(i: int, running: Callable[[], bool]) -> None:
        mine = list(range(i, len(batch_execs), clients))
        with httpx.Client(base_url=base, timeout=30) as c:
            while running():
                events = []
                with lock:
                    for j in mine:
                        seqs[j] += 1
                        events.append(_event("STEP_PROGRESS", seqs[j], batch_execs[j]["executionHandle"]))
                start = time.perf_counter()
                r = c.post("/internal/v1/task-events:batch", headers=worker, json={"events": events})
                accepted = sum(1 for x in r.json().get("results", []) if x.get("accepted"))
                batch.errors += len(events) - accepted
                batch.add(time.perf_counter() - start, accepted)

    batch_figures = batch.report("http batch", run_threads(clients, seconds, batcher))
    return single_figures, batch_figures


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--producers", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=200, help="events per batch request")
    parser.add_argument("--port", type=int, default=18080)
    args = parser.parse_args()

    db = f"tso_bench_{secrets.token_hex(3)}"
    server = sa.create_engine(SERVER + "/", poolclass=sa.pool.NullPool)
    with server.begin() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {db} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
    try:
        migrate.upgrade(f"{SERVER}/{db}?charset=utf8mb4")
        print(f"machine: {os.cpu_count()} cores; producers={args.producers}; {args.seconds:.0f}s per figure")
        ceil = ceiling(db, args.producers, args.seconds)
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
        api = start_api(db, args.port, env)
        try:
            single, batch = http_bench(
                f"http://127.0.0.1:{args.port}",
                ServiceTokens(env["TASK_OBSERVER_SERVICE_TOKEN_SECRET"]),
                args.producers,
                args.seconds,
                args.batch_size,
            )
        finally:
            api.terminate()
            api.wait(10)
        print(
            f"ratio single/ceiling: {single['events_per_s'] / ceil['events_per_s']:.2f}  (target >= 0.75, p99 < 50 ms)"
        )
        print(f"ratio batch/ceiling:  {batch['events_per_s'] / ceil['events_per_s']:.2f}  (target >= 3)")
    finally:
        with server.begin() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {db}"))


if __name__ == "__main__":
    main()
