"""How a run ended survives a reload: the stored notification keeps the live
notice whole (title, message, reason, level, the state it reports), the task keeps its ending's
reason, a step ended for its run has a duration, and the workflow's badge says TIMED_OUT when its
task timed out. Temporal's verdict is played by a ClosedRun; everything else is the real service."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from status.app import commands as c
from status.app.service import StatusService
from status.domain.auth import ServicePrincipal
from status.domain.clock import utcnow
from status.domain.verdicts import ClosedRun, RunStatus
from tests.integration.conftest import Http
from tests.support.factories import document_workflow
from tests.support.flows import activate, fail_task, report
from tests.support.outbox import publications
from tests.support.shards import engine_for
from tests.support.wiring import projector_for


def _running(http: Http, service: StatusService, coordinator: ServicePrincipal, run_id: str) -> tuple[str, str]:
    """A task owned by a Temporal run, its parse step running; (task id, workflow id)."""
    created = service.create_workflow(
        coordinator,
        replace(document_workflow(), temporal_owner=c.TemporalOwner("default", f"wf-{run_id}", run_id)),
    )
    task_id = str(created["tasks"][0]["taskId"])
    ctx = activate(http, task_id)
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    return task_id, str(created["workflowId"])


def _close(service: StatusService, run_id: str, status: RunStatus, seconds: int, reason: str | None = None) -> None:
    now = utcnow()
    run = ClosedRun("default", f"wf-{run_id}", run_id, status, now - timedelta(seconds=seconds), now, reason=reason)
    ended = service.runs.follow(run, None, service.runs.open_tasks("default", [run.workflow_id]))
    assert ended.ended, "the verdict ended nothing"


def _notifications(http: Http, task_id: str) -> list[dict[str, Any]]:
    page = http.client.get("/api/me/notifications?unread=false&limit=100", headers=http.user("user-1"))
    assert page.status_code == 200, page.text
    return [n for n in page.json()["notifications"] if n["taskId"] == task_id]


def _live_notice(service: StatusService, task_id: str) -> dict[str, Any]:
    """The notice the connected page got with the ending (its USER_SUMMARY row)."""
    with engine_for(service, task_id).connect() as conn:
        payload = publications(conn, task_id, projection="USER_SUMMARY")[-1].payload
    return dict(payload["notice"])


def test_an_operators_stop_reads_after_a_reload_as_it_did_live(
    http: Http, service: StatusService, coordinator: ServicePrincipal
) -> None:
    task_id, _ = _running(http, service, coordinator, "run-term")
    _close(service, "run-term", RunStatus.TERMINATED, 30, reason="wrong input file")
    live = _live_notice(service, task_id)
    assert live["message"] == "Stopped by an operator: wrong input file"
    [stored] = _notifications(http, task_id)
    assert stored["type"] == "TASK_CANCELLED"
    # The same words, level and title as the live notice; the state it reports, and why.
    assert (stored["title"], stored["message"], stored["level"]) == (live["title"], live["message"], live["level"])
    assert stored["lifecycleStatus"] == "CANCELLED" and stored["terminal"] is True
    assert stored["reason"] == "Stopped by an operator: wrong input file"
    snapshot = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    assert snapshot["lifecycleStatus"] == "CANCELLED"
    assert snapshot["endReason"] == "Stopped by an operator: wrong input file"
    listed = http.client.get("/api/me/tasks", headers=http.user("user-1")).json()["tasks"]
    assert next(t for t in listed if t["taskId"] == task_id)["endReason"] == snapshot["endReason"]
    parse = next(s for s in snapshot["steps"] if s["stepId"] == "02_parse")
    assert parse["lifecycleStatus"] == "CANCELLED" and parse["durationMs"] is not None


def test_a_user_cancel_reads_apart_from_an_operators_stop(
    http: Http, service: StatusService, coordinator: ServicePrincipal
) -> None:
    task_id, _ = _running(http, service, coordinator, "run-cancel")
    _close(service, "run-cancel", RunStatus.CANCELED, 5)
    [stored] = _notifications(http, task_id)
    assert stored["type"] == "TASK_CANCELLED" and stored["message"] == "Cancelled."
    assert "operator" not in (stored["title"] + (stored["message"] or ""))
    assert http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()["endReason"] == "Cancelled."


def test_a_timeout_keeps_its_length_its_steps_durations_and_makes_the_workflow_timed_out(
    http: Http, service: StatusService, coordinator: ServicePrincipal
) -> None:
    task_id, workflow_id = _running(http, service, coordinator, "run-timeout")
    _close(service, "run-timeout", RunStatus.TIMED_OUT, 6)
    [stored] = _notifications(http, task_id)
    assert (stored["type"], stored["level"], stored["lifecycleStatus"]) == ("TASK_TIMED_OUT", "ERROR", "TIMED_OUT")
    assert stored["message"] == "Timed out after 6 s." and stored["actions"] == ["VIEW_DETAILS"]
    snapshot = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    parse = next(s for s in snapshot["steps"] if s["stepId"] == "02_parse")
    assert parse["lifecycleStatus"] == "TIMED_OUT"
    assert isinstance(parse["durationMs"], int) and parse["durationMs"] >= 0
    projector = projector_for(engine_for(service, workflow_id))
    while projector.run_once():
        pass
    workflow = http.client.get(f"/api/workflows/{workflow_id}", headers=http.user("user-1")).json()
    assert workflow["lifecycleStatus"] == "TIMED_OUT"  # not CANCELLED


def test_a_failure_keeps_its_error_code_and_the_step_it_failed_in(
    http: Http, service: StatusService, coordinator: ServicePrincipal
) -> None:
    task_id, _ = _running(http, service, coordinator, "run-fail")
    assert fail_task(http, task_id, "PARSE_FAILED", "The file is not a contract").status_code == 200
    [stored] = _notifications(http, task_id)
    assert (stored["type"], stored["lifecycleStatus"], stored["errorCode"]) == ("TASK_FAILED", "FAILED", "PARSE_FAILED")
    assert stored["message"] == "The file is not a contract" and stored["retryable"] is False
