"""HTTP flows shared by tests: create a task, activate a step, report events."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from tests.integration.conftest import Http


def create_workflow(http: Http, owner: str = "user-1", **task: Any) -> dict[str, Any]:
    body = {
        "clientWorkflowKey": f"wf-{uuid.uuid4().hex}",
        "ownerId": owner,
        "title": "Process a batch",
        "initialTasks": [
            {
                "clientTaskKey": "doc-1",
                "title": "Contract.pdf",
                "knownSteps": [
                    {"stepId": "01_prepare", "operationCode": "FILE.PREPARE"},
                    {"stepId": "02_parse", "operationCode": "DOCUMENT.PARSE"},
                    {"stepId": "03_store", "operationCode": "RESULT.PERSIST"},
                ],
                **task,
            }
        ],
    }
    response = http.client.post("/internal/v1/workflows", json=body, headers=http.coordinator)
    assert response.status_code == 201, response.text
    return dict(response.json())


def activate(
    http: Http, task_id: str, step_id: str = "02_parse", attempt: int = 1, producer: str = "document-parser"
) -> dict[str, Any]:
    response = http.client.post(
        f"/internal/v1/tasks/{task_id}/steps/{step_id}:activate",
        json={"attempt": attempt, "producerId": producer},
        headers=http.coordinator,
    )
    assert response.status_code in (200, 201), response.text
    return dict(response.json())


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def event_body(event_type: str, seq: int, **fields: Any) -> dict[str, Any]:
    return {
        "eventId": fields.pop("eventId", f"evt-{uuid.uuid4().hex}"),
        "eventType": event_type,
        "sourceSeq": seq,
        "occurredAt": datetime.now(UTC).isoformat(),
        **fields,
    }


def report(http: Http, ctx: dict[str, Any], event_type: str, seq: int, **fields: Any) -> Any:
    """Report with the execution token (full form)."""
    return http.client.post(
        "/internal/v1/task-events", json=event_body(event_type, seq, **fields), headers=http.auth(ctx["executionToken"])
    )


def fail_task(http: Http, task_id: str, code: str, message: str | None = None, occurred_at: str | None = None) -> Any:
    """The coordinator ends the task as FAILED (TASK_FAILED, attempt 1) with the error object of design D6.1."""
    error = {"category": "BUSINESS_INPUT", "code": code, "retryable": False, "userMessage": message or ""}
    return http.client.post(
        "/internal/v1/task-events",
        headers=http.coordinator,
        json={
            "eventId": f"evt-fail-{task_id}",
            "eventType": "TASK_FAILED",
            "sourceSeq": 1,
            "taskId": task_id,
            "taskAttempt": 1,
            "occurredAt": occurred_at or now_iso(),
            "error": error,
        },
    )


def complete_task(http: Http, task_id: str, seq: int = 1) -> Any:
    """The coordinator ends the task as SUCCEEDED (TASK_COMPLETED, attempt 1)."""
    return http.client.post(
        "/internal/v1/task-events",
        json=event_body("TASK_COMPLETED", seq, taskId=task_id, taskAttempt=1),
        headers=http.coordinator,
    )


def follow_detail(http: Http, task_id: str, user: str = "user-1") -> dict[str, Any]:
    """The user opens the task's detail: a subscription token (a detail grant) for its channel;
    changes write their detail message from then on (status/app/watching.py)."""
    answer = http.client.post("/api/realtime/subscription-token", json={"taskId": task_id}, headers=http.user(user))
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body
