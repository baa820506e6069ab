"""The reporter: the policy that turns an activity's reports into deliveries, never blocking it.

Events go to the durable local outbox (``_outbox``) with deterministic ids at
once; only persisted events are sent. A sender thread of its own binds each
execution (activation or registration, idempotent per attempt) and posts the
events in per-execution order over a transport (``_transport``: REST, or the
gRPC adapter). This module decides what an answer means: delivered, refused
for good (kept as undeliverable), a handle to renew, or a retry with backoff.
If the status service is down, events wait in the file — across worker
restarts — and are resent with their original ids (design P9). Heartbeats are kept
in memory (only the latest sequence matters) and sent in batches with jitter.

The worker's event loop only records reports in memory: sending runs on the sender thread with
blocking calls, so a burst of reports costs the loop no wake-up, no hand-off to a thread pool and
no asyncio task (docs/architecture.md, "The plugin's sender").
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from task_status_interceptors._context import StepBinding
from task_status_interceptors._execution import ExecutionReporter, ProgressPolicy
from task_status_interceptors._heartbeats import HeartbeatBook
from task_status_interceptors._outbox import Outbox
from task_status_interceptors._rejections import FINAL_REJECTIONS, SUPERSEDED_REJECTIONS, code_of
from task_status_interceptors._sender import SenderThread
from task_status_interceptors._transport import (
    BatchRefused,
    CredentialRefused,
    HttpTransport,
    Transport,
    TransportError,
)

log = logging.getLogger("task_status_interceptors.reporter")

# Where the service takes a batch of bindings, a wave goes BIND_BATCH at a time (else one by one).
BIND_BATCH = 100
# The most events an execution sends with its binding (the service's bound); more wait for the next pass.
RIDING_EVENTS = 100
# The sender thread's connections: its requests go one at a time.
HTTP_CONNECTIONS = 2


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
    # goes at once. Each transaction's fixed cost lands on the worker's threads (docs/benchmarks.md).
    write_interval: float = 0.05
    http_timeout: float = 5.0
    # "host:port" of the service's gRPC adapter: events, heartbeats and bindings (with their
    # STEP_STARTED) then travel as protobuf over one HTTP/2 connection. None: everything over REST.
    grpc_target: str | None = None


class Reporter:
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
        """The attempt ended without an ending of its own to report: no heartbeat of it is sent again."""
        self.book.forget(key)

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
            while await asyncio.to_thread(self.pending_events):
                await self._next_pass()

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
        self._http = HttpTransport(
            self.config.status_url, self.config.service_token, self.config.http_timeout, HTTP_CONNECTIONS
        )
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
            except (_Retry, TransportError) as exc:
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

    def send_once(self) -> bool:
        """Deliver one batch; returns whether more may be waiting. Anything but a clean delivery of
        the whole batch leaves some of it in the file only: the next batch is read from there."""
        assert self._events is not None
        events, executions = self.outbox.next_batch(self.config.batch_size)
        if not events:
            return False
        full = len(events) == self.config.batch_size  # more may be waiting behind this batch
        unbound = [e for e in executions.values() if e["handle"] is None]
        # Children naming a parent execution go after any parent in this batch.
        children = [e for e in unbound if e["binding"].get("parent_execution_id")]
        parents = [e for e in unbound if e not in children]
        if unbound and self._bindings_ride and len(unbound) <= BIND_BATCH:
            return self._send_pass(events, executions, parents + children, full)  # bound in that order
        return self._send_apart(events, executions, (parents, children), full)

    def _send_apart(  # noqa: C901
        self,
        events: list[tuple[int, str, dict[str, Any]]],
        executions: dict[str, dict[str, Any]],
        waves: tuple[list[dict[str, Any]], list[dict[str, Any]]],
        full: bool,
    ) -> bool:
        """A batch the way of a service that takes no bindings in its events batch: the bindings
        first, in waves (each one request where the service offers that, else concurrently: a burst
        of activities bound one after another delays all their events), then the events."""
        unbound = [*waves[0], *waves[1]]
        # An execution's STEP_STARTED travels with its binding: one request and one commit for both.
        first: dict[str, tuple[int, dict[str, Any]]] = {}
        for event_id, key, event in events:
            first.setdefault(key, (event_id, event))
        for execution in unbound:
            started = first.get(execution["key"])
            if started is not None and started[1].get("eventType") == "STEP_STARTED":
                execution["started"] = started
        for wave in waves:
            if not wave:
                continue
            settlement = _Settlement()
            outcomes = self._bind_wave(wave, settlement)
            if settlement:  # written with the file's next transaction (``_outbox``)
                self.outbox.settle(settlement.bound, settlement.delivered, settlement.refused)
            for outcome in outcomes:  # every bind has finished; the first error decides the retry
                if isinstance(outcome, BaseException):
                    raise outcome
            if not all(outcomes):
                self.outbox.look_in_file()
                return True  # some events were dropped; reload the batch
        settled = {e["started"][0] for e in unbound if e.get("started_settled")}
        events = [item for item in events if item[0] not in settled]
        if not events:
            return True  # everything of this batch went with its binding; look for more
        body = [{**event, "executionHandle": executions[key]["handle"]} for _, key, event in events]
        beats = self.book.riding_with(executions[key] for _, key, _ in events) if self._riding_heartbeats else []
        results = self._report(body, beats)
        verdicts = _Verdicts()
        self._judge(events, results, verdicts)
        self.outbox.settle(delivered=verdicts.done, refused=verdicts.refused)
        if verdicts.expired:
            self.outbox.unbind(sorted(verdicts.expired))
            self.rebinds += len(verdicts.expired)
            self.outbox.look_in_file()
            return True  # re-bound on the next batch
        if verdicts.retry:
            raise _Retry("retryable rejections")
        return full

    def _send_pass(
        self,
        events: list[tuple[int, str, dict[str, Any]]],
        executions: dict[str, dict[str, Any]],
        unbound: list[dict[str, Any]],
        full: bool,
    ) -> bool:
        """A batch with executions to bind, in one request: each binding with its own events (its
        STARTED, then the rest), and the events of executions bound before with their handles and
        due heartbeats (docs/architecture.md, "The plugin's sender"). A service that takes no
        bindings in its events batch is answered the old way from then on."""
        assert self._events is not None
        bindings, others, left = self._bindings_with_events(events, unbound)
        body = [{**event, "executionHandle": executions[key]["handle"]} for _, key, event in others]
        beats = self.book.riding_with(executions[key] for _, key, _ in others) if self._riding_heartbeats else []
        try:
            answers, results, beaten = self._events.report_pass(bindings, body, [item for _, item in beats])
        except BatchRefused:
            log.info("the status service takes no bindings in an events batch; binding them apart")
            self._bindings_ride = False
            self.outbox.look_in_file()
            return True
        except CredentialRefused as exc:
            self._credential_refused(str(exc))
        if beats and beaten is not None:
            self.book.settle(beats, beaten)
        settlement, verdicts = _Settlement(), _Verdicts()
        failure: BaseException | None = None
        clean = not left
        if answers is None:  # a service that ignored them: its answers for the other events still count
            log.info("the status service binds no executions in an events batch; binding them apart")
            self._bindings_ride = clean = False
        else:
            failure, bound = self._settle_bindings(unbound, answers, settlement, verdicts)
            clean = clean and bound
        self._judge(others, results, verdicts)
        delivered = [*settlement.delivered, *verdicts.done]
        self.outbox.settle(settlement.bound, delivered, [*settlement.refused, *verdicts.refused])
        if verdicts.expired:
            self.outbox.unbind(sorted(verdicts.expired))
            self.rebinds += len(verdicts.expired)
        clean = clean and not verdicts.retry and not verdicts.expired and len(delivered) == len(events)
        if not clean:
            self.outbox.look_in_file()  # what was not settled is still in the file: the next batch reads it
        if failure is not None:
            raise failure
        if verdicts.retry:
            raise _Retry("retryable rejections")
        return full or not clean

    def _bindings_with_events(
        self, events: list[tuple[int, str, dict[str, Any]]], unbound: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[tuple[int, str, dict[str, Any]]], bool]:
        """(the bindings of ``unbound``, each with its events of the batch; the batch's other events;
        whether an execution had more events than go with a binding — they wait for the next pass)."""
        mine: dict[str, list[tuple[int, str, dict[str, Any]]]] = {e["key"]: [] for e in unbound}
        others: list[tuple[int, str, dict[str, Any]]] = []
        for item in events:
            mine.get(item[1], others).append(item)
        bindings, left = [], False
        for execution in unbound:
            riding = mine[execution["key"]]
            if riding and riding[0][2].get("eventType") == "STEP_STARTED":
                execution["started"], riding = (riding[0][0], riding[0][2]), riding[1:]
            left = left or len(riding) > RIDING_EVENTS
            execution["riding"] = riding = riding[:RIDING_EVENTS]
            kind, path, payload = self._bind_request(execution)
            payload["events"] = [event for _, _, event in riding]
            bindings.append({kind: path | payload})
        return bindings, others, left

    def _settle_bindings(
        self,
        unbound: list[dict[str, Any]],
        answers: list[tuple[int, Any]],
        settlement: _Settlement,
        verdicts: _Verdicts,
    ) -> tuple[BaseException | None, bool]:
        """What a pass's binding answers mean, each with its events' answers: (the first error, which
        decides the retry; whether every execution was bound)."""
        failure: BaseException | None = None
        every = True
        for execution, (status, answer) in zip(unbound, answers, strict=True):
            try:
                bound = self._settle_bind(execution, status, answer, settlement)
            except Exception as exc:  # the others' answers still count
                failure, every = failure or exc, False
                continue
            if bound:
                self._judge(execution["riding"], answer.get("events") or [], verdicts, strict=False)
            every = every and bound
        return failure, every

    def _judge(
        self,
        events: list[tuple[int, str, dict[str, Any]]],
        results: list[dict[str, Any]],
        verdicts: _Verdicts,
        *,
        strict: bool = True,
    ) -> None:
        """What the service said of each event: delivered, moved past, refused for good, a handle to
        renew, or a retry. Not ``strict``: an event without an answer (a binding's, from a service
        that did not decide it) stays queued."""
        for (event_id, key, event), result in zip(events, results, strict=strict):
            if result.get("accepted"):
                verdicts.done.append(event_id)
                self.delivered += 1
                continue
            code = result.get("error", {}).get("code")
            if code == "TOKEN_EXPIRED":
                # The activity outlived its handle: bind the execution again (activation is
                # idempotent per attempt and hands out a fresh handle), then send again.
                verdicts.expired.add(key)
            elif code in SUPERSEDED_REJECTIONS:
                log.debug("event %s of %s came after its step or task ended: %s", event["eventId"], key, code)
                verdicts.done.append(event_id)
                self.absorbed += 1
            elif code in FINAL_REJECTIONS:
                log.warning("event %s of %s refused for good: %s", event["eventId"], key, code)
                verdicts.done.append(event_id)
                reason = f"{code}: {result.get('error', {}).get('message', '')}"[:300]
                verdicts.refused.append((key, event, reason))
                self.dropped += 1
            else:
                verdicts.retry = True

    def _report(self, body: list[dict[str, Any]], beats: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        """The events' request, with the due heartbeats of their executions in it (one request
        instead of two); a service from before that answers for the events alone."""
        assert self._events is not None
        if beats:
            try:
                results, answers = self._events.report_events(body, [item for _, item in beats])
            except BatchRefused:
                results, _ = self._events.report_events(body)  # refused again: the events' own fault
                log.info("the status service takes no heartbeats in an events batch; sending them apart")
                self._riding_heartbeats = False
                return results  # the heartbeats stay due for their round
            if answers is None:
                self._riding_heartbeats = False  # not answered for: they stay due for the heartbeat round
            else:
                self.book.settle(beats, answers)
            return results
        results, _ = self._events.report_events(body)
        return results

    def _bind_wave(self, wave: list[dict[str, Any]], settled: _Settlement) -> list[bool | BaseException]:
        """Bind a wave of executions: in one request (one transaction for all of them) where the
        service offers it, else one request each (a few at a time). What the answers mean for the
        file is collected in ``settled``, for the caller to write in one go."""
        if not (self._batch_binds and (len(wave) > 1 or self._binds_over is not self._http)):
            return [self._bind_or_error(e, settled) for e in wave]
        outcomes: list[bool | BaseException] = []
        for start in range(0, len(wave), BIND_BATCH):
            part = wave[start : start + BIND_BATCH]
            try:
                answers = self._bind_batch(part)
            except Exception as exc:  # the request failed as a whole: the rest of the wave waits for a retry
                return [*outcomes, *([exc] * (len(wave) - len(outcomes)))]
            if answers is None:  # a service without executions:bind: one by one from now on
                self._batch_binds = False
                return [*outcomes, *self._bind_wave(wave[len(outcomes) :], settled)]
            for execution, (status, answer) in zip(part, answers, strict=True):
                try:
                    outcomes.append(self._settle_bind(execution, status, answer, settled))
                except Exception as exc:
                    outcomes.append(exc)
        return outcomes

    def _bind_batch(self, part: list[dict[str, Any]]) -> list[tuple[int, Any]] | None:
        """One batch of bindings (gRPC BindExecutions where events go over gRPC, else REST's
        executions:bind): (status, body) per execution, or None when the service has no such call."""
        assert self._binds_over is not None and self._http is not None
        items = []
        for execution in part:
            kind, path, payload = self._bind_request(execution)
            items.append({kind: {**payload, **path}})
        answers = self._binds_over.bind_batch(items)
        if answers is None and self._binds_over is not self._http:  # a gRPC adapter without it: REST
            self._binds_over = self._http
            answers = self._http.bind_batch(items)
        return answers

    def _bind_or_error(self, execution: dict[str, Any], settled: _Settlement) -> bool | BaseException:
        try:
            return self._bind(execution, settled)
        except Exception as exc:  # the wave's other bindings still go; the first error decides the retry
            return exc

    def _bind(self, execution: dict[str, Any], settled: _Settlement) -> bool:
        """Activate (known step) or register (dynamic step) the execution; idempotent per attempt."""
        assert self._http is not None
        kind, path, payload = self._bind_request(execution)
        if kind == "register":
            url = f"/internal/v1/tasks/{path['taskId']}/executions:register"
        else:
            url = f"/internal/v1/tasks/{path['taskId']}/steps/{path['stepId']}:activate"
        response = self._http.bind(url, payload)
        return self._settle_bind(execution, response.status_code, response, settled)

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

    def _settle_bind(self, execution: dict[str, Any], status: int, answer: Any, settled: _Settlement) -> bool:
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
            self._credential_refused(f"HTTP {status}: {text[:200]}")
        if status == 409 and code_of(answer) in SUPERSEDED_REJECTIONS:
            # A newer attempt of the step took over (this one was skipped or abandoned): its reports
            # have nothing left to say.
            log.debug("attempt %s was superseded before it was bound; its reports are dropped", execution["key"])
            self.absorbed += self.outbox.discard_execution(execution["key"])
            self.book.forget(execution["key"])
            return False
        if status not in (200, 201):
            # The step can't be bound (unknown task/step, policy refused): its events can never land.
            reason = f"bind refused: HTTP {status} {text[:300]}"
            log.warning("cannot bind %s (%s); its events are kept as undeliverable", execution["key"], reason)
            self.dropped += self.outbox.drop_execution(execution["key"], reason)
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

    def _credential_refused(self, why: str) -> NoReturn:
        """A credential problem is the deployment's, not these events': keep them, say so loudly,
        and retry (with backoff) until the credential is fixed."""
        self.config_errors += 1
        log.error("the status service refuses this worker's credential (%s); reports are kept and retried", why)
        raise _Retry(f"{why.split(':')[0]} (credential)")

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
        self.book.settle(items, results)
        return len(items)


class _Retry(Exception):
    """A transient failure: back off and try again."""


@dataclass
class _Verdicts:
    """What answers said of a batch's events: delivered or moved past (``done``), refused for good
    (with why), executions whose handle expired, and whether any is worth a retry."""

    done: list[int] = field(default_factory=list)
    refused: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)
    expired: set[str] = field(default_factory=set)
    retry: bool = False


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
