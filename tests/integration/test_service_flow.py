"""The main write path of StatusService on MariaDB and SQLite (design D8.1, D8.2, P1, P2, P14, P15)."""

from __future__ import annotations

import sqlalchemy as sa

from status.app.service import StatusService
from status.domain.auth import ServicePrincipal
from status.domain.model import Progress, StepError
from status.domain.rules import DataBody
from status.infra import tables as t
from tests.support.factories import activate, create_task, event
from tests.support.outbox import publications
from tests.support.shards import engine_for


def test_step_lifecycle_assigns_gap_free_versions(
    service: StatusService, coordinator: ServicePrincipal, execution_tokens: object
) -> None:
    task_id = create_task(service, coordinator)
    ctx = activate(service, coordinator, task_id)
    claims = service._tokens.verify(ctx.execution_token, service.now())
    started = service.report_event(claims, event("STEP_STARTED", 1))
    progress = service.report_event(
        claims,
        event(
            "STEP_PROGRESS",
            2,
            progress=Progress(3, 10, "page"),
            data=DataBody("document.parse.progress.v1", {"page": 3}),
        ),
    )
    done = service.report_event(
        claims,
        event("STEP_COMPLETED", 3, duration_ms=1234, data=DataBody("document.parse.completed.v1", {"pageCount": 10})),
    )
    versions = [int(r["taskVersion"]) for r in (started, progress, done)]
    assert versions == [ctx.task_version + 1, ctx.task_version + 2, ctx.task_version + 3]
    assert done["lifecycleStatus"] == "SUCCEEDED" and done["taskLifecycleStatus"] == "RUNNING"
    snap = service.snapshot(task_id)
    assert snap is not None
    parse = next(s for s in snap["steps"] if s["stepId"] == "02_parse")
    assert parse["durationMs"] == 1234 and parse["data"]["value"] == {"pageCount": 10}
    with engine_for(service, task_id).connect() as conn:
        logged = conn.scalars(
            sa.select(t.task_event_log.c.task_version)
            .where(t.task_event_log.c.task_id == task_id)
            .order_by(t.task_event_log.c.task_version)
        ).all()
        assert logged == list(range(1, int(done["taskVersion"]) + 1))
        outbox_versions = set(
            conn.scalars(sa.select(t.task_outbox.c.aggregate_version).where(t.task_outbox.c.aggregate_id == task_id))
        )
        assert outbox_versions == set(logged)


def test_failed_step_notice_and_coordinator_completion(service: StatusService, coordinator: ServicePrincipal) -> None:
    task_id = create_task(service, coordinator)
    ctx = activate(service, coordinator, task_id)
    claims = service._tokens.verify(ctx.execution_token, service.now())
    service.report_event(claims, event("STEP_STARTED", 1))
    failed = service.report_event(
        claims, event("STEP_FAILED", 2, error=StepError("DEPENDENCY", "OCR_TIMEOUT", "The OCR service timed out", True))
    )
    assert failed["lifecycleStatus"] == "FAILED"
    done = service.report_event(
        coordinator,
        event(
            "TASK_FAILED",
            1,
            task_id=task_id,
            task_attempt=1,
            error=StepError("BUSINESS_INPUT", "PARSE_FAILED", "Parsing failed", False),
        ),
    )
    assert done["lifecycleStatus"] == "FAILED"
    with engine_for(service, task_id).connect() as conn:
        notices = [
            p["notice"]
            for p in (s.payload for s in publications(conn, task_id, projection="USER_SUMMARY"))
            if p.get("notice")
        ]
    assert [(n["type"], n["level"]) for n in notices] == [("STEP_FAILED", "WARNING"), ("TASK_FAILED", "ERROR")]
