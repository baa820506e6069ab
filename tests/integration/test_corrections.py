"""The admin correction command over HTTP and the CLI (design D6: an operator's correction is its own
audited command, never a fake worker report)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from status.app.service import StatusService
from status.settings import Settings
from task_observer.cli import main
from tests.integration.conftest import Http
from tests.support.flows import activate, complete_task, create_workflow, fail_task, report
from tests.support.outbox import publications
from tests.support.settings import database_environment
from tests.support.shards import engine_for


def _admin(http: Http) -> dict[str, str]:
    return http.auth(http.service_token("ops-console", "ADMIN"))


def _correct(http: Http, task_id: str, headers: dict[str, str] | None = None, **body: Any) -> Any:
    payload = {"correctionId": f"fix-{uuid.uuid4().hex}", "operatorId": "alice", "reason": "ticket OPS-12", **body}
    return http.client.post(f"/internal/v1/tasks/{task_id}/corrections", json=payload, headers=headers or _admin(http))


def _latest_summary(service: StatusService, task_id: str) -> dict[str, Any]:
    with engine_for(service, task_id).connect() as conn:
        return dict(publications(conn, task_id, projection="USER_SUMMARY")[-1].payload)


def test_an_operator_overrides_a_terminal_task_state_with_an_audit_a_version_and_a_notice(
    http: Http, service: StatusService
) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    assert fail_task(http, task_id, "PARSE_FAILED", "Parsing failed").status_code == 200
    before = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    # The coordinator's own path can't move a terminal task (that is the state machine).
    again = complete_task(http, task_id, seq=2)
    assert again.status_code == 409 and again.json()["error"]["code"] == "TERMINAL_STATE"
    assert http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json() | {"asOf": None} == before | {
        "asOf": None
    }
    body = {"correctionId": "fix-1", "lifecycleStatus": "SUCCEEDED", "reason": "the output was verified by hand"}
    fixed = _correct(http, task_id, **body)
    assert fixed.status_code == 201, fixed.text
    result = fixed.json()
    assert int(result["taskVersion"]) == int(before["taskVersion"]) + 1
    assert result["changes"] == [
        {"field": "lifecycleStatus", "old": "FAILED", "new": "SUCCEEDED"},
        {"field": "businessStatus", "old": "FAILED", "new": "SUCCEEDED"},
    ]
    snap = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    assert snap["lifecycleStatus"] == "SUCCEEDED" and snap["failure"] is None
    assert snap["taskVersion"] == result["taskVersion"]
    # The same correction again is the same result; the same id with other content is refused.
    retried = _correct(http, task_id, **body)
    assert retried.status_code == 200 and retried.json()["duplicate"] is True
    assert retried.json()["taskVersion"] == result["taskVersion"]
    clash = _correct(http, task_id, **{**body, "lifecycleStatus": "CANCELLED"})
    assert clash.status_code == 409 and clash.json()["error"]["code"] == "IDEMPOTENCY_CONFLICT"
    # Users are told, on the summary channel, with a notice of its own kind.
    notice = _latest_summary(service, task_id)["notice"]
    assert notice["type"] == "CORRECTED" and notice["id"] == f"{task_id}:{result['taskVersion']}"
    assert "FAILED → SUCCEEDED" in notice["message"] and "hand" not in notice["message"]
    # The timeline shows it as a correction (what changed, not who or why).
    timeline = http.client.get(f"/api/tasks/{task_id}/events", headers=http.user("user-1")).json()["events"]
    shown = timeline[-1]
    assert shown["eventType"] == "ADMIN_CORRECTION" and shown["taskVersion"] == result["taskVersion"]
    assert shown["correction"]["changes"] == result["changes"] and "alice" not in json.dumps(timeline)
    # The audit has who, why, old and new values, and when.
    audit = http.client.get(f"/internal/v1/tasks/{task_id}/corrections", headers=_admin(http)).json()
    (record,) = audit["corrections"]
    assert record["operatorId"] == "alice" and record["reason"] == "the output was verified by hand"
    assert record["changes"] == result["changes"] and record["correctedAt"] and record["credentialId"] == "ops-console"


def test_a_step_attempt_is_corrected_and_its_executor_can_no_longer_overwrite_it(http: Http) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    ctx = activate(http, task_id)
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    fixed = _correct(http, task_id, stepId="02_parse", lifecycleStatus="CANCELLED")
    assert fixed.status_code == 201, fixed.text
    assert fixed.json()["stepId"] == "02_parse" and fixed.json()["attempt"] == 1
    snap = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    step = next(s for s in snap["steps"] if s["stepId"] == "02_parse")
    assert step["lifecycleStatus"] == "CANCELLED" and step["finishedAt"] is not None
    assert snap["lifecycleStatus"] == "RUNNING"  # only what was corrected moves
    late = report(http, ctx, "STEP_COMPLETED", 2)
    assert (late.status_code, late.json()["error"]["code"]) == (409, "TERMINAL_STATE"), late.text
    after = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    assert next(s for s in after["steps"] if s["stepId"] == "02_parse")["lifecycleStatus"] == "CANCELLED"


def test_corrections_are_refused_clearly(http: Http) -> None:
    """Each refusal has its stable code and changes nothing: the task, its timeline and the audit
    read the same after it."""
    task_id = create_workflow(http)["tasks"][0]["taskId"]

    def state() -> tuple[Any, Any, Any]:
        user = http.user("user-1")
        return (
            http.client.get(f"/api/tasks/{task_id}", headers=user).json(),
            http.client.get(f"/api/tasks/{task_id}/events", headers=user).json()["events"],
            http.client.get(f"/internal/v1/tasks/{task_id}/corrections", headers=_admin(http)).json(),
        )

    def refused(response: Any, status: int, code: str) -> None:
        assert (response.status_code, response.json()["error"]["code"]) == (status, code), response.text
        now = state()  # every change moves the version; the timeline and audit are compared whole
        assert now[0]["taskVersion"] == before[0]["taskVersion"] and now[1:] == before[1:]

    before = state()
    refused(_correct(http, task_id, headers=http.coordinator, lifecycleStatus="CANCELLED"), 403, "PERMISSION_DENIED")
    other = http.auth(http.service_token("ops", "ADMIN", tenant="other-tenant"))
    refused(_correct(http, task_id, headers=other, lifecycleStatus="CANCELLED"), 404, "UNKNOWN_TASK")
    refused(_correct(http, task_id, lifecycleStatus="PENDING"), 422, "VALIDATION_FAILED")
    refused(_correct(http, task_id, businessStatus="NO_SUCH_STATUS"), 422, "UNKNOWN_BUSINESS_STATUS")
    refused(
        _correct(http, task_id, lifecycleStatus="CANCELLED", expectedTaskVersion="99"),
        409,
        "VERSION_PRECONDITION_FAILED",
    )
    refused(_correct(http, task_id, stepId="99_none", lifecycleStatus="CANCELLED"), 404, "UNKNOWN_STEP")
    refused(_correct(http, task_id, lifecycleStatus="CANCELLED", reason=""), 422, "VALIDATION_FAILED")
    # A producer can't pass a report off as a correction.
    ctx = activate(http, task_id)
    before = state()
    refused(report(http, ctx, "ADMIN_CORRECTION", 1), 422, "VALIDATION_FAILED")


def test_the_cli_corrects_through_the_same_command(
    http: Http, settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    database_environment(monkeypatch, settings)
    monkeypatch.setenv("TASK_OBSERVER_DATA_DIR", str(tmp_path))
    code = main(
        ["correct", task_id, "--operator", "bob", "--reason", "stuck after an outage", "--lifecycle", "CANCELLED"]
    )
    assert code == 0, capsys.readouterr().err
    result = json.loads(capsys.readouterr().out)
    assert result["changes"][0] == {"field": "lifecycleStatus", "old": "PENDING", "new": "CANCELLED"}
    snap = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    assert snap["lifecycleStatus"] == "CANCELLED" and snap["taskVersion"] == result["taskVersion"]
    audit = http.client.get(f"/internal/v1/tasks/{task_id}/corrections", headers=_admin(http)).json()
    assert audit["corrections"][0]["operatorId"] == "bob" and audit["corrections"][0]["credentialId"] == "cli:bob"
    # An unknown task is a clear error, not a traceback.
    assert main(["correct", "tsk_nope", "--operator", "bob", "--reason", "x", "--lifecycle", "CANCELLED"]) == 1
    assert "UNKNOWN_TASK" in capsys.readouterr().err
