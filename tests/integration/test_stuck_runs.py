"""Temporal's list of stuck runs (TemporalReportedProblems) as the tasks they own show it: stuck
(health STALE, stuckSince, a WARNING notice), back when the run moves, idempotent across passes
and observers, only for the runs listed. Temporal is played by the list."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import sqlalchemy as sa

from status.app import commands as c
from status.app.service import StatusService
from status.domain.auth import ServicePrincipal
from status.domain.rules import STUCK_MESSAGE
from status.infra import tables as t
from tests.integration.conftest import Http
from tests.support.factories import document_workflow
from tests.support.flows import now_iso
from tests.support.outbox import publications
from tests.support.shards import engine_for


def _owned(service: StatusService, coordinator: ServicePrincipal, workflow_id: str, run_id: str | None) -> str:
    created = service.create_workflow(
        coordinator,
        replace(document_workflow(), temporal_owner=c.TemporalOwner("default", workflow_id, run_id)),
    )
    return str(created["tasks"][0]["taskId"])


def _task(service: StatusService, task_id: str) -> Any:
    with engine_for(service, task_id).connect() as conn:
        return conn.execute(sa.select(t.task).where(t.task.c.id == task_id)).mappings().one()


def test_a_listed_run_shows_its_tasks_stuck_once_and_they_recover_when_it_is_listed_no_more(
    service: StatusService, coordinator: ServicePrincipal
) -> None:
    stuck = _owned(service, coordinator, "wf-stuck", "run-1")
    other_run = _owned(service, coordinator, "wf-stuck", "run-0")  # an older run of the same id
    any_run = _owned(service, coordinator, "wf-any", None)  # handed to whichever run of wf-any
    fine = _owned(service, coordinator, "wf-fine", "run-9")
    listed = {("wf-stuck", "run-1"), ("wf-any", "run-5")}
    result = service.runs.reflect_stuck("default", listed)
    assert sorted(result.stuck) == sorted([stuck, any_run]) and result.recovered == []
    row = _task(service, stuck)
    assert (row["health"], row["lifecycle_status"]) == ("STALE", "PENDING") and row[
        "workflow_stuck_since"
    ]  # as confirmed
    assert _task(service, other_run)["workflow_stuck_since"] is None
    assert _task(service, fine)["health"] == "HEALTHY"
    version = _task(service, stuck)["version"]
    again = service.runs.reflect_stuck("default", listed)  # the next pass, or a second observer
    assert (again.stuck, again.recovered) == ([], [])
    assert _task(service, stuck)["version"] == version
    assert service.runs.reflect_stuck("other-namespace", set()).recovered == []  # namespaces apart
    moved = service.runs.reflect_stuck("default", {("wf-any", "run-5")})
    assert moved.recovered == [stuck]
    row = _task(service, stuck)
    assert (row["health"], row["workflow_stuck_since"], row["version"]) == ("HEALTHY", None, version + 1)


def test_a_stuck_task_says_so_in_its_snapshot_and_its_users_are_warned(
    http: Http, service: StatusService, coordinator: ServicePrincipal
) -> None:
    task_id = _owned(service, coordinator, "wf-stuck", "run-1")
    service.runs.reflect_stuck("default", {("wf-stuck", "run-1")})
    snap = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    assert (snap["lifecycleStatus"], snap["health"]) == ("PENDING", "STALE") and snap["stuckSince"]
    with engine_for(service, task_id).connect() as conn:
        summary = publications(conn, task_id, projection="USER_SUMMARY")[-1].payload
    assert summary["notice"]["type"] == "WORKFLOW_STUCK" and summary["notice"]["level"] == "WARNING"
    assert summary["stuckSince"] == snap["stuckSince"]

    # After a reload (or on another device) the promised words are there: stored, as is the recovery.
    def stored() -> list[dict[str, Any]]:
        listed = http.client.get("/api/me/notifications", headers=http.user("user-1")).json()["notifications"]
        return [n for n in listed if n["taskId"] == task_id]

    warned = stored()
    assert [(n["type"], n["level"], n["message"]) for n in warned] == [("WORKFLOW_STUCK", "WARNING", STUCK_MESSAGE)]
    service.runs.reflect_stuck("default", set())
    assert [n["type"] for n in stored()] == ["WORKFLOW_RECOVERED", "WORKFLOW_STUCK"]  # newest first


def test_a_task_that_ended_is_shown_stuck_no_more_and_not_again(
    http: Http, service: StatusService, coordinator: ServicePrincipal
) -> None:
    task_id = _owned(service, coordinator, "wf-stuck", "run-1")
    service.runs.reflect_stuck("default", {("wf-stuck", "run-1")})
    ended = http.client.post(
        "/internal/v1/task-events",
        json={
            "eventId": "end-1",
            "eventType": "TASK_CANCELLED",
            "sourceSeq": 1,
            "taskId": task_id,
            "taskAttempt": 1,
            "occurredAt": now_iso(),
        },
        headers=http.coordinator,
    )
    assert ended.status_code == 200, ended.text
    row = _task(service, task_id)
    assert (row["health"], row["workflow_stuck_since"]) == ("HEALTHY", None)
    assert service.runs.reflect_stuck("default", {("wf-stuck", "run-1")}).stuck == []


def test_no_producer_can_report_a_run_stuck(http: Http, service: StatusService, coordinator: ServicePrincipal) -> None:
    task_id = _owned(service, coordinator, "wf-stuck", "run-1")
    response = http.client.post(
        "/internal/v1/task-events",
        json={
            "eventId": "stuck-1",
            "eventType": "TASK_HEALTH_CHANGED",
            "sourceSeq": 1,
            "taskId": task_id,
            "taskAttempt": 1,
            "occurredAt": now_iso(),
        },
        headers=http.coordinator,
    )
    assert response.status_code == 403 and response.json()["error"]["code"] == "EVENT_TYPE_NOT_ALLOWED"
