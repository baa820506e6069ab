"""What the ingest routes say about each change beyond their answer: a sampled log line per accepted
change with seed §14.2's correlation fields, and executions' rejections counted by operation."""

from __future__ import annotations

from typing import Any

from status import logs
from status.api import metrics
from status.app import commands as c
from status.app.service import EventCaller, StatusService
from status.domain.auth import ExecutionClaims

log = logs.get("status.api")


class ChangeLog:
    def __init__(self, service: StatusService, sample: float) -> None:
        self.service = service
        self.sample = sample  # CHANGE_LOG_SAMPLE

    def accepted(self, caller: EventCaller, cmd: c.ReportEvent, result: dict[str, Any], trace: str | None) -> None:
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
            traceId=trace,
        )

    @staticmethod
    def rejected(caller: EventCaller, code: str) -> None:
        """Seed §14.3: one operation's rejections spiking (only executions: their operation is the one
        their token was issued for, a registered definition — a bounded label set)."""
        if isinstance(caller, ExecutionClaims):
            metrics.REJECTIONS_BY_OPERATION.labels(operation=caller.operation_code, code=code).inc()
