"""Builders for commands used across service and HTTP tests."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from status.app import commands as c
from status.app.service import ExecutionContext, StatusService
from status.domain.auth import ServicePrincipal


def now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def document_workflow(owner: str = "user-1", steps: bool = True, **task: Any) -> c.CreateWorkflow:
    known = (
        (
            c.KnownStep("01_prepare", "FILE.PREPARE"),
            c.KnownStep("02_parse", "DOCUMENT.PARSE"),
            c.KnownStep("03_store", "RESULT.PERSIST"),
        )
        if steps
        else ()
    )
    return c.CreateWorkflow(
        client_workflow_key=f"wf-{uuid.uuid4().hex}",
        owner_id=owner,
        title="Process a batch",
        initial_tasks=(c.NewTask(client_task_key="doc-1", title="Contract.pdf", known_steps=known, **task),),
    )


def create_task(service: StatusService, coordinator: ServicePrincipal, **kwargs: Any) -> str:
    created = service.create_workflow(coordinator, document_workflow(**kwargs))
    return str(created["tasks"][0]["taskId"])


def wide_task(service: StatusService, coordinator: ServicePrincipal, steps: int) -> str:
    """A task with ``steps`` known steps s0, s1, … (one per concurrent producer)."""
    created = service.create_workflow(
        coordinator,
        c.CreateWorkflow(
            client_workflow_key=f"wf-{uuid.uuid4().hex}",
            owner_id="user-1",
            title="Wide",
            initial_tasks=(
                c.NewTask(
                    "t", "Wide task", known_steps=tuple(c.KnownStep(f"s{i}", "FILE.PREPARE") for i in range(steps))
                ),
            ),
        ),
    )
    return str(created["tasks"][0]["taskId"])


def activate(
    service: StatusService,
    coordinator: ServicePrincipal,
    task_id: str,
    step_id: str = "02_parse",
    attempt: int = 1,
    producer: str = "document-parser",
    **kwargs: Any,
) -> ExecutionContext:
    return service.activate_step(coordinator, c.ActivateStep(task_id, step_id, attempt, producer, **kwargs))


def event(event_type: str, seq: int, event_id: str | None = None, **fields: Any) -> c.ReportEvent:
    return c.ReportEvent(
        event_id=event_id or f"evt-{uuid.uuid4().hex}",
        event_type=event_type,
        source_seq=seq,
        occurred_at=now().replace(microsecond=0),
        **fields,
    )


def later(service: StatusService, seconds: float, **settings: Any) -> StatusService:
    """The same service (database, shards, secrets) seen from a clock ``seconds`` ahead: time passing
    without sleeping. ``settings``: StatusService's keyword arguments that differ."""
    base = service.now()
    return StatusService(
        service.db,
        execution_tokens=service._tokens,
        validator=service._validator,
        clock=lambda: base + timedelta(seconds=seconds),
        shards=service.ctx.shards,
        **settings,
    )


def follow_detail(service: StatusService, task_id: str, minutes: float = 10) -> None:
    """Someone follows the task's detail channel from now on, as a detail grant says (changes
    write their detail message only then: status/app/watching.py)."""
    service.watching.watch([task_id], service.now() + timedelta(minutes=minutes))
