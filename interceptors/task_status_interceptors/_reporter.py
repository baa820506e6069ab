"""The reporter: the policy that turns an activity's reports into deliveries, never blocking it.

Events go to the durable local outbox (``_outbox``) with deterministic ids at
once; only persisted events are sent. A sender thread of its own binds each
execution (activation or registration, idempotent per attempt) and posts the
events in per-execution order over a transport (``_transport``: REST, or the
gRPC adapter). What a pass sends and what an answer means — delivered, refused
for good (kept as undeliverable), a handle to renew, or a retry with backoff —
is ``_delivery``'s. If the status service is down, events wait in the file — across worker
restarts — and are resent with their original ids (design P9). Heartbeats are kept
in memory (only the latest sequence matters) and sent in batches with jitter.

The worker's event loop only records reports in memory: sending runs on the sender thread with
blocking calls, so a burst of reports costs the loop no wake-up, no hand-off to a thread pool and
no asyncio task (docs/architecture.md, "The plugin's sender").
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from task_status_interceptors._context import StepBinding
from task_status_interceptors._delivery import Delivery, Retry
from task_status_interceptors._execution import ExecutionReporter, ProgressPolicy
from task_status_interceptors._heartbeats import HeartbeatBook
from task_status_interceptors._outbox import Outbox
from task_status_interceptors._sender import SenderThread
from task_status_interceptors._transport import (
    HttpTransport,
    Transport,
    TransportError,
)

log = logging.getLogger("task_status_interceptors.reporter")


# A pass's fixed cost (a transaction, a request, the hand-offs between threads) lands on the
# worker's threads and on the service: at 200 ms rather than 50 the worker's writer and sender
# cost less than half, the service's CPU per activity a third less, for reports of a busy worker
# that reach the service up to 150 ms later (docs/benchmarks.md, "2026-12-07 (late evening)").
DEFAULT_WRITE_INTERVAL = 0.2


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
    # While reports keep coming, the outbox file takes one transaction (and the sender one request)
    # per this many seconds at most: what comes meanwhile joins it. The first after a quiet spell
    # goes at once.
    write_interval: float = DEFAULT_WRITE_INTERVAL
    http_timeout: float = 5.0
    # "host:port" of the service's gRPC adapter: events, heartbeats and bindings (with their
    # STEP_STARTED) then travel as protobuf over one HTTP/2 connection. None: everything over REST.
    grpc_target: str | None = None


class Reporter(Delivery):
    """Owns the outbox, the transports and the sender thread of one worker process."""

    def __init__(self, config: ReporterConfig) -> None:
        self.config = config
        self.progress = ProgressPolicy(
            config.progress_min_interval, config.progress_max_interval, config.progress_min_delta
        )
        self.book = HeartbeatBook(config.heartbeat_interval)
        self._riding_heartbeats = True  # until the service says its events batch takes none
        self.outbox = Outbox(config.outbox_path, on_persisted=self._signal, write_interval=config.write_interval)
        self._sender = SenderThread(self._deliver, self._heartbeat_round, self._round_interval)
        self._http: HttpTransport | None = None
        self._events: Transport | None = None  # REST or gRPC: events and heartbeats
        self._binds_over: Transport | None = None  # where batches of bindings go (the events' transport)
        self._backoff = 0.0
        self.delivered = 0
        self.dropped = 0  # refused for good (kept in the file's undeliverable table)
        self.absorbed = 0  # late reports the status had already moved past (SUPERSEDED_REJECTIONS)
        self.config_errors = 0  # the service refused this worker's credential (reports kept, retried)
        self.rebinds = 0  # executions bound again after their handle expired
        self._batch_binds = True  # until the service says it has no executions:bind
        self._bindings_ride = True  # until the service says its events batch takes no bindings

    # ------------------------------------------------------------ reporting (any thread, never waits for I/O)
    def begin(
        self, key: str, binding: StepBinding, attempt: int, *, temporal: dict[str, Any] | None = None
    ) -> ExecutionReporter:
        """Record the execution and its STEP_STARTED (idempotent for the same key).

        ``temporal``: the activity's coordinates, sent when the execution is bound."""
        execution = ExecutionReporter(self, key, binding, self.progress)
        if self.outbox.begin(key, binding, attempt, temporal):
            self.enqueue(key, {"eventType": "STEP_STARTED"})
        return execution

    def enqueue(self, key: str, body: dict[str, Any], *, finished: bool = False) -> None:
        """Queue the event for the file with its execution's next sequence; the writer wakes the sender."""
        if not self.outbox.enqueue(key, body, finished=finished):
            log.warning("ignoring a %s report for %s: the execution is closed", body.get("eventType"), key)
            return
        if finished:
            self.book.forget(key)

    @property
    def heartbeats(self) -> dict[str, int]:
        """The latest heartbeat sequence of each execution still beating."""
        return self.book.latest

    def beat(self, key: str, seq: int) -> None:
        self.book.beat(key, seq)

    def forget(self, key: str) -> None:
        """The attempt ended without an ending of its own to report: no heartbeat of it is sent
        again, and once what it reported is delivered, nothing of it is kept."""
        self.book.forget(key)
        self.outbox.end(key)

    def let_go(self, key: str, seq: int) -> None:
        """The activity completes elsewhere: one last heartbeat says so, in the next round, which
        starts now (a completion may follow at once; the service watches it from that heartbeat)."""
        self.book.let_go(key, seq)
        self._sender.beat_now()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait (bounded) until every queued event is in the file; True when it is."""
        return self.outbox.flush(timeout)

    def pending_events(self) -> int:
        """Events not delivered yet: in the file, or queued for it."""
        return self.outbox.pending_events()

    def _signal(self) -> None:
        """From the writer thread: events reached the file (and memory, for the sender to take)."""
        self._sender.kick()

    async def drained(self, timeout: float = 30.0) -> None:
        """Wait until every queued event has been delivered (or dropped); raises TimeoutError."""
        async with asyncio.timeout(timeout):
            while await asyncio.to_thread(self._pending_once_written):
                await self._next_pass()

    def _pending_once_written(self) -> int:
        """Events not delivered yet, once what is queued is in the file: written now, not after the
        write interval, so the next pass finds it (else a drain asked for pass after empty pass)."""
        self.outbox.persist_reported(1.0)
        return self.pending_events()

    async def deliver_reported(self, timeout: float = 5.0) -> None:
        """Deliver (bounded, never raising) what this worker reported before the call: written at
        once and sent by a pass of the sender. A task's ending goes after its steps' own reports
        this way — an ending that overtook them would leave them nothing to say (docs/architecture.md,
        "The plugin's sender")."""
        if not self._sender.started:
            return
        with suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                if await asyncio.to_thread(self.outbox.persist_reported, timeout):
                    await self._next_pass()

    async def _next_pass(self) -> None:
        """Ask the sender for a pass that looks in the file too, and wait until it has ended."""
        self.outbox.look_in_file()
        await self._sender.next_pass()

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._http = HttpTransport(self.config.status_url, self.config.service_token, self.config.http_timeout)
        self._events = self._http
        if self.config.grpc_target:
            from task_status_interceptors._grpc_transport import GrpcTransport  # grpcio only when chosen

            self._events = GrpcTransport(self.config.grpc_target, self.config.service_token, self.config.http_timeout)
        self._binds_over = self._events
        self._sender.start()

    async def stop(self, flush_timeout: float = 5.0) -> None:
        """Try to deliver what is queued (bounded), then stop; the rest stays in the file."""
        with suppress(TimeoutError):
            async with asyncio.timeout(flush_timeout):
                while await asyncio.to_thread(self.pending_events) and self._backoff == 0.0:
                    await self._next_pass()
        await asyncio.to_thread(self._sender.stop)
        if self._events is not None and self._events is not self._http:
            await asyncio.to_thread(self._events.close)
        if self._http is not None:
            await asyncio.to_thread(self._http.close)
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        """Write what is queued to the file, stop the writer and close the file."""
        self.outbox.close()

    # ------------------------------------------------------------ the sender thread's work (``_sender``)
    def _round_interval(self) -> float:
        return self.config.heartbeat_interval * random.uniform(0.8, 1.2)

    def _deliver(self) -> None:
        """Batches until none is left; on a failure, the file is read again after a backoff."""
        while True:
            try:
                more = self.send_once()
                self._backoff = 0.0
            except (Retry, TransportError) as exc:
                self._backoff = min(30.0, max(0.2, self._backoff * 2))
                log.warning("status service unavailable (%s); retrying in %.1fs", exc, self._backoff)
                self._retry_later(self._backoff * random.uniform(0.5, 1.0))
                return
            except Exception:
                log.exception("reporter send failed")
                self._retry_later(1.0)
                return
            if not more:
                return

    def _retry_later(self, delay: float) -> None:
        """What the batch held is still in the file: read it from there, after ``delay``."""
        self.outbox.look_in_file()
        self._sender.retry_after(delay)

    def _heartbeat_round(self) -> None:
        # Every round also looks in the file: rows an operator queued again are sent too.
        self.outbox.look_in_file()
        try:
            self.send_heartbeats()
        except Exception:
            log.exception("heartbeat round failed")

    def handle_of(self, key: str) -> str | None:
        return self.outbox.handles_of([key]).get(key)

    # ------------------------------------------------------------ heartbeats
    def send_heartbeats(self) -> int:
        """Send the latest heartbeat sequence of every bound execution that beat since the last round."""
        assert self._events is not None
        items: list[tuple[str, dict[str, Any]]] = []
        due = self.book.due()
        handles = self.outbox.handles_of(list(due))
        for key, seq in due.items():
            handle = handles.get(key)
            if handle is None:
                continue  # not bound yet (its STARTED is still queued)
            items.append((key, self.book.item(key, handle, seq)))
        if not items:
            return 0
        results = self._events.record_heartbeats([item for _, item in items])
        if results is None:
            return 0
        self._beats_settled(items, results)
        return len(items)


def execution_key(workflow_run_id: str | None, activity_id: str, attempt: int, task_queue: str) -> str:
    """A stable identity for one activity attempt (standalone activities use their task queue)."""
    return f"{workflow_run_id or 'standalone-' + task_queue}/{activity_id}/{attempt}"


def never_raises(fn: Callable[..., None]) -> Callable[..., None]:
    """Reporting must never fail the user's activity (design D10)."""

    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except Exception:
            log.exception("task status reporting failed; the activity continues")

    return wrapper
