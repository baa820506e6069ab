"""The wire shapes over HTTP (design D6.1, D9, D8.13): error objects, TASK_FAILED,
notices and their policy, and the explicit refusal codes."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa

from status.app.service import StatusService
from status.infra import tables as t
from tests.integration.conftest import Http
from tests.support.flows import activate, create_workflow, event_body, report
from tests.support.outbox import publications
from tests.support.shards import engine_for


def _task(http: Http, **task: Any) -> tuple[str, dict[str, Any]]:
    created = create_workflow(http, **task)
    task_id = created["tasks"][0]["taskId"]
    return task_id, activate(http, task_id)


def _summaries(service: StatusService, task_id: str) -> list[dict[str, Any]]:
    with engine_for(service, task_id).connect() as conn:
        return [p.payload for p in publications(conn, task_id, projection="USER_SUMMARY")]


def _all_payloads(service: StatusService, task_id: str) -> str:
    with engine_for(service, task_id).connect() as conn:
        return str([p.payload for p in publications(conn, task_id)])


def _fail_task(http: Http, task_id: str, **body: Any) -> Any:
    return http.client.post(
        "/internal/v1/task-events",
        headers=http.coordinator,
        json=event_body("TASK_FAILED", body.pop("sourceSeq", 1), taskId=task_id, taskAttempt=1, **body),
    )


SEED_ERROR = {
    "category": "BUSINESS_INPUT",
    "code": "UNSUPPORTED_FILE_FORMAT",
    "retryable": False,
    "userMessage": "This file format is not supported; convert it to PDF and upload it again.",
    "diagnosticsRef": "trace://01JQ7M-secret-diagnostics",
}


def test_a_seed_error_object_is_accepted_shown_safely_and_its_diagnostics_stay_inside(
    http: Http, service: StatusService
) -> None:
    task_id, ctx = _task(http)
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    failed = report(http, ctx, "STEP_FAILED", 2, durationMs=18240, businessStatus="FAILED", error=SEED_ERROR)
    assert failed.status_code == 200, failed.text
    snap = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    step = next(s for s in snap["steps"] if s["stepId"] == "02_parse")
    assert step["error"] == {
        "category": "BUSINESS_INPUT",
        "code": "UNSUPPORTED_FILE_FORMAT",
        "retryable": False,
        "userMessage": SEED_ERROR["userMessage"],
    }
    # diagnosticsRef is kept for operators and appears in no projection or read API.
    with engine_for(service, task_id).connect() as conn:
        stored = conn.execute(
            sa.select(t.task_step.c.diagnostics_ref).where(
                t.task_step.c.task_id == task_id, t.task_step.c.step_id == "02_parse"
            )
        ).scalar_one()
    assert stored == SEED_ERROR["diagnosticsRef"]
    reads = [
        http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).text,
        http.client.get(f"/api/tasks/{task_id}/events", headers=http.user("user-1")).text,
        http.client.get("/api/me/tasks", headers=http.user("user-1")).text,
        http.client.post("/api/tasks/status:batchGet", json={"taskIds": [task_id]}, headers=http.user("user-1")).text,
        _all_payloads(service, task_id),
    ]
    assert all("secret-diagnostics" not in text for text in reads)


def test_user_messages_are_redacted_and_bounded(http: Http) -> None:
    task_id, ctx = _task(http)
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    leaky = (
        "Upload to s3://private-bucket/users/42/contract.pdf failed\n"
        "at /srv/app/worker/parse.py line 3; password=hunter2 "
        "token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl, ask admin@example.com"
    )
    error = {"category": "DEPENDENCY", "code": "UPLOAD_FAILED", "retryable": True, "userMessage": leaky}
    assert report(http, ctx, "STEP_FAILED", 2, error=error).status_code == 200
    snap = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    shown = next(s for s in snap["steps"] if s["stepId"] == "02_parse")["error"]["userMessage"]
    for secret in ("s3://", "private-bucket", "/srv/app", "hunter2", "eyJhbGci", "admin@example.com", "\n"):
        assert secret not in shown, shown
    assert shown.startswith("Upload to [link removed] failed")
    # Longer than the limit is a clear 422, not a truncated surprise.
    too_long = {**error, "userMessage": "x" * 513}
    refused = report(http, ctx, "STEP_PROGRESS", 3, error=too_long)
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "VALIDATION_FAILED"


def test_task_failed_takes_the_seed_error_and_failed_step_id(http: Http, service: StatusService) -> None:
    task_id, ctx = _task(http)
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    without_error = _fail_task(http, task_id, failedStepId="02_parse")
    assert without_error.status_code == 422 and without_error.json()["error"]["code"] == "VALIDATION_FAILED"
    both = _fail_task(http, task_id, error=SEED_ERROR, failedStepId="02_parse", failure={"code": "X"})
    assert both.status_code == 422 and both.json()["error"]["code"] == "VALIDATION_FAILED"
    done = _fail_task(http, task_id, error=SEED_ERROR, failedStepId="02_parse")
    assert done.status_code == 200 and done.json()["lifecycleStatus"] == "FAILED", done.text
    snap = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    assert snap["failure"] == {
        "category": "BUSINESS_INPUT",
        "code": "UNSUPPORTED_FILE_FORMAT",
        "userMessage": SEED_ERROR["userMessage"],
        "retryable": False,
        "failedStepId": "02_parse",
    }
    assert snap["failedStepId"] == "02_parse"
    notice = _summaries(service, task_id)[-1]["notice"]
    assert notice == {
        "id": f"{task_id}:{done.json()['taskVersion']}",
        "type": "TASK_FAILED",
        "level": "ERROR",
        "title": "Contract.pdf failed",
        "message": SEED_ERROR["userMessage"],
        "operationCode": "DOCUMENT.PARSE",
        "errorCode": "UNSUPPORTED_FILE_FORMAT",
        "retryable": False,
        "requiresAction": False,
        "actions": ["VIEW_DETAILS"],
        "stepId": "02_parse",
    }
    with engine_for(service, task_id).connect() as conn:
        must_deliver = publications(conn, task_id, projection="USER_SUMMARY")[-1].must_deliver
    assert must_deliver  # never coalesced away (design D8.13)
    assert "secret-diagnostics" not in _all_payloads(service, task_id)


def test_the_deprecated_failure_object_still_fails_a_task(http: Http) -> None:
    task_id, _ = _task(http)
    done = _fail_task(
        http, task_id, failure={"code": "PARSE_FAILED", "message": "Parsing failed", "failedStepId": "02_parse"}
    )
    assert done.status_code == 200, done.text
    snap = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    assert snap["failure"]["code"] == "PARSE_FAILED" and snap["failure"]["userMessage"] == "Parsing failed"
    assert snap["failure"]["failedStepId"] == "02_parse"


def _step_failure_notice(http: Http, service: StatusService, error: dict[str, Any], **known: Any) -> tuple[dict, dict]:
    steps = [
        {"stepId": "01_prepare", "operationCode": "FILE.PREPARE"},
        {"stepId": "02_parse", "operationCode": "DOCUMENT.PARSE", **known},
    ]
    task_id, ctx = _task(http, knownSteps=steps)
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    assert report(http, ctx, "STEP_FAILED", 2, error=error).status_code == 200
    summary = _summaries(service, task_id)[-1]
    return summary, summary["notice"]


def test_the_notice_policy_follows_the_seed(http: Http, service: StatusService) -> None:
    base = {"category": "DEPENDENCY", "code": "OCR_DOWN", "userMessage": "The OCR service is unavailable."}
    # A failure that will be retried is a warning, not an alarm.
    _, retrying = _step_failure_notice(http, service, {**base, "retryable": True})
    assert (retrying["type"], retrying["level"], retrying["retryable"]) == ("STEP_FAILED", "WARNING", True)
    assert retrying["title"].endswith(" failed, retrying")
    assert retrying["message"] == "The OCR service is unavailable." and retrying["errorCode"] == "OCR_DOWN"
    assert retrying["operationCode"] == "DOCUMENT.PARSE" and retrying["requiresAction"] is False
    # An optional step failing while the task continues: a warning, and the task is DEGRADED.
    summary, optional = _step_failure_notice(
        http, service, {**base, "retryable": False}, failurePolicy="CONTINUE_WITH_WARNING"
    )
    assert optional["level"] == "WARNING" and summary["health"] == "DEGRADED"
    assert summary["lifecycleStatus"] == "RUNNING"
    # A failure the task cannot survive and that will not be retried is an error.
    _, fatal = _step_failure_notice(http, service, {**base, "retryable": False})
    assert fatal["level"] == "ERROR" and fatal["actions"] == ["VIEW_DETAILS"]
    # Waiting for the user: an action the user must take.
    _, waiting = _step_failure_notice(http, service, {**base, "retryable": False}, failurePolicy="WAIT_FOR_USER")
    assert waiting["requiresAction"] is True
    # Every notice carries the fields of design D8.13, and no others of the old shape.
    for notice in (retrying, optional, fatal, waiting):
        assert set(notice) >= {
            "id",
            "type",
            "level",
            "title",
            "message",
            "operationCode",
            "errorCode",
            "retryable",
            "requiresAction",
            "actions",
        }
        assert "kind" not in notice and "severity" not in notice


def test_the_detail_subscription_limit_has_its_own_code(http: Http) -> None:
    tasks = [_task(http)[0] for _ in range(21)]  # the default limit is 20 per session
    headers = http.user("user-1")
    answers = [
        http.client.post("/api/realtime/subscription-token", json={"taskId": task_id}, headers=headers)
        for task_id in tasks
    ]
    assert [a.status_code for a in answers[:20]] == [200] * 20
    assert answers[20].status_code == 409, answers[20].text
    assert answers[20].json()["error"]["code"] == "DETAIL_SUBSCRIPTION_LIMIT"
    assert answers[20].json()["error"]["retryable"] is False


def test_concurrent_first_grants_of_one_session_stay_within_the_limit(http: Http, service: StatusService) -> None:
    """FOR UPDATE over a session's grants locked nothing while it had none: first grants made at
    the same moment all saw zero held and together passed the limit."""
    import threading

    from status.app.realtime import RealtimeEndpoints, RealtimeService
    from status.domain.auth import UserPrincipal
    from status.domain.errors import DomainError
    from status.infra.tokens import RealtimeTokens

    realtime = RealtimeService(
        service,
        RealtimeTokens("r" * 32, 300),
        RealtimeEndpoints.from_websocket_url("ws://rt/connection/websocket"),
        2,
        300,
    )
    user = UserPrincipal(http.tenant, "user-1")
    tasks = [_task(http)[0] for _ in range(8)]

    def race(session: str) -> tuple[list[str], list[str]]:
        start = threading.Barrier(len(tasks))
        granted: list[str] = []
        refused: list[str] = []

        def grant(task_id: str) -> None:
            start.wait()
            try:
                realtime.subscription_token(user, session, task_id=task_id, workflow_id=None)
                granted.append(task_id)
            except DomainError as err:
                refused.append(err.code.value)

        threads = [threading.Thread(target=grant, args=(task_id,)) for task_id in tasks]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        return granted, refused

    for _ in range(5):  # a few sessions: each one's first grants race
        granted, refused = race(f"race-{uuid.uuid4().hex}")
        assert len(granted) == 2, granted
        assert refused == ["DETAIL_SUBSCRIPTION_LIMIT"] * 6
