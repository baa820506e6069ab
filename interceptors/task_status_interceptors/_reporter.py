"""The reporter: the policy that turns an activity's reports into deliveries, never blocking it.

Events go to the durable local outbox (``_outbox``) with deterministic ids at
once; only persisted events are sent. A background sender binds each
execution (activation or registration, idempotent per attempt) and posts the
events in per-execution order over a transport (``_transport``: REST, or the
gRPC adapter). This module decides what an answer means: delivered, refused
for good (kept as undeliverable), a handle to renew, or a retry with backoff.
If the status service is down, events wait in the file — across worker
restarts — and are resent with their original ids (design P9). Heartbeats are kept
in memory (only the latest sequence matters) and sent in batches with jitter.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from task_status_interceptors._context import StepBinding
from task_status_interceptors._execution import ExecutionReporter, ProgressPolicy
from task_status_interceptors._heartbeats import HeartbeatBook
from task_status_interceptors._outbox import Outbox
from task_status_interceptors._rejections import FINAL_REJECTIONS, SUPERSEDED_REJECTIONS, code_of
from task_status_interceptors._transport import BatchRefused, HttpTransport, Transport, TransportError

log = logging.getLogger("task_status_interceptors.reporter")

# Executions bound at once (activations/registrations in flight) where they go one per request;
# the rest of a burst queues. Where the service takes a batch, a wave goes BIND_BATCH at a time.
BIND_CONCURRENCY = 8
BIND_BATCH = 100


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
    # "host:port" of the service's gRPC adapter: events, heartbeats and bindings (with their
    # STEP_STARTED) then travel as protobuf over one HTTP/2 connection. None: everything over REST.
    grpc_target: str | None = None


class Reporter:
    """Owns the outbox, the transports, the sender loop and the heartbeat loop of one worker process."""

    def __init__(self, config: ReporterConfig) -> None:
        self.config = config
        self.progress = ProgressPolicy(
            config.progress_min_interval, config.progress_max_interval, config.progress_min_delta
        )
        self.book = HeartbeatBook(config.heartbeat_interval)
        self._beat_now: asyncio.Event | None = None
        self._riding_heartbeats = True  # until the service says its events batch takes none
        self.outbox = Outbox(config.outbox_path, on_persisted=self._signal)
        self._wake: asyncio.Event | None = None
        self._idle: asyncio.Event | None = None
        # The writer thread counts its transactions and wakes the loop only when the sender waits
        # for one: while it sends, it looks again anyway (see ``_send_loop``), and a wake-up per
        # transaction would cost the worker's event loop a turn each for nothing.
        self._persisted_count = 0
        self._sender_waiting = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._http: HttpTransport | None = None
        self._events: Transport | None = None  # REST or gRPC: events and heartbeats
        self._binds_over: Transport | None = None  # where batches of bindings go (the events' transport)
        self._binds: asyncio.Semaphore | None = None
        self._backoff = 0.0
        self.delivered = 0
        self.dropped = 0  # refused for good (kept in the file's undeliverable table)
        self.absorbed = 0  # late reports the status had already moved past (SUPERSEDED_REJECTIONS)
        self.config_errors = 0  # the service refused this worker's credential (reports kept, retried)
        self.rebinds = 0  # executions bound again after their handle expired
        self._batch_binds = True  # until the service says it has no executions:bind

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
        """The attempt ended without an ending of its own to report: no heartbeat of it is sent again."""
        self.book.forget(key)

    def let_go(self, key: str, seq: int) -> None:
        """The activity completes elsewhere: one last heartbeat says so, in the next round, which
        starts now (a completion may follow at once; the service watches it from that heartbeat)."""
        self.book.let_go(key, seq)
        if self._loop is not None and self._beat_now is not None:
            self._loop.call_soon_threadsafe(self._beat_now.set)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait (bounded) until every queued event is in the file; True when it is."""
        return self.outbox.flush(timeout)

    def pending_events(self) -> int:
        """Events not delivered yet: in the file, or queued for it."""
        return self.outbox.pending_events()

    def _signal(self) -> None:
        """From the writer thread: events reached the file. The loop is woken only if the sender
        waits: the count is written before the flag is read, and the sender sets the flag before it
        reads the count, so one of the two always sees the other (no wake-up is lost)."""
        self._persisted_count += 1
        if self._sender_waiting and self._loop is not None:
            self._loop.call_soon_threadsafe(self._persisted)

    def _persisted(self) -> None:
        if self._wake is not None:
            self._wake.set()
        if self._idle is not None:
            self._idle.clear()

    async def drained(self, timeout: float = 30.0) -> None:
        """Wait until every queued event has been delivered (or dropped); raises TimeoutError."""
        assert self._idle is not None and self._wake is not None
        self._wake.set()
        async with asyncio.timeout(timeout):
            while await asyncio.to_thread(self.pending_events):
                self._idle.clear()
                self._wake.set()
                await self._idle.wait()

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._binds = asyncio.Semaphore(BIND_CONCURRENCY)
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._beat_now = asyncio.Event()
        self._wake.set()  # resume what a previous process left in the outbox
        self._http = HttpTransport(
            self.config.status_url, self.config.service_token, self.config.http_timeout, BIND_CONCURRENCY + 2
        )
        self._events = self._http
        if self.config.grpc_target:
            from task_status_interceptors._grpc_transport import GrpcTransport  # grpcio only when chosen

            self._events = GrpcTransport(self.config.grpc_target, self.config.service_token, self.config.http_timeout)
        self._binds_over = self._events
        self._tasks = [asyncio.create_task(self._send_loop()), asyncio.create_task(self._heartbeat_loop())]

    async def stop(self, flush_timeout: float = 5.0) -> None:
        """Try to deliver what is queued (bounded), then stop; the rest stays in the file."""
        deadline = time.monotonic() + flush_timeout
        while await asyncio.to_thread(self.pending_events) and time.monotonic() < deadline and self._backoff == 0.0:
            await asyncio.sleep(0.05)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._events is not None and self._events is not self._http:
            await self._events.close()
        if self._http is not None:
            await self._http.close()
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        """Write what is queued to the file, stop the writer and close the file."""
        self.outbox.close()

    # ------------------------------------------------------------ sending
    async def _send_loop(self) -> None:
        assert self._wake is not None
        seen = -1  # the writer's transactions the last load could see (none yet: look at once)
        while True:
            if not self._wake.is_set():
                self._sender_waiting = True
                if self._persisted_count == seen:
                    await self._wake.wait()
                self._sender_waiting = False
            if self._persisted_count != seen and self._idle is not None:
                self._idle.clear()  # events reached the file since the last look
            self._wake.clear()
            seen = self._persisted_count
            try:
                more = await self.send_once()
                self._backoff = 0.0
            except (_Retry, TransportError) as exc:
                self._backoff = min(30.0, max(0.2, self._backoff * 2))
                log.warning("status service unavailable (%s); retrying in %.1fs", exc, self._backoff)
                await asyncio.sleep(self._backoff * random.uniform(0.5, 1.0))
                more = True
            except Exception:
                log.exception("reporter send failed")
                await asyncio.sleep(1.0)
                more = True
            if more:
                self._wake.set()
            elif (
                self._idle is not None
                and not self._wake.is_set()
                and not self.outbox.queued_events
                and self._persisted_count == seen
            ):
                # Nothing was left in the file at the last load and nothing is queued for it: idle.
                # (Anything persisted since sets the wake-up and clears this; ``drained`` counts the
                # file itself before it believes it.)
                self._idle.set()

    async def send_once(self) -> bool:  # noqa: C901
        """Deliver one batch; returns whether more may be waiting."""
        assert self._events is not None
        events, executions = await asyncio.to_thread(self.outbox.load_batch, self.config.batch_size)
        if not events:
            return False
        full = len(events) == self.config.batch_size  # more may be waiting behind this batch
        # Bind new executions concurrently: activities tend to start in bursts (fan-out, many
        # workflows on one schedule), and binding them one after another delays all their events.
        # Children naming a parent execution go in a second wave, after any parent in this batch.
        unbound = [e for e in executions.values() if e["handle"] is None]
        # An execution's STEP_STARTED travels with its binding: one request and one commit for both.
        first: dict[str, tuple[int, dict[str, Any]]] = {}
        for event_id, key, event in events:
            first.setdefault(key, (event_id, event))
        for execution in unbound:
            started = first.get(execution["key"])
            if started is not None and started[1].get("eventType") == "STEP_STARTED":
                execution["started"] = started
        children = [e for e in unbound if e["binding"].get("parent_execution_id")]
        for wave in ([e for e in unbound if e not in children], children):
            if not wave:
                continue
            settlement = _Settlement()
            outcomes = await self._bind_wave(wave, settlement)
            if settlement:  # written with the file's next transaction (``_outbox``)
                self.outbox.settle(settlement.bound, settlement.delivered, settlement.refused)
            for outcome in outcomes:  # every bind has finished; the first error decides the retry
                if isinstance(outcome, BaseException):
                    raise outcome
            if not all(outcomes):
                return True  # some events were dropped; reload the batch
        settled = {e["started"][0] for e in unbound if e.get("started_settled")}
        events = [item for item in events if item[0] not in settled]
        if not events:
            return True  # everything of this batch went with its binding; look for more
        body = [{**event, "executionHandle": executions[key]["handle"]} for _, key, event in events]
        beats = self.book.riding_with(executions[key] for _, key, _ in events) if self._riding_heartbeats else []
        results = await self._report(body, beats)
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
            elif code in SUPERSEDED_REJECTIONS:
                log.debug("event %s of %s came after its step or task ended: %s", event["eventId"], key, code)
                done.append(event_id)
                self.absorbed += 1
            elif code in FINAL_REJECTIONS:
                log.warning("event %s of %s refused for good: %s", event["eventId"], key, code)
                done.append(event_id)
                refused.append((key, event, f"{code}: {result.get('error', {}).get('message', '')}"[:300]))
                self.dropped += 1
            else:
                retry = True
        self.outbox.settle(delivered=done, refused=refused)
        if expired:
            await asyncio.to_thread(self.outbox.unbind, sorted(expired))
            self.rebinds += len(expired)
            return True  # re-bound on the next batch
        if retry:
            raise _Retry("retryable rejections")
        return full

    async def _report(
        self, body: list[dict[str, Any]], beats: list[tuple[str, dict[str, Any]]]
    ) -> list[dict[str, Any]]:
        """The events' request, with the due heartbeats of their executions in it (one request
        instead of two); a service from before that answers for the events alone."""
        assert self._events is not None
        if beats:
            try:
                results, answers = await self._events.report_events(body, [item for _, item in beats])
            except BatchRefused:
                results, _ = await self._events.report_events(body)  # refused again: the events' own fault
                log.info("the status service takes no heartbeats in an events batch; sending them apart")
                self._riding_heartbeats = False
                return results  # the heartbeats stay due for their round
            if answers is None:
                self._riding_heartbeats = False  # not answered for: they stay due for the heartbeat round
            else:
                self.book.settle(beats, answers)
            return results
        results, _ = await self._events.report_events(body)
        return results

    async def _bind_wave(self, wave: list[dict[str, Any]], settled: _Settlement) -> list[bool | BaseException]:
        """Bind a wave of executions: in one request (one transaction for all of them) where the
        service offers it, else one request each (a few at a time). What the answers mean for the
        file is collected in ``settled``, for the caller to write in one go."""
        if not (self._batch_binds and (len(wave) > 1 or self._binds_over is not self._http)):
            return list(await asyncio.gather(*(self._bind_in_turn(e, settled) for e in wave), return_exceptions=True))
        outcomes: list[bool | BaseException] = []
        for start in range(0, len(wave), BIND_BATCH):
            part = wave[start : start + BIND_BATCH]
            try:
                answers = await self._bind_batch(part)
            except Exception as exc:  # the request failed as a whole: the rest of the wave waits for a retry
                return [*outcomes, *([exc] * (len(wave) - len(outcomes)))]
            if answers is None:  # a service without executions:bind: one by one from now on
                self._batch_binds = False
                return [*outcomes, *await self._bind_wave(wave[len(outcomes) :], settled)]
            for execution, (status, answer) in zip(part, answers, strict=True):
                try:
                    outcomes.append(await self._settle_bind(execution, status, answer, settled))
                except Exception as exc:
                    outcomes.append(exc)
        return outcomes

    async def _bind_batch(self, part: list[dict[str, Any]]) -> list[tuple[int, Any]] | None:
        """One batch of bindings (gRPC BindExecutions where events go over gRPC, else REST's
        executions:bind): (status, body) per execution, or None when the service has no such call."""
        assert self._binds_over is not None and self._http is not None
        items = []
        for execution in part:
            kind, path, payload = self._bind_request(execution)
            items.append({kind: {**payload, **path}})
        answers = await self._binds_over.bind_batch(items)
        if answers is None and self._binds_over is not self._http:  # a gRPC adapter without it: REST
            self._binds_over = self._http
            answers = await self._http.bind_batch(items)
        return answers

    async def _bind_in_turn(self, execution: dict[str, Any], settled: _Settlement) -> bool:
        assert self._binds is not None
        async with self._binds:
            return await self._bind(execution, settled)

    async def _bind(self, execution: dict[str, Any], settled: _Settlement) -> bool:
        """Activate (known step) or register (dynamic step) the execution; idempotent per attempt."""
        assert self._http is not None
        kind, path, payload = self._bind_request(execution)
        if kind == "register":
            url = f"/internal/v1/tasks/{path['taskId']}/executions:register"
        else:
            url = f"/internal/v1/tasks/{path['taskId']}/steps/{path['stepId']}:activate"
        response = await self._http.bind(url, payload)
        return await self._settle_bind(execution, response.status_code, response, settled)

    def _bind_request(self, execution: dict[str, Any]) -> tuple[str, dict[str, str], dict[str, Any]]:
        """("activate" or "register", the path's ids, the body) of an execution's binding."""
        binding = StepBinding.from_json(execution["binding"])
        path: dict[str, str] = {"taskId": binding.task_id}
        if binding.dynamic:
            kind = "register"
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
            kind = "activate"
            path["stepId"] = binding.step_id or ""
            payload = {"attempt": execution["attempt"], "producerId": self.config.producer_id}
        if execution["binding"].get("temporal"):
            payload["temporalActivity"] = execution["binding"]["temporal"]
        started = execution.get("started")
        if started is not None:
            event = started[1]
            payload["startedEvent"] = {
                "eventId": event["eventId"],
                "occurredAt": event["occurredAt"],
                "sourceSeq": event["sourceSeq"],
            }
        if self.config.heartbeat_timeout_seconds:
            payload["heartbeatIntervalSeconds"] = max(1, round(self.config.heartbeat_interval))
            payload["heartbeatTimeoutSeconds"] = self.config.heartbeat_timeout_seconds
        return kind, path, payload

    async def _settle_bind(self, execution: dict[str, Any], status: int, answer: Any, settled: _Settlement) -> bool:
        """What a binding's answer (an HTTP response, or a batch item with the status it would have had
        alone) means: bound, a retry, a credential problem, or refused for good."""
        text = answer.text if hasattr(answer, "text") else json.dumps(answer)
        started = execution.get("started")
        # A registration the task's policy refuses (namespace or count) never succeeds on retry.
        refused_for_good = status < 500 and any(
            code in text for code in ("DYNAMIC_STEP_LIMIT", "DYNAMIC_STEP_NOT_ALLOWED")
        )
        if (status >= 500 or status == 429) and not refused_for_good:
            raise _Retry(f"HTTP {status}")
        if status in (401, 403) and not refused_for_good:
            # A credential problem is the deployment's, not these events': keep them, say so
            # loudly, and retry (with backoff) until the credential is fixed.
            self.config_errors += 1
            log.error(
                "the status service refuses this worker's credential (HTTP %s: %s); reports are kept and retried",
                status,
                text[:200],
            )
            raise _Retry(f"HTTP {status} (credential)")
        if status == 409 and code_of(answer) in SUPERSEDED_REJECTIONS:
            # A newer attempt of the step took over (this one was skipped or abandoned): its reports
            # have nothing left to say.
            log.debug("attempt %s was superseded before it was bound; its reports are dropped", execution["key"])
            self.absorbed += await asyncio.to_thread(self.outbox.discard_execution, execution["key"])
            self.book.forget(execution["key"])
            return False
        if status not in (200, 201):
            # The step can't be bound (unknown task/step, policy refused): its events can never land.
            reason = f"bind refused: HTTP {status} {text[:300]}"
            log.warning("cannot bind %s (%s); its events are kept as undeliverable", execution["key"], reason)
            self.dropped += await asyncio.to_thread(self.outbox.drop_execution, execution["key"], reason)
            self.book.forget(execution["key"])
            return False
        context = answer.json() if hasattr(answer, "json") else answer
        execution["handle"], execution["execution_id"] = context["executionHandle"], context["executionId"]
        settled.bound.append((execution["key"], context["executionHandle"], context["executionId"]))
        if started is not None:
            self._settle_started(execution, started, context.get("startedEvent"), settled)
        return True

    def _settle_started(
        self,
        execution: dict[str, Any],
        started: tuple[int, dict[str, Any]],
        result: dict[str, Any] | None,
        settled: _Settlement,
    ) -> None:
        """What the binding's answer says of the STEP_STARTED it carried (None: a service that
        predates the combined operation ignored it — the event goes in the batch as before)."""
        if result is None:
            return
        event_id, event = started
        if result.get("accepted"):
            settled.delivered.append(event_id)
            self.delivered += 1
            execution["started_settled"] = True
            return
        code = (result.get("error") or {}).get("code")
        if code in SUPERSEDED_REJECTIONS:
            log.debug("event %s of %s came after its step or task ended: %s", event["eventId"], execution["key"], code)
            settled.delivered.append(event_id)
            self.absorbed += 1
            execution["started_settled"] = True
        elif code in FINAL_REJECTIONS:
            log.warning("event %s of %s refused for good: %s", event["eventId"], execution["key"], code)
            reason = f"{code}: {(result.get('error') or {}).get('message', '')}"[:300]
            settled.delivered.append(event_id)
            settled.refused.append((execution["key"], event, reason))
            self.dropped += 1
            execution["started_settled"] = True
        # Anything else is retried in the batch, with the handle just bound.

    def handle_of(self, key: str) -> str | None:
        return self.outbox.handles_of([key]).get(key)

    # ------------------------------------------------------------ heartbeats
    async def _heartbeat_loop(self) -> None:
        while True:
            assert self._beat_now is not None
            with suppress(TimeoutError):  # a round every interval, or at once for a let-go execution
                await asyncio.wait_for(self._beat_now.wait(), self.config.heartbeat_interval * random.uniform(0.8, 1.2))
            self._beat_now.clear()
            try:
                await self.send_heartbeats()
            except Exception:
                log.exception("heartbeat round failed")

    async def send_heartbeats(self) -> int:
        """Send the latest heartbeat sequence of every bound execution that beat since the last round."""
        assert self._events is not None
        items: list[tuple[str, dict[str, Any]]] = []
        due = self.book.due()
        handles = await asyncio.to_thread(self.outbox.handles_of, list(due))
        for key, seq in due.items():
            handle = handles.get(key)
            if handle is None:
                continue  # not bound yet (its STARTED is still queued)
            items.append((key, self.book.item(key, handle, seq)))
        if not items:
            return 0
        results = await self._events.record_heartbeats([item for _, item in items])
        if results is None:
            return 0
        self.book.settle(items, results)
        return len(items)


class _Retry(Exception):
    """A transient failure: back off and try again."""


@dataclass
class _Settlement:
    """What a wave of bindings means for the file, settled at once after the wave: the handles
    handed out, and the STARTEDs that travelled with their bindings and were decided there
    (refused ones with why)."""

    bound: list[tuple[str, str, str]] = field(default_factory=list)
    delivered: list[int] = field(default_factory=list)
    refused: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.bound or self.delivered)


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
