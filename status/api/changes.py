"""What the ingest routes say about each change beyond their answer, the same over REST and gRPC:
events and heartbeats counted by result and transport, the ingest latency of single events and of
batches, a sampled log line per accepted change with design D12's correlation fields, a line per
rejection, executions' rejections and steps' failures counted by operation (design D12)."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Sequence
from typing import Any

from status import logs
from status.api import metrics
from status.app import commands as c
from status.app.answers import EventAccepted, EventAnswer
from status.app.beats import BeatAnswer
from status.app.group_commit import GroupCommitter
from status.app.service import EventCaller, StatusService
from status.domain.auth import ExecutionClaims
from status.domain.errors import DomainError

log = logs.get("status.api")

# Failure codes are the producers' words: past this many (operation, code) pairs per process the
# rest count as OTHER, so a producer inventing codes cannot grow the metric without bound.
MAX_FAILURE_LABELS = 1000


@functools.cache
def _counted(result: str, transport: str) -> Any:
    """The accepted events' counter child, resolved once per (result, transport): a ``labels``
    lookup per event cost more than the count (as in ``status.api.answers``)."""
    return metrics.EVENTS.labels(result=result, code="", transport=transport)


@functools.cache
def _timed(transport: str, shape: str) -> Any:
    return metrics.INGEST_SECONDS.labels(transport=transport, shape=shape)


class ChangeLog:
    def __init__(self, service: StatusService, sample: float) -> None:
        self.service = service
        self.sample = sample  # CHANGE_LOG_SAMPLE
        self._failure_labels: set[tuple[str, str]] = set()
        self._labels_lock = threading.Lock()

    # ------------------------------------------------------------ one place per outcome
    def event(
        self,
        caller: EventCaller,
        cmd: c.ReportEvent,
        result: EventAnswer,
        trace: str | None,
        transport: str,
    ) -> None:
        """An event answered (accepted, duplicate, or refused inside a batch's result)."""
        if not result["accepted"]:
            self.rejected(caller, cmd, result["error"]["code"], trace, transport)
            return
        outcome = "duplicate" if result["duplicate"] else "accepted"
        _counted(outcome, transport).inc()
        if outcome == "accepted" and cmd.event_type == "STEP_FAILED" and cmd.error is not None:
            operation = result.get("operationCode") or "UNKNOWN"
            metrics.STEP_FAILURES.labels(operation=operation, code=self._failure_code(operation, cmd.error.code)).inc()
        self.accepted(caller, cmd, result, trace, transport)

    def rejected(self, caller: EventCaller, cmd: c.ReportEvent, code: str, trace: str | None, transport: str) -> None:
        metrics.EVENTS.labels(result="rejected", code=code, transport=transport).inc()
        self.rejected_by_operation(caller, code)
        log.info(
            "event rejected",
            eventId=cmd.event_id,
            eventType=cmd.event_type,
            taskId=cmd.task_id,
            stepId=cmd.step_id,
            sourceSeq=cmd.source_seq,
            producerId=caller.producer_id,
            code=code,
            transport=transport,
            traceId=trace,
        )

    def batch(
        self,
        caller: EventCaller,
        commands: Sequence[c.ReportEvent],
        results: Sequence[EventAnswer],
        trace: str | None,
        transport: str,
    ) -> None:
        for cmd, result in zip(commands, results, strict=True):
            self.event(caller, cmd, result, trace, transport)

    def bound(
        self,
        caller: EventCaller,
        bindings: Sequence[c.ActivateStep | c.RegisterExecution],
        outcomes: Sequence[Any],
        trace: str | None,
        transport: str,
    ) -> None:
        """The events that bindings carried (a STARTED, later events), counted and logged as any
        other events."""
        for cmd, outcome in zip(bindings, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                continue
            if cmd.started is not None and outcome.started is not None:
                self.event(caller, cmd.started.as_event(), outcome.started, trace, transport)
            self.batch(caller, cmd.events, outcome.events, trace, transport)

    async def submitted(
        self, committer: GroupCommitter, caller: EventCaller, cmd: c.ReportEvent, trace: str | None, transport: str
    ) -> EventAccepted:
        """One event through a group committer, timed, counted and logged (its rejection re-raised)."""
        started = time.perf_counter()
        try:
            result = await committer.submit(caller, cmd)
        except DomainError as err:
            self.rejected(caller, cmd, err.code.value, trace, transport)
            raise
        self.ingest_time(started, transport, "single")
        self.event(caller, cmd, result, trace, transport)
        return result

    @staticmethod
    def ingest_time(started: float, transport: str, shape: str) -> None:
        """Request to commit, of one event or of a whole batch (``shape``), by transport."""
        _timed(transport, shape).observe(time.perf_counter() - started)

    @staticmethod
    def heartbeats(results: Sequence[BeatAnswer], transport: str) -> None:
        accepted = sum(1 for r in results if r["accepted"])
        if accepted:
            metrics.HEARTBEATS.labels(result="accepted", transport=transport).inc(accepted)
        if accepted < len(results):
            metrics.HEARTBEATS.labels(result="rejected", transport=transport).inc(len(results) - accepted)

    def _failure_code(self, operation: str, code: str) -> str:
        key = (operation, code)
        with self._labels_lock:
            if key in self._failure_labels:
                return code
            if len(self._failure_labels) >= MAX_FAILURE_LABELS:
                return "OTHER"
            self._failure_labels.add(key)
            return code

    def accepted(
        self, caller: EventCaller, cmd: c.ReportEvent, result: EventAccepted, trace: str | None, transport: str
    ) -> None:
        """One line per accepted change, sampled by eventId (the relay's "published" lines of the same
        event are sampled alike)."""
        if result.get("duplicate") or not logs.sampled(cmd.event_id, self.sample):
            return
        claims = caller if isinstance(caller, ExecutionClaims) else None
        task_id = result.get("taskId")
        log.info(
            "event accepted",
            eventId=cmd.event_id,
            eventType=cmd.event_type,
            taskId=task_id,
            taskType=self.service.cached_task_type(task_id, int(result["taskVersion"])) if task_id else None,
            stepId=result.get("stepId"),
            operationCode=result.get("operationCode"),
            attempt=claims.step_attempt if claims else cmd.task_attempt,
            executionId=claims.execution_id if claims else None,
            sourceSeq=cmd.source_seq,
            taskVersion=result.get("taskVersion"),
            lifecycleStatus=result.get("lifecycleStatus"),
            dataSchema=cmd.data.schema if cmd.data is not None else None,
            errorCode=cmd.error.code if cmd.error is not None else None,
            producerId=caller.producer_id,
            transport=transport,
            traceId=trace,
        )

    @staticmethod
    def rejected_by_operation(caller: EventCaller, code: str) -> None:
        """design D12: one operation's rejections spiking (only executions: their operation is the one
        their token was issued for, a registered definition — a bounded label set)."""
        if isinstance(caller, ExecutionClaims):
            metrics.REJECTIONS_BY_OPERATION.labels(operation=caller.operation_code, code=code).inc()
