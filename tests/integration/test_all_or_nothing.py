"""Every request is all or nothing, and every limit the contract states is one the schema stores:
a batch is parsed whole before any of it is applied (REST; gRPC shares the
parse), the largest allowed value is taken and one past it is a 4xx, every numeric parameter has
the same parser, and a tenant's list is filtered in the query, before its limit."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from status.app.service import StatusService
from status.infra import tables as t
from tests.integration.conftest import Http
from tests.support.factories import later
from tests.support.flows import activate, create_workflow, event_body, now_iso, report
from tests.support.shards import engine_for


def _task(service: StatusService, task_id: str) -> Any:
    with engine_for(service, task_id).connect() as conn:
        return conn.execute(sa.select(t.task.c.version, t.task.c.lifecycle_status).where(t.task.c.id == task_id)).one()


def test_a_batch_refused_for_its_riding_heartbeat_commits_none_of_its_events(
    http: Http, service: StatusService
) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    ctx = activate(http, task_id)
    before = _task(service, task_id)
    body = {
        "events": [{**event_body("STEP_STARTED", 1), "executionHandle": ctx["executionHandle"]}],
        "heartbeats": [
            {"executionHandle": ctx["executionHandle"], "heartbeatSeq": 1, "observedAt": "0999-06-01T00:00:00Z"}
        ],
    }
    refused = http.client.post("/internal/v1/task-events:batch", json=body, headers=http.worker)
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "VALIDATION_FAILED"
    assert _task(service, task_id) == before  # nothing of it applied: the version did not move
    body["heartbeats"][0]["observedAt"] = now_iso()
    taken = http.client.post("/internal/v1/task-events:batch", json=body, headers=http.worker)
    assert taken.status_code == 200 and taken.json()["results"][0]["accepted"] is True
    assert _task(service, task_id).version > before.version


def test_the_longest_heartbeat_timeout_the_contract_allows_is_stored_and_one_more_is_refused(http: Http) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    url = f"/internal/v1/tasks/{task_id}/steps/02_parse:activate"
    body = {"attempt": 1, "producerId": "document-parser", "heartbeatTimeoutSeconds": 86_400}
    assert http.client.post(url, json=body, headers=http.coordinator).status_code == 201
    too_long = http.client.post(
        url, json={**body, "attempt": 2, "heartbeatTimeoutSeconds": 86_401}, headers=http.coordinator
    )
    assert too_long.status_code == 422 and too_long.json()["error"]["code"] == "VALIDATION_FAILED"


def test_a_dynamic_step_with_the_longest_client_step_key_registers_and_stays_one_step(http: Http) -> None:
    created = http.client.post(
        "/internal/v1/workflows",
        headers=http.coordinator,
        json={
            "clientWorkflowKey": "wf-long-keys",
            "ownerId": "user-1",
            "title": "Agent",
            "initialTasks": [
                {
                    "clientTaskKey": "t",
                    "title": "Ask",
                    "dynamicRegistrationPolicy": {
                        "allowedParentOperations": ["AGENT.RUN"],
                        "allowedChildOperations": ["SEARCH.*"],
                        "maxDynamicSteps": 5,
                        "maxDepth": 2,
                        "maxParallelExecutions": 5,
                    },
                    "knownSteps": [{"stepId": "agent", "operationCode": "AGENT.RUN"}],
                }
            ],
        },
    ).json()
    task_id = created["tasks"][0]["taskId"]
    url = f"/internal/v1/tasks/{task_id}/executions:register"
    register = {"clientStepKey": "k" * 128, "operationCode": "SEARCH.WEB", "producerId": "search-service"}
    first = http.client.post(url, json=register, headers=http.coordinator)
    again = http.client.post(url, json=register, headers=http.coordinator)
    assert first.status_code == 201 and again.status_code == 200, first.text
    assert first.json()["stepId"] == again.json()["stepId"] and len(first.json()["stepId"]) <= 128
    short = http.client.post(url, json={**register, "clientStepKey": "tool-1"}, headers=http.coordinator)
    assert short.json()["stepId"] == "dyn_tool-1"  # keys that fit keep their readable step id
    too_long = http.client.post(url, json={**register, "clientStepKey": "k" * 129}, headers=http.coordinator)
    assert too_long.status_code == 422


def test_numeric_parameters_share_one_parser_and_never_fail_on_their_length(http: Http) -> None:
    admin = http.auth(http.service_token("ops-console", "ADMIN"))
    user = http.user("user-1")
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    for path, headers in (
        ("/internal/v1/tasks:overdue", admin),
        ("/api/me/tasks", user),
        ("/api/me/notifications", user),
        (f"/api/tasks/{task_id}/events", user),
    ):
        for value in ("9" * 5000, "-1", "1.5", "²"):
            response = http.client.get(path, params={"limit": value}, headers=headers)
            assert response.status_code == 422, (path, value, response.status_code)
            assert response.json()["error"]["code"] == "VALIDATION_FAILED"


def test_an_admins_overdue_list_is_not_hidden_by_other_tenants_older_tasks(http: Http, service: StatusService) -> None:
    from datetime import timedelta

    from status.domain.auth import Role, ServicePrincipal

    others = Http(http.client, f"{http.tenant}-other", http.service_tokens, http.user_tokens)
    for _ in range(60):  # older running tasks of another tenant
        other_task = create_workflow(others)["tasks"][0]["taskId"]
        assert report(others, activate(others, other_task, "01_prepare"), "STEP_STARTED", 1).status_code == 200
    mine = create_workflow(http)["tasks"][0]["taskId"]
    assert report(http, activate(http, mine, "01_prepare"), "STEP_STARTED", 1).status_code == 200
    two_hours_on = later(service, timedelta(hours=2).total_seconds(), overdue_after_seconds=1800)
    admin = ServicePrincipal("ops", http.tenant, "content", frozenset({Role.ADMIN}))
    assert [task["taskId"] for task in two_hours_on.overdue(admin, limit=1)] == [mine]


def test_a_request_with_every_bounded_field_at_its_maximum_is_stored(http: Http) -> None:
    """The longest title, keys, step id, display name, external reference, phase, unit, error code,
    message and diagnostics reference the contract allows go all the way to the database (no 500)."""
    step_id = "s" * 128
    created = http.client.post(
        "/internal/v1/workflows",
        headers=http.coordinator,
        json={
            "clientWorkflowKey": "w" * 128,
            "ownerId": "user-1",
            "title": "T" * 255,
            "workflowType": "W" * 128,
            "initialTasks": [
                {
                    "clientTaskKey": "c" * 128,
                    "title": "t" * 255,
                    "projectId": "p" * 64,
                    "knownSteps": [{"stepId": step_id, "operationCode": "DOCUMENT.PARSE", "displayName": "d" * 128}],
                    "externalRefs": [{"refType": "r" * 64, "refValue": "v" * 255}],
                }
            ],
        },
    )
    assert created.status_code == 201, created.text
    task_id = created.json()["tasks"][0]["taskId"]
    activated = http.client.post(
        f"/internal/v1/tasks/{task_id}/steps/{step_id}:activate",
        headers=http.coordinator,
        json={
            "attempt": 10_000,
            "producerId": "x" * 128,
            "heartbeatIntervalSeconds": 3600,
            "heartbeatTimeoutSeconds": 86_400,
        },
    )
    assert activated.status_code == 201, activated.text
    ctx = activated.json()
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    progress = report(
        http,
        ctx,
        "STEP_PROGRESS",
        2,
        phaseCode="P" * 64,
        phaseLabel="l" * 128,
        progress={"current": 1, "total": 2, "unit": "u" * 32},
    )
    assert progress.status_code == 200 and progress.json()["accepted"], progress.text
    error = {
        "category": "DEPENDENCY",
        "code": "E" * 128,
        "retryable": False,
        "userMessage": "m" * 512,
        "diagnosticsRef": "g" * 255,
    }
    failed = report(http, ctx, "STEP_FAILED", 3, error=error)
    assert failed.status_code == 200 and failed.json()["accepted"], failed.text
    steps = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()["steps"]
    last = max(steps, key=lambda s: s["attempt"])
    assert (last["stepId"], last["attempt"], last["error"]["code"]) == (step_id, 10_000, "E" * 128)
    assert last["phaseLabel"] == "l" * 128 and last["error"]["userMessage"] == "m" * 512
