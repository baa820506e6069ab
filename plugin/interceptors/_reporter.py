"""The reporter: a durable local outbox (SQLite) and a sender that never blocks activities.

Every event an activity produces gets a deterministic ``eventId`` (execution
key + sequence + kind) and its per-execution ``sourceSeq`` at once, in
memory; a writer thread then persists queued events to a local SQLite file,
many per transaction, and only persisted events are sent.  Neither the
activity nor the worker's event loop waits for the disk: the sender's own
file reads and writes run in threads too.  A background sender activates or
registers each execution (idempotently) and posts the events in
per-execution order.  If the status service is down, events wait in the
file — across worker restarts — and are resent with their original ids
(AC9).  Heartbeats are kept in memory (only the latest sequence matters) and
sent in batches with jitter.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from interceptors._context import StepBinding
from interceptors._execution import ExecutionReporter
from interceptors._grpc_transport import GrpcTransport, TransportError

log = logging.getLogger("interceptors.reporter")

SCHEMA = """
CREATE TABLE IF NOT EXISTS execution (
    key TEXT PRIMARY KEY,           -- workflow run id / activity id / attempt
    binding TEXT NOT NULL,          -- StepBinding JSON
    attempt INTEGER NOT NULL,
    next_seq INTEGER NOT NULL,
    execution_handle TEXT,
    execution_id TEXT,
    finished INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS event (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    execution_key TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    UNIQUE (execution_key, seq)
);
-- Reports the status service refused for good: kept, with why, for an operator to list
-- (task-observer undeliverable PATH) instead of vanishing.
CREATE TABLE IF NOT EXISTS undeliverable (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    execution_key TEXT NOT NULL,
    event_id TEXT,
    body TEXT NOT NULL,
    reason TEXT NOT NULL,
    refused_at REAL NOT NULL
);
"""

# Rejections that resending can never fix: the event is dropped (and logged).
FINAL_REJECTIONS = frozenset(
    {
        "EVENT_ID_CONFLICT",
        "STALE_EXECUTION",
        "STALE_ATTEMPT",
        "SOURCE_SEQ_REGRESSION",
        "INVALID_TRANSITION",
        "TERMINAL_STATE",
        "SCHEMA_REJECTED",
        "UNKNOWN_BUSINESS_STATUS",
        "VALIDATION_FAILED",
        "EVENT_TYPE_NOT_ALLOWED",
        "OPERATION_MISMATCH",
        "PRODUCER_MISMATCH",
        "TOKEN_REVOKED",
        "UNKNOWN_TASK",
        "UNKNOWN_STEP",
        "PAYLOAD_TOO_LARGE",
    }
)


# Executions bound at once (activations/registrations in flight); the rest of a burst queues.
BIND_CONCURRENCY = 8


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class ReporterConfig:
    status_url: str
    service_token: str
    producer_id: str
    outbox_path: Path
    heartbeat_interval: float = 5.0
    # How long without heartbeats before the status service marks an execution STALE;
    # None keeps the service default. At least two heartbeat intervals.
    heartbeat_timeout_seconds: int | None = None
    progress_min_interval: float = 1.0
    progress_max_interval: float = 5.0
    progress_min_delta: float = 0.05
    batch_size: int = 200
    http_timeout: float = 5.0
    # "host:port" of the service's gRPC adapter: events and heartbeats then travel as protobuf
    # over one HTTP/2 connection (binding stays on REST). None: everything over REST.
    grpc_target: str | None = None


class Reporter:
    """Owns the SQLite outbox, the sender loop and the heartbeat loop of one worker process."""

    def __init__(self, config: ReporterConfig) -> None:
        self.config = config
        self.heartbeats: dict[str, int] = {}
        self._sent_heartbeats: dict[str, int] = {}
        self._db_lock = threading.Lock()
        config.outbox_path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(config.outbox_path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        # Sequences are assigned in memory (resumed from the file), so reporting never waits
        # for a read; statements queue for the writer thread in the order they were assigned.
        self._queue = threading.Condition()
        self._next_seq: dict[str, int] = {
            key: seq for key, seq in self._db.execute("SELECT key, next_seq FROM execution WHERE finished = 0")
        }
        self._writes: list[tuple[str, tuple[Any, ...]]] = []
        self._queued_events = 0
        self._closing = False
        self._writer = threading.Thread(target=self._write_loop, name="task-status-outbox", daemon=True)
        self._writer.start()
        self._wake: asyncio.Event | None = None
        self._idle: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._client: httpx.AsyncClient | None = None
        self._grpc: GrpcTransport | None = None
        self._binds: asyncio.Semaphore | None = None
        self._backoff = 0.0
        self.delivered = 0
        self.dropped = 0  # refused for good (kept in the file's undeliverable table)
        self.config_errors = 0  # the service refused this worker's credential (reports kept, retried)
        self.rebinds = 0  # executions bound again after their handle expired

    # ------------------------------------------------------------ writing (any thread, never waits for I/O)
    def begin(self, key: str, binding: StepBinding, attempt: int) -> ExecutionReporter:
        """Record the execution and its STEP_STARTED (idempotent for the same key)."""
        with self._queue:
            resumed = key in self._next_seq
            if not resumed:
                self._next_seq[key] = 1
                self._writes.append(
                    (
                        "INSERT OR IGNORE INTO execution (key, binding, attempt, next_seq, created_at)"
                        " VALUES (?, ?, ?, 1, ?)",
                        (key, json.dumps(binding.to_json()), attempt, time.time()),
                    )
                )
        execution = ExecutionReporter(self, key, binding)
        if not resumed:
            self.enqueue(key, {"eventType": "STEP_STARTED"})
        return execution

    def enqueue(self, key: str, body: dict[str, Any], *, finished: bool = False) -> None:
        """Give the event the next sequence of its execution and queue it for the file; wake the writer."""
        with self._queue:
            seq = self._next_seq.get(key)
            if seq is None:  # finished or dropped: nothing of it is sent any more
                log.warning("ignoring a %s report for %s: the execution is closed", body.get("eventType"), key)
                return
            event = {**body, "eventId": f"{key}:{seq}:{body['eventType']}", "sourceSeq": seq, "occurredAt": _now_iso()}
            self._writes.append(
                ("INSERT INTO event (execution_key, seq, body) VALUES (?, ?, ?)", (key, seq, json.dumps(event)))
            )
            self._writes.append(
                (
                    "UPDATE execution SET next_seq = ?, finished = MAX(finished, ?) WHERE key = ?",
                    (seq + 1, int(finished), key),
                )
            )
            self._queued_events += 1
            if finished:
                del self._next_seq[key]
            else:
                self._next_seq[key] = seq + 1
            self._queue.notify()
        if finished:
            self.heartbeats.pop(key, None)

    def _write_loop(self) -> None:
        """Persist queued statements, all that queued meanwhile in one transaction, then wake the sender."""
        while True:
            with self._queue:
                while not self._writes and not self._closing:
                    self._queue.wait()
                writes, self._writes = self._writes, []
                events = self._queued_events
                if not writes:
                    return  # closing, and everything is in the file
            try:
                with self._db_lock:
                    self._db.execute("BEGIN IMMEDIATE")
                    try:
                        for sql, params in writes:
                            self._db.execute(sql, params)
                        self._db.execute("COMMIT")
                    except BaseException:
                        self._db.execute("ROLLBACK")
                        raise
            except Exception:
                log.exception("the local outbox could not be written; retrying")
                with self._queue:
                    self._writes[:0] = writes  # keep their order ahead of anything newer
                time.sleep(1.0)
                continue
            with self._queue:
                self._queued_events -= events
                self._queue.notify_all()
            self._signal()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait (bounded) until every queued event is in the file; True when it is."""
        deadline = time.monotonic() + timeout
        with self._queue:
            while self._writes or self._queued_events:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._queue.wait(remaining)
        return True

    def _signal(self) -> None:
        if self._loop is not None and self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)
            if self._idle is not None:
                self._loop.call_soon_threadsafe(self._idle.clear)

    async def drained(self, timeout: float = 30.0) -> None:
        """Wait until every queued event has been delivered (or dropped); raises TimeoutError."""
        assert self._idle is not None and self._wake is not None
        self._wake.set()
        async with asyncio.timeout(timeout):
            while await asyncio.to_thread(self.pending_events):
                self._idle.clear()
                self._wake.set()
                await self._idle.wait()

    def pending_events(self) -> int:
        """Events not delivered yet: in the file, or queued for it."""
        with self._queue:
            queued = self._queued_events
        with self._db_lock:
            return queued + int(self._db.execute("SELECT COUNT(*) FROM event").fetchone()[0])

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._binds = asyncio.Semaphore(BIND_CONCURRENCY)
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._wake.set()  # resume what a previous process left in the outbox
        self._client = httpx.AsyncClient(
            base_url=self.config.status_url.rstrip("/"),
            headers={"Authorization": f"Bearer {self.config.service_token}"},
            timeout=self.config.http_timeout,
            # httpcore scans every pooled connection to place each request: a burst of binds
            # grew the pool to 100 and made each request cost that scan. Binds wait their turn.
            limits=httpx.Limits(max_connections=BIND_CONCURRENCY + 2, max_keepalive_connections=BIND_CONCURRENCY + 2),
        )
        if self.config.grpc_target:
            self._grpc = GrpcTransport(self.config.grpc_target, self.config.service_token, self.config.http_timeout)
        self._tasks = [asyncio.create_task(self._send_loop()), asyncio.create_task(self._heartbeat_loop())]

    async def stop(self, flush_timeout: float = 5.0) -> None:
        """Try to deliver what is queued (bounded), then stop; the rest stays in the file."""
        deadline = time.monotonic() + flush_timeout
        while await asyncio.to_thread(self.pending_events) and time.monotonic() < deadline and self._backoff == 0.0:
            await asyncio.sleep(0.05)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()
        if self._grpc is not None:
            await self._grpc.close()
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        """Write what is queued to the file, stop the writer and close the file."""
        with self._queue:
            self._closing = True
            self._queue.notify_all()
        self._writer.join(timeout=30)
        with self._db_lock:
            self._db.close()

    # ------------------------------------------------------------ sending
    async def _send_loop(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                more = await self.send_once()
                self._backoff = 0.0
            except (httpx.HTTPError, _Retry, TransportError) as exc:
                self._backoff = min(30.0, max(0.2, self._backoff * 2))
                log.warning("status service unavailable (%s); retrying in %.1fs", type(exc).__name__, self._backoff)
                await asyncio.sleep(self._backoff * random.uniform(0.5, 1.0))
                more = True
            except Exception:
                log.exception("reporter send failed")
                await asyncio.sleep(1.0)
                more = True
            if more:
                self._wake.set()
            elif self._idle is not None and not await asyncio.to_thread(self.pending_events):
                self._idle.set()

    def _load_batch(self) -> tuple[list[tuple[int, str, dict[str, Any]]], dict[str, dict[str, Any]]]:
        with self._db_lock:
            rows = self._db.execute(
                "SELECT id, execution_key, body FROM event ORDER BY id LIMIT ?", (self.config.batch_size,)
            ).fetchall()
            keys = {r[1] for r in rows}
            executions = {}
            for key in keys:
                row = self._db.execute(
                    "SELECT key, binding, attempt, execution_handle, execution_id FROM execution WHERE key = ?", (key,)
                ).fetchone()
                executions[key] = {
                    "key": row[0],
                    "binding": json.loads(row[1]),
                    "attempt": row[2],
                    "handle": row[3],
                    "execution_id": row[4],
                }
        return [(r[0], r[1], json.loads(r[2])) for r in rows], executions

    async def send_once(self) -> bool:
        """Deliver one batch; returns whether more may be waiting."""
        events, executions = await asyncio.to_thread(self._load_batch)
        if not events:
            return False
        # Bind new executions concurrently: activities tend to start in bursts (fan-out, many
        # workflows on one schedule), and binding them one after another delays all their events.
        # Children naming a parent execution go in a second wave, after any parent in this batch.
        unbound = [e for e in executions.values() if e["handle"] is None]
        children = [e for e in unbound if e["binding"].get("parent_execution_id")]
        for wave in ([e for e in unbound if e not in children], children):
            outcomes = await asyncio.gather(*(self._bind_in_turn(e) for e in wave), return_exceptions=True)
            for outcome in outcomes:  # every bind has finished; the first error decides the retry
                if isinstance(outcome, BaseException):
                    raise outcome
            if not all(outcomes):
                return True  # some events were dropped; reload the batch
        body = [{**event, "executionHandle": executions[key]["handle"]} for _, key, event in events]
        results = await (self._grpc.report_events(body) if self._grpc else self._post_events(body))
        done, refused, expired, retry = [], [], set(), False
        for (event_id, key, event), result in zip(events, results, strict=True):
            if result.get("accepted"):
                done.append(event_id)
                self.delivered += 1
                continue
            code = result.get("error", {}).get("code")
            if code == "TOKEN_EXPIRED":
                # The activity outlived its handle: bind the execution again (activation is
                # idempotent per attempt and hands out a fresh handle), then send again.
                expired.add(key)
                retry = True
            elif code in FINAL_REJECTIONS:
                log.warning("event %s of %s refused for good: %s", event["eventId"], key, code)
                done.append(event_id)
                refused.append((key, event, f"{code}: {result.get('error', {}).get('message', '')}"[:300]))
                self.dropped += 1
            else:
                retry = True
        await asyncio.to_thread(self._forget, done, refused)
        if expired:
            await asyncio.to_thread(self._unbind, sorted(expired))
            return True  # re-bound on the next batch
        if retry:
            raise _Retry("retryable rejections")
        return len(events) == self.config.batch_size

    async def _post_events(self, body: list[dict[str, Any]]) -> list[dict[str, Any]]:
        assert self._client is not None
        response = await self._client.post("/internal/v1/task-events:batch", json={"events": body})
        if response.status_code >= 500 or response.status_code == 429:
            raise _Retry(f"HTTP {response.status_code}")
        if response.status_code != 200:
            raise _Retry(f"HTTP {response.status_code}: {response.text[:200]}")
        results: list[dict[str, Any]] = response.json()["results"]
        return results

    async def _bind_in_turn(self, execution: dict[str, Any]) -> bool:
        assert self._binds is not None
        async with self._binds:
            return await self._bind(execution)

    async def _bind(self, execution: dict[str, Any]) -> bool:
        """Activate (known step) or register (dynamic step) the execution; idempotent per attempt."""
        binding = StepBinding.from_json(execution["binding"])
        assert self._client is not None
        if binding.dynamic:
            url = f"/internal/v1/tasks/{binding.task_id}/executions:register"
            payload: dict[str, Any] = {
                "clientStepKey": binding.client_step_key or execution["key"].replace("/", "_")[-128:],
                "operationCode": binding.operation_code,
                "producerId": self.config.producer_id,
                "attempt": execution["attempt"],
            }
            if binding.parent_execution_id:
                payload["parentExecutionId"] = binding.parent_execution_id
            if binding.display_name:
                payload["displayName"] = binding.display_name
        else:
            url = f"/internal/v1/tasks/{binding.task_id}/steps/{binding.step_id}:activate"
            payload = {"attempt": execution["attempt"], "producerId": self.config.producer_id}
        if self.config.heartbeat_timeout_seconds:
            payload["heartbeatIntervalSeconds"] = max(1, round(self.config.heartbeat_interval))
            payload["heartbeatTimeoutSeconds"] = self.config.heartbeat_timeout_seconds
        response = await self._client.post(url, json=payload)
        # A registration the task's policy refuses (namespace or count) never succeeds on retry.
        refused_for_good = response.status_code < 500 and any(
            code in response.text for code in ("DYNAMIC_STEP_LIMIT", "DYNAMIC_STEP_NOT_ALLOWED")
        )
        if (response.status_code >= 500 or response.status_code == 429) and not refused_for_good:
            raise _Retry(f"HTTP {response.status_code}")
        if response.status_code in (401, 403) and not refused_for_good:
            # A credential problem is the deployment's, not these events': keep them, say so
            # loudly, and retry (with backoff) until the credential is fixed.
            self.config_errors += 1
            log.error(
                "the status service refuses this worker's credential (HTTP %s: %s); reports are kept and retried",
                response.status_code,
                response.text[:200],
            )
            raise _Retry(f"HTTP {response.status_code} (credential)")
        if response.status_code not in (200, 201):
            # The step can't be bound (unknown task/step, policy refused): its events can never land.
            reason = f"bind refused: HTTP {response.status_code} {response.text[:300]}"
            log.warning("cannot bind %s (%s); its events are kept as undeliverable", execution["key"], reason)
            await asyncio.to_thread(self._drop_execution, execution["key"], reason)
            return False
        context = response.json()
        await asyncio.to_thread(self._bound, execution["key"], context["executionHandle"], context["executionId"])
        execution["handle"], execution["execution_id"] = context["executionHandle"], context["executionId"]
        return True

    def _bound(self, key: str, handle: str, execution_id: str) -> None:
        with self._db_lock:
            self._db.execute(
                "UPDATE execution SET execution_handle = ?, execution_id = ? WHERE key = ?", (handle, execution_id, key)
            )

    def _unbind(self, keys: list[str]) -> None:
        with self._db_lock:
            self._db.executemany("UPDATE execution SET execution_handle = NULL WHERE key = ?", [(k,) for k in keys])
        self.rebinds += len(keys)

    def _forget(self, event_ids: list[int], refused: Sequence[tuple[str, dict[str, Any], str]] = ()) -> None:
        """Delivered (or refused for good, kept in ``undeliverable`` with why) events leave the outbox."""
        if not event_ids:
            return
        with self._db_lock:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany(
                "INSERT INTO undeliverable (execution_key, event_id, body, reason, refused_at) VALUES (?, ?, ?, ?, ?)",
                [(key, event["eventId"], json.dumps(event), reason, time.time()) for key, event, reason in refused],
            )
            self._db.executemany("DELETE FROM event WHERE id = ?", [(i,) for i in event_ids])
            # A finished execution with nothing left to send is done.
            self._db.execute(
                "DELETE FROM execution WHERE finished = 1 AND key NOT IN (SELECT execution_key FROM event)"
            )
            self._db.execute("COMMIT")

    def _drop_execution(self, key: str, reason: str) -> None:
        with self._queue:
            self._next_seq.pop(key, None)
        with self._db_lock:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(
                "INSERT INTO undeliverable (execution_key, event_id, body, reason, refused_at)"
                " SELECT execution_key, json_extract(body, '$.eventId'), body, ?, ? FROM event WHERE execution_key = ?",
                (reason, time.time(), key),
            )
            dropped = self._db.execute("DELETE FROM event WHERE execution_key = ?", (key,)).rowcount
            self._db.execute("DELETE FROM execution WHERE key = ?", (key,))
            self._db.execute("COMMIT")
        self.dropped += dropped
        self.heartbeats.pop(key, None)

    def handle_of(self, key: str) -> str | None:
        return self.handles_of([key]).get(key)

    def handles_of(self, keys: list[str]) -> dict[str, str]:
        """The execution handles of the bound executions among ``keys``."""
        with self._db_lock:
            return {
                key: row[0]
                for key in keys
                if (row := self._db.execute("SELECT execution_handle FROM execution WHERE key = ?", (key,)).fetchone())
                and row[0] is not None
            }

    # ------------------------------------------------------------ heartbeats
    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_interval * random.uniform(0.8, 1.2))
            try:
                await self.send_heartbeats()
            except httpx.HTTPError as exc:
                log.info("heartbeats not delivered (%s); next round", type(exc).__name__)
            except Exception:
                log.exception("heartbeat round failed")

    async def send_heartbeats(self) -> int:
        """Send the latest heartbeat sequence of every bound execution that beat since the last round."""
        items: list[tuple[str, dict[str, Any]]] = []
        due = {key: seq for key, seq in list(self.heartbeats.items()) if self._sent_heartbeats.get(key) != seq}
        handles = await asyncio.to_thread(self.handles_of, list(due))
        for key, seq in due.items():
            handle = handles.get(key)
            if handle is None:
                continue  # not bound yet (its STARTED is still queued)
            items.append((key, {"executionHandle": handle, "heartbeatSeq": seq, "observedAt": _now_iso()}))
        if not items:
            return 0
        beats = [item for _, item in items]
        if self._grpc is not None:
            results = await self._grpc.record_heartbeats(beats)
        else:
            assert self._client is not None
            response = await self._client.post("/internal/v1/task-heartbeats:batch", json={"heartbeats": beats})
            results = response.json()["results"] if response.status_code == 200 else None
        if results is None:
            return 0
        for (key, item), result in zip(items, results, strict=True):
            self._sent_heartbeats[key] = int(item["heartbeatSeq"])
            if not result["accepted"] and result["reason"] in ("TERMINAL_STATE", "STALE_ATTEMPT", "TOKEN_REVOKED"):
                self.heartbeats.pop(key, None)
        return len(items)


class _Retry(Exception):
    """A transient failure: back off and try again."""


def read_undeliverable(path: str | Path) -> list[dict[str, Any]]:
    """What a worker's outbox file holds as refused for good, oldest first (for operators)."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        try:
            rows = db.execute(
                "SELECT execution_key, event_id, reason, refused_at, body FROM undeliverable ORDER BY id"
            ).fetchall()
        except sqlite3.OperationalError:  # a file from before the table existed
            return []
    return [
        {"executionKey": key, "eventId": event_id, "reason": reason, "refusedAt": at, "event": json.loads(body)}
        for key, event_id, reason, at, body in rows
    ]


def execution_key(workflow_run_id: str | None, activity_id: str, attempt: int, task_queue: str) -> str:
    """A stable identity for one activity attempt (standalone activities use their task queue)."""
    return f"{workflow_run_id or 'standalone-' + task_queue}/{activity_id}/{attempt}"


def never_raises(fn: Callable[..., None]) -> Callable[..., None]:
    """Reporting must never fail the user's activity (SPEC §10)."""

    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except Exception:
            log.exception("task status reporting failed; the activity continues")

    return wrapper
