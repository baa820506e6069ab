"""What one pass of the plugin's sender sends, and what the service's answers mean.

A pass takes a batch from the outbox and sends it in one request where the service takes it:
the bindings of the executions new in it, each with its events, then the other executions'
events and their due heartbeats (docs/architecture.md, "The plugin's sender"). From a service
before that, the bindings go first, in waves, then the events. Each answer is read here:
delivered, moved past (a newer attempt or an ended task), refused for good (kept as
undeliverable, with why), a handle to renew, a credential to fix, or a retry with backoff.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from task_status_interceptors._context import StepBinding
from task_status_interceptors._rejections import FINAL_REJECTIONS, SUPERSEDED_REJECTIONS, code_of
from task_status_interceptors._transport import BatchRefused, CredentialRefused, HttpTransport, Transport

if TYPE_CHECKING:
    from task_status_interceptors._heartbeats import HeartbeatBook
    from task_status_interceptors._outbox import Outbox
    from task_status_interceptors._reporter import ReporterConfig

log = logging.getLogger("task_status_interceptors.reporter")

# Where the service takes a batch of bindings, a wave goes BIND_BATCH at a time (else one by one).
BIND_BATCH = 100
# The most events an execution sends with its binding (the service's bound); more wait for the next pass.
RIDING_EVENTS = 100


class Delivery:
    """The sender thread's work on one batch; ``Reporter`` is one, holding the state it reads."""

    config: ReporterConfig
    outbox: Outbox
    book: HeartbeatBook
    _http: HttpTransport | None
    _events: Transport | None  # REST or gRPC: events and heartbeats
    _binds_over: Transport | None  # where batches of bindings go (the events' transport)
    _riding_heartbeats: bool  # until the service says its events batch takes none
    _batch_binds: bool  # until the service says it has no executions:bind
    _bindings_ride: bool  # until the service says its events batch takes no bindings
    delivered: int
    dropped: int  # refused for good (kept in the file's undeliverable table)
    absorbed: int  # late reports the status had already moved past (SUPERSEDED_REJECTIONS)
    config_errors: int  # the service refused this worker's credential (reports kept, retried)
    rebinds: int  # executions bound again after their handle expired

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
            raise Retry("retryable rejections")
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
            self._beats_settled(beats, beaten)
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
            raise Retry("retryable rejections")
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
                self._beats_settled(beats, answers)
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
        started = execution.get("started")
        if status in (200, 201):
            context = answer.json() if hasattr(answer, "json") else answer
            execution["handle"], execution["execution_id"] = context["executionHandle"], context["executionId"]
            settled.bound.append((execution["key"], context["executionHandle"], context["executionId"]))
            if started is not None:
                self._settle_started(execution, started, context.get("startedEvent"), settled)
            return True
        text = answer.text if hasattr(answer, "text") else json.dumps(answer)
        # A registration the task's policy refuses (namespace or count) never succeeds on retry.
        refused_for_good = status < 500 and any(
            code in text for code in ("DYNAMIC_STEP_LIMIT", "DYNAMIC_STEP_NOT_ALLOWED")
        )
        if (status >= 500 or status == 429) and not refused_for_good:
            raise Retry(f"HTTP {status}")
        if status in (401, 403) and not refused_for_good:
            self._credential_refused(f"HTTP {status}: {text[:200]}")
        if status == 409 and code_of(answer) in SUPERSEDED_REJECTIONS:
            # A newer attempt of the step took over (this one was skipped or abandoned): its reports
            # have nothing left to say.
            log.debug("attempt %s was superseded before it was bound; its reports are dropped", execution["key"])
            self.absorbed += self.outbox.discard_execution(execution["key"])
            self.book.forget(execution["key"])
            return False
        # The step can't be bound (unknown task/step, policy refused): its events can never land.
        reason = f"bind refused: HTTP {status} {text[:300]}"
        log.warning("cannot bind %s (%s); its events are kept as undeliverable", execution["key"], reason)
        self.dropped += self.outbox.drop_execution(execution["key"], reason)
        self.book.forget(execution["key"])
        return False

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

    def _beats_settled(self, items: list[tuple[str, dict[str, Any]]], results: list[dict[str, Any]]) -> None:
        """What the service said of heartbeats; an execution it took the last one of (it completes
        elsewhere) leaves the outbox."""
        for key in self.book.settle(items, results):
            self.outbox.end(key)

    def _credential_refused(self, why: str) -> NoReturn:
        """A credential problem is the deployment's, not these events': keep them, say so loudly,
        and retry (with backoff) until the credential is fixed."""
        self.config_errors += 1
        log.error("the status service refuses this worker's credential (%s); reports are kept and retried", why)
        raise Retry(f"{why.split(':')[0]} (credential)")


class Retry(Exception):
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
