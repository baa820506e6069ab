"""Acceptance items of the fact layer over HTTP (design P3–P7, P10, P11, P13, P14, P16, P18–P20, P25)."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa

from status.app.service import StatusService
from status.infra import tables as t
from tests.integration.conftest import Http
from tests.support.flows import activate, create_workflow, event_body, follow_detail, report
from tests.support.outbox import publications
from tests.support.shards import engine_for


def _task(http: Http, **task: object) -> tuple[str, dict]:
    created = create_workflow(http, **task)
    task_id = created["tasks"][0]["taskId"]
    return task_id, activate(http, task_id)


def _snapshot(http: Http, task_id: str, user: str = "user-1") -> dict:
    response = http.client.get(f"/api/tasks/{task_id}", headers=http.user(user))
    assert response.status_code == 200, response.text
    return dict(response.json())


def _step(snapshot: dict, step_id: str, attempt: int | None = None) -> dict:
    matches = [s for s in snapshot["steps"] if s["stepId"] == step_id and (attempt is None or s["attempt"] == attempt)]
    return matches[-1]


# ------------------------------------------------------------------ design P3
def test_ac3_idempotent_creation_and_tasks_never_move(http: Http) -> None:
    key = f"order-{uuid.uuid4().hex}"
    body = {
        "clientWorkflowKey": key,
        "ownerId": "user-1",
        "title": "Batch",
        "initialTasks": [{"clientTaskKey": "a", "title": "A"}],
    }
    first = http.client.post("/internal/v1/workflows", json=body, headers=http.coordinator)
    again = http.client.post("/internal/v1/workflows", json=body, headers=http.coordinator)
    assert first.status_code == 201 and again.status_code == 200
    assert again.json()["workflowId"] == first.json()["workflowId"]
    assert again.json()["tasks"][0]["taskId"] == first.json()["tasks"][0]["taskId"]
    assert again.json()["created"] is False and again.json()["tasks"][0]["created"] is False
    # Same key, different content: a conflict, not a silent second workflow.
    clash = http.client.post("/internal/v1/workflows", json={**body, "title": "Other"}, headers=http.coordinator)
    assert clash.status_code == 409 and clash.json()["error"]["code"] == "IDEMPOTENCY_CONFLICT"
    # The same clientTaskKey in another workflow is another task; the first stays where it is.
    other = create_workflow(http)
    wf2 = other["workflowId"]
    add = http.client.post(
        f"/internal/v1/workflows/{wf2}/tasks", json={"clientTaskKey": "a", "title": "A"}, headers=http.coordinator
    )
    assert add.status_code == 201 and add.json()["taskId"] != first.json()["tasks"][0]["taskId"]
    again_add = http.client.post(
        f"/internal/v1/workflows/{wf2}/tasks", json={"clientTaskKey": "a", "title": "A"}, headers=http.coordinator
    )
    assert again_add.json()["taskId"] == add.json()["taskId"] and again_add.json()["created"] is False
    task_a = first.json()["tasks"][0]["taskId"]
    assert _snapshot(http, task_a)["workflowId"] == first.json()["workflowId"]
    # Workflow version moved when the task was added (design P20: its own domain).
    assert int(add.json()["workflowVersion"]) == int(other["workflowVersion"]) + 1


def test_tenant_and_scope_come_from_the_credential(http: Http) -> None:
    task_id, ctx = _task(http)
    stranger = http.auth(http.service_token("coordinator-1", "COORDINATOR", tenant="other-tenant"))
    response = http.client.post(
        f"/internal/v1/tasks/{task_id}/steps/01_prepare:activate",
        json={"attempt": 1, "producerId": "x"},
        headers=stranger,
    )
    assert response.status_code == 404 and response.json()["error"]["code"] == "UNKNOWN_TASK"
    other_scope = http.auth(http.service_token("coordinator-1", "COORDINATOR", scope="billing"))
    response = http.client.post(
        "/internal/v1/task-events",
        json=event_body("TASK_COMPLETED", 1, taskId=task_id, taskAttempt=1),
        headers=other_scope,
    )
    assert response.status_code == 404
    unknown_field = http.client.post(
        "/internal/v1/workflows",
        headers=http.coordinator,
        json={"clientWorkflowKey": "k", "ownerId": "u", "title": "t", "tenantId": "evil"},
    )
    assert unknown_field.status_code == 422 and unknown_field.json()["error"]["code"] == "VALIDATION_FAILED"


# ------------------------------------------------------------------ design P4
def test_ac4_every_bound_field_must_match(http: Http) -> None:
    task_id, ctx = _task(http)
    other_task, _ = _task(http)
    token = http.auth(ctx["executionToken"])
    cases = {
        "taskId": (other_task, 403, "PERMISSION_DENIED"),
        "stepId": ("03_store", 403, "PERMISSION_DENIED"),
        "operationCode": ("RESULT.PERSIST", 403, "OPERATION_MISMATCH"),
        "producerId": ("someone", 403, "PRODUCER_MISMATCH"),
        "stepAttempt": (2, 409, "STALE_ATTEMPT"),
        "executionId": ("exe_other", 409, "STALE_EXECUTION"),
    }
    for field, (value, status, code) in cases.items():
        response = http.client.post(
            "/internal/v1/task-events", json=event_body("STEP_STARTED", 1, **{field: value}), headers=token
        )
        assert (response.status_code, response.json()["error"]["code"]) == (status, code), field
    # taskId alone is never a credential.
    anonymous = http.client.post("/internal/v1/task-events", json=event_body("STEP_STARTED", 1, taskId=task_id))
    assert anonymous.status_code == 401
    # A worker service token can't end the task (design D8.4).
    done = http.client.post(
        "/internal/v1/task-events",
        json=event_body("TASK_COMPLETED", 1, taskId=task_id, taskAttempt=1),
        headers=http.worker,
    )
    assert done.status_code == 403 and done.json()["error"]["code"] == "EVENT_TYPE_NOT_ALLOWED"
    # Nor can the execution token.
    done = http.client.post(
        "/internal/v1/task-events", json=event_body("TASK_COMPLETED", 1, taskId=task_id, taskAttempt=1), headers=token
    )
    assert done.status_code == 403
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200


# ------------------------------------------------------------------ design P5
def test_ac5_unclassified_tasks_work_end_to_end(http: Http) -> None:
    task_id, ctx = _task(http)  # productId/taskType null
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    assert (
        report(
            http,
            ctx,
            "STEP_COMPLETED",
            2,
            durationMs=5,
            data={"schema": "document.parse.completed.v1", "value": {"pageCount": 1}},
        ).status_code
        == 200
    )
    done = http.client.post(
        "/internal/v1/task-events",
        headers=http.coordinator,
        json=event_body("TASK_COMPLETED", 1, taskId=task_id, taskAttempt=1),
    )
    assert done.status_code == 200 and done.json()["lifecycleStatus"] == "SUCCEEDED"
    snap = _snapshot(http, task_id)
    assert snap["productId"] is None and snap["taskType"] is None and snap["lifecycleStatus"] == "SUCCEEDED"
    listed = http.client.get("/api/me/tasks", headers=http.user("user-1")).json()["tasks"]
    assert task_id in [x["taskId"] for x in listed]


# ------------------------------------------------------------------ design P6
def _agent_task(http: Http, policy: dict) -> tuple[str, dict]:
    """A task with one known AGENT.RUN step under ``policy``, its agent execution activated."""
    created = http.client.post(
        "/internal/v1/workflows",
        headers=http.coordinator,
        json={
            "clientWorkflowKey": f"wf-{uuid.uuid4().hex}",
            "ownerId": "user-1",
            "title": "Agent",
            "initialTasks": [
                {
                    "clientTaskKey": "t",
                    "title": "Ask",
                    "dynamicRegistrationPolicy": policy,
                    "knownSteps": [{"stepId": "agent", "operationCode": "AGENT.RUN"}],
                }
            ],
        },
    ).json()
    task_id = created["tasks"][0]["taskId"]
    return task_id, activate(http, task_id, "agent", producer="agent-service")


def test_ac6_dynamic_registration_is_idempotent_and_limited(http: Http) -> None:
    policy = {
        "allowedParentOperations": ["AGENT.RUN"],
        "allowedChildOperations": ["SEARCH.*"],
        "maxDynamicSteps": 2,
        "maxDepth": 1,
        "maxParallelExecutions": 5,
    }
    task_id, agent = _agent_task(http, policy)
    register = {
        "clientStepKey": "tool-1",
        "operationCode": "SEARCH.WEB",
        "producerId": "search-service",
        "parentExecutionId": agent["executionId"],
    }
    url = f"/internal/v1/tasks/{task_id}/executions:register"
    first = http.client.post(url, json=register, headers=http.auth(agent["executionToken"]))
    again = http.client.post(url, json=register, headers=http.auth(agent["executionToken"]))
    assert first.status_code == 201 and again.status_code == 200, first.text
    assert first.json()["executionId"] == again.json()["executionId"] and first.json()["stepId"] == "dyn_tool-1"
    # Outside the namespace: a policy refusal (403), never a 429 a client would retry.
    outside = http.client.post(
        url,
        json={**register, "clientStepKey": "x", "operationCode": "TOOL.SHELL"},
        headers=http.auth(agent["executionToken"]),
    )
    assert outside.status_code == 403 and outside.json()["error"]["code"] == "DYNAMIC_STEP_NOT_ALLOWED"
    assert outside.json()["error"]["retryable"] is False
    # Too deep, too many: DYNAMIC_STEP_LIMIT.
    deep = http.client.post(
        url,
        json={**register, "clientStepKey": "deep", "parentExecutionId": first.json()["executionId"]},
        headers=http.coordinator,
    )
    assert deep.json()["error"]["code"] == "DYNAMIC_STEP_LIMIT"
    assert (
        http.client.post(url, json={**register, "clientStepKey": "tool-2"}, headers=http.coordinator).status_code == 201
    )
    third = http.client.post(url, json={**register, "clientStepKey": "tool-3"}, headers=http.coordinator)
    assert third.json()["error"]["code"] == "DYNAMIC_STEP_LIMIT"
    # A plain event can never create a step: an unknown step has no credential to report with.
    ghost = http.client.post(
        "/internal/v1/task-events",
        headers=http.coordinator,
        json=event_body("STEP_STARTED", 1, taskId=task_id, stepId="ghost"),
    )
    assert ghost.status_code in (403, 422)
    assert all(s["stepId"] != "ghost" for s in _snapshot(http, task_id)["steps"])
    # The child reports with its own token and can't end the task.
    child = first.json()
    assert report(http, child, "STEP_STARTED", 1).status_code == 200
    assert (
        http.client.post(
            "/internal/v1/task-events",
            headers=http.auth(child["executionToken"]),
            json=event_body("TASK_COMPLETED", 2, taskId=task_id, taskAttempt=1),
        ).status_code
        == 403
    )


# ------------------------------------------------------------------ design P7 / design P16
def test_ac7_phase_codes_cannot_declare_terminal_state(http: Http) -> None:
    task_id, ctx = _task(http)
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    assert report(http, ctx, "STEP_PROGRESS", 2, phaseCode="SUCCEEDED", phaseLabel="Done!").status_code == 200
    assert _step(_snapshot(http, task_id), "02_parse")["lifecycleStatus"] == "RUNNING"
    bad = report(http, ctx, "STEP_PROGRESS", 3, businessStatus="SUCCEEDED")
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "UNKNOWN_BUSINESS_STATUS"
    unknown = report(http, ctx, "STEP_PROGRESS", 3, businessStatus="MADE_UP")
    assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "UNKNOWN_BUSINESS_STATUS"
    bad_phase = report(http, ctx, "STEP_PROGRESS", 3, phaseCode="has space")
    assert bad_phase.status_code == 422


def test_ac16_terminal_never_returns_to_running(http: Http) -> None:
    task_id, ctx = _task(http)
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    assert (
        report(
            http, ctx, "STEP_COMPLETED", 2, data={"schema": "document.parse.completed.v1", "value": {"pageCount": 2}}
        ).status_code
        == 200
    )
    again = report(http, ctx, "STEP_STARTED", 3)
    # The handle/token of a finished step: the state machine says no.
    assert again.status_code == 409 and again.json()["error"]["code"] == "TERMINAL_STATE"
    assert (
        http.client.post(
            "/internal/v1/task-events",
            headers=http.coordinator,
            json=event_body("TASK_COMPLETED", 1, taskId=task_id, taskAttempt=1),
        ).status_code
        == 200
    )
    failed = http.client.post(
        "/internal/v1/task-events",
        headers=http.coordinator,
        json=event_body("TASK_FAILED", 2, taskId=task_id, taskAttempt=1, failure={"code": "X"}),
    )
    assert failed.status_code == 409 and failed.json()["error"]["code"] == "TERMINAL_STATE"
    assert _snapshot(http, task_id)["lifecycleStatus"] == "SUCCEEDED"


def test_ac16_definition_upgrades_do_not_change_running_steps(http: Http) -> None:
    admin = http.auth(http.service_token("admin", "ADMIN"))
    v2 = {
        "operations": [
            {
                "operationCode": "DOCUMENT.PARSE",
                "version": 2,
                "displayName": "Parse v2",
                "allowedEventTypes": ["STEP_STARTED", "STEP_PROGRESS", "STEP_COMPLETED", "STEP_FAILED"],
                "allowedDataSchemas": {"STEP_PROGRESS": ["document.parse.progress.v2"]},
                "schemas": {"document.parse.progress.v2": {"type": "object"}},
            }
        ]
    }
    task_id, ctx = _task(http)  # bound to v1 at activation
    assert http.client.put("/internal/v1/definitions", json=v2, headers=admin).status_code == 200
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    v1_data = report(http, ctx, "STEP_PROGRESS", 2, data={"schema": "document.parse.progress.v1", "value": {"page": 1}})
    assert v1_data.status_code == 200
    v2_data = report(http, ctx, "STEP_PROGRESS", 3, data={"schema": "document.parse.progress.v2", "value": {}})
    assert v2_data.status_code == 422
    # A stored version is frozen: the same version with other content is refused.
    v2_changed = {"operations": [{**v2["operations"][0], "displayName": "Sneaky"}]}
    frozen = http.client.put("/internal/v1/definitions", json=v2_changed, headers=admin)
    assert frozen.status_code == 409 and frozen.json()["error"]["code"] == "DEFINITION_FROZEN"
    # New tasks of this tenant use v2.
    _, ctx2 = _task(http)
    assert report(http, ctx2, "STEP_STARTED", 1).status_code == 200
    assert (
        report(http, ctx2, "STEP_PROGRESS", 2, data={"schema": "document.parse.progress.v2", "value": {}}).status_code
        == 200
    )


# ------------------------------------------------------------------ design P10 / design P14 / retries
def test_ac10_ac14_old_attempts_and_revoked_handles(http: Http) -> None:
    task_id, first = _task(http)
    assert report(http, first, "STEP_STARTED", 1).status_code == 200
    second = activate(http, task_id, attempt=2)
    assert second["executionId"] != first["executionId"]
    late = report(http, first, "STEP_PROGRESS", 2)
    assert late.status_code == 409 and late.json()["error"]["code"] == "STALE_ATTEMPT"
    revoked = http.client.post(
        "/internal/v1/task-events",
        headers=http.worker,
        json=event_body("STEP_PROGRESS", 2, executionHandle=first["executionHandle"]),
    )
    assert revoked.status_code == 403 and revoked.json()["error"]["code"] == "TOKEN_REVOKED"
    assert report(http, second, "STEP_STARTED", 1).status_code == 200
    assert report(http, second, "STEP_PROGRESS", 3).status_code == 200
    regress = report(http, second, "STEP_PROGRESS", 2)
    assert regress.status_code == 409 and regress.json()["error"]["code"] == "SOURCE_SEQ_REGRESSION"
    snap = _snapshot(http, task_id)
    assert _step(snap, "02_parse", 1)["lifecycleStatus"] == "TIMED_OUT"
    assert _step(snap, "02_parse", 2)["lifecycleStatus"] == "RUNNING"
    # Another service's sequence is its own: seq=1 of 01_prepare is not stale after parse's seq=3.
    prepare = activate(http, task_id, "01_prepare", producer="file-service")
    assert report(http, prepare, "STEP_STARTED", 1).status_code == 200


def test_ac10_expired_and_forged_tokens(http: Http, service: object) -> None:
    task_id, ctx = _task(http)
    forged = ctx["executionToken"][:-4] + ("AAAA" if not ctx["executionToken"].endswith("AAAA") else "BBBB")
    response = http.client.post(
        "/internal/v1/task-events", json=event_body("STEP_STARTED", 1), headers=http.auth(forged)
    )
    assert response.status_code == 401 and response.json()["error"]["code"] == "UNAUTHENTICATED"
    import jwt

    claims = jwt.decode(ctx["executionToken"], options={"verify_signature": False})
    expired = jwt.encode({**claims, "exp": 1}, service._tokens._secret, algorithm="HS256")  # type: ignore[attr-defined]
    response = http.client.post(
        "/internal/v1/task-events", json=event_body("STEP_STARTED", 1), headers=http.auth(expired)
    )
    assert response.status_code == 403 and response.json()["error"]["code"] == "TOKEN_EXPIRED"
    user_as_service = http.client.post("/internal/v1/workflows", json={}, headers=http.user("user-1"))
    assert user_as_service.status_code == 401


# ------------------------------------------------------------------ design P11
def test_ac11_single_and_batch_give_the_same_result(http: Http) -> None:
    _, ctx = _task(http)
    body = event_body("STEP_STARTED", 1)
    single = http.client.post("/internal/v1/task-events", json=body, headers=http.auth(ctx["executionToken"])).json()
    batch = http.client.post(
        "/internal/v1/task-events:batch", json={"events": [body]}, headers=http.auth(ctx["executionToken"])
    ).json()["results"][0]
    assert batch["duplicate"] is True
    assert {k: v for k, v in batch.items() if k != "duplicate"} == {k: v for k, v in single.items() if k != "duplicate"}
    # The other way round, with one rejected item in the batch.
    second = event_body("STEP_PROGRESS", 2)
    results = http.client.post(
        "/internal/v1/task-events:batch",
        json={"events": [second, event_body("STEP_PROGRESS", 1)]},
        headers=http.auth(ctx["executionToken"]),
    ).json()["results"]
    assert results[0]["accepted"] is True and results[1]["error"]["code"] == "SOURCE_SEQ_REGRESSION"
    retried = http.client.post("/internal/v1/task-events", json=second, headers=http.auth(ctx["executionToken"])).json()
    assert retried["taskVersion"] == results[0]["taskVersion"] and retried["duplicate"] is True


# ------------------------------------------------------------------ design P13
def test_ac13_projections_respect_their_whitelists(http: Http, service: StatusService) -> None:
    task_id, ctx = _task(http, projectId="proj-1")
    follow_detail(http, task_id)  # the detail is written while someone follows it
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    assert (
        report(
            http,
            ctx,
            "STEP_FAILED",
            2,
            error={"category": "SYSTEM", "code": "OCR_DOWN", "message": "OCR is down", "diagnosticsRef": "trace-123"},
        ).status_code
        == 200
    )
    with engine_for(service, task_id).connect() as conn:
        rows = publications(conn, task_id)
    by_projection: dict[str, list[dict]] = {}
    for row in rows:
        by_projection.setdefault(row.projection, []).append(row.payload)
    for summary in by_projection["USER_SUMMARY"]:
        assert "steps" not in summary and "triggerEvent" not in summary
        assert summary["kind"] == "task.summary" and summary["taskVersion"].isdigit()
    for detail in by_projection["TASK_DETAIL"]:
        assert "trace-123" not in str(detail)  # diagnostics stay server-side
    for broadcast in by_projection["PROJECT_BROADCAST"]:
        assert set(broadcast) == {
            "kind",
            "schemaVersion",
            "workflowId",
            "taskId",
            "taskVersion",
            "taskType",
            "lifecycleStatus",
            "health",
            "progress",
            "asOf",
        }
    failed = by_projection["USER_SUMMARY"][-1]
    assert failed["notice"]["type"] == "STEP_FAILED" and failed["notice"]["id"] == f"{task_id}:{failed['taskVersion']}"


# ------------------------------------------------------------------ design P18 / design P19
def test_ac18_timeline_resumes_and_reports_purged_history(http: Http, service: StatusService) -> None:
    task_id, ctx = _task(http)
    for seq, kind in enumerate(["STEP_STARTED", "STEP_PROGRESS", "STEP_PROGRESS"], start=1):
        assert report(http, ctx, kind, seq).status_code == 200
    page = http.client.get(
        f"/api/tasks/{task_id}/events?afterTaskVersion=2&limit=2", headers=http.user("user-1")
    ).json()
    assert [e["taskVersion"] for e in page["events"]] == ["3", "4"] and page["hasMore"] is True
    assert page["historyTruncated"] is False
    with engine_for(service, task_id).begin() as conn:
        conn.execute(
            sa.delete(t.task_event_log).where(
                t.task_event_log.c.task_id == task_id, t.task_event_log.c.task_version <= 3
            )
        )
    page = http.client.get(f"/api/tasks/{task_id}/events?afterTaskVersion=1", headers=http.user("user-1")).json()
    assert page["historyTruncated"] is True and page["oldestAvailableVersion"] == "4"
    # All of it purged (retention): still truncated for any version the task has moved past.
    with engine_for(service, task_id).begin() as conn:
        conn.execute(sa.delete(t.task_event_log).where(t.task_event_log.c.task_id == task_id))
    page = http.client.get(f"/api/tasks/{task_id}/events?afterTaskVersion=0", headers=http.user("user-1")).json()
    assert page["events"] == [] and page["historyTruncated"] is True and page["oldestAvailableVersion"] is None
    latest = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()["taskVersion"]
    page = http.client.get(f"/api/tasks/{task_id}/events?afterTaskVersion={latest}", headers=http.user("user-1")).json()
    assert page["historyTruncated"] is False  # nothing after the current version was ever there


def test_ac19_producer_duration_is_kept_as_reported(http: Http) -> None:
    task_id, ctx = _task(http)
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    assert (
        report(
            http,
            ctx,
            "STEP_COMPLETED",
            2,
            durationMs=987654,
            data={"schema": "document.parse.completed.v1", "value": {"pageCount": 1}},
        ).status_code
        == 200
    )
    assert _step(_snapshot(http, task_id), "02_parse")["durationMs"] == 987654


# ------------------------------------------------------------------ design P25 (read side)
def test_ac25_invisible_tasks_are_404_and_ids_are_not_credentials(http: Http) -> None:
    task_id, _ = _task(http)
    assert http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-2")).status_code == 404
    assert http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1", tenant="other")).status_code == 404
    assert http.client.get("/api/tasks/tsk_000_DOESNOTEXIST", headers=http.user("user-1")).status_code == 404
    assert http.client.get(f"/api/tasks/{task_id}").status_code == 401
    batch = http.client.post(
        "/api/tasks/status:batchGet", json={"taskIds": [task_id]}, headers=http.user("user-2")
    ).json()
    assert batch["tasks"] == [] and batch["notFound"] == [task_id]
    # Granting access makes it visible; revoking hides it again.
    grant = http.client.put(f"/internal/v1/tasks/{task_id}/acl/USER/user-2", json={}, headers=http.coordinator)
    assert grant.status_code == 200 and grant.json()["changed"] is True
    assert http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-2")).status_code == 200
    assert (
        http.client.delete(f"/internal/v1/tasks/{task_id}/acl/USER/user-2", headers=http.coordinator).status_code == 200
    )
    assert http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-2")).status_code == 404


def test_batch_get_returns_only_changed_snapshots(http: Http) -> None:
    task_id, ctx = _task(http)
    snap = _snapshot(http, task_id)
    body = {"taskIds": [task_id], "knownVersions": {task_id: snap["taskVersion"]}}
    same = http.client.post("/api/tasks/status:batchGet", json=body, headers=http.user("user-1")).json()
    assert same["tasks"] == [] and same["unchanged"] == [task_id]
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    newer = http.client.post("/api/tasks/status:batchGet", json=body, headers=http.user("user-1")).json()
    assert [s["taskVersion"] for s in newer["tasks"]] == [str(int(snap["taskVersion"]) + 1)]


def test_classification_binds_and_freezes(http: Http) -> None:
    task_id, _ = _task(http)
    version = _snapshot(http, task_id)["taskVersion"]
    stale = http.client.patch(
        f"/internal/v1/tasks/{task_id}/classification",
        json={"taskType": "DOCUMENT_PROCESS"},
        headers={**http.coordinator, "If-Match": '"task-version-1"'},
    )
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "VERSION_PRECONDITION_FAILED"
    ok = http.client.patch(
        f"/internal/v1/tasks/{task_id}/classification",
        json={"taskType": "DOCUMENT_PROCESS", "productId": "docs"},
        headers={**http.coordinator, "If-Match": f'"task-version-{version}"'},
    )
    assert ok.status_code == 200 and int(ok.json()["taskVersion"]) == int(version) + 1
    snap = _snapshot(http, task_id)
    assert (snap["taskType"], snap["productId"]) == ("DOCUMENT_PROCESS", "docs")
    frozen = http.client.patch(
        f"/internal/v1/tasks/{task_id}/classification", json={"taskType": "VIDEO_EXPORT"}, headers=http.coordinator
    )
    assert frozen.status_code == 409 and frozen.json()["error"]["code"] == "DEFINITION_FROZEN"
    relabel = http.client.patch(
        f"/internal/v1/tasks/{task_id}/classification", json={"productId": None}, headers=http.coordinator
    )
    assert relabel.status_code == 200 and _snapshot(http, task_id)["productId"] is None


def test_workflow_read_endpoints_are_acl_trimmed(http: Http) -> None:
    created = create_workflow(http)
    wf = created["workflowId"]
    summary = http.client.get(f"/api/workflows/{wf}", headers=http.user("user-1")).json()
    assert summary["kind"] == "workflow.summary" and summary["workflowVersion"] == created["workflowVersion"]
    tasks = http.client.get(f"/api/workflows/{wf}/tasks", headers=http.user("user-1")).json()
    assert [x["taskId"] for x in tasks["tasks"]] == [created["tasks"][0]["taskId"]]
    assert http.client.get(f"/api/workflows/{wf}", headers=http.user("user-2")).status_code == 404


def test_late_reports_after_the_task_finished_change_nothing(http: Http) -> None:
    """A task's end ends its steps (a step not reached: CANCELLED, NOT_REACHED); a worker's outbox
    delivering the last step's events after the coordinator's completion changes nothing. A
    coordinator that knows how a step ended says so with the ending (stepOutcomes)."""
    task_id, _ = _task(http)
    running = activate(http, task_id, "02_parse")
    assert report(http, running, "STEP_STARTED", 1).status_code == 200
    assert (
        http.client.post(
            "/internal/v1/task-events",
            headers=http.coordinator,
            json=event_body("TASK_COMPLETED", 1, taskId=task_id, taskAttempt=1),
        ).status_code
        == 200
    )
    ended = _snapshot(http, task_id)
    assert ended["lifecycleStatus"] == "SUCCEEDED" and ended["progress"]["percent"] == 100
    assert _step(ended, "02_parse")["lifecycleStatus"] == "CANCELLED"  # it ran; it runs no more
    assert _step(ended, "02_parse")["durationSource"] == "WALL_CLOCK_ESTIMATE"  # nobody measured it
    assert _step(ended, "03_store")["lifecycleStatus"] == "CANCELLED"
    assert _step(ended, "03_store")["error"]["code"] == "NOT_REACHED"
    late = report(http, running, "STEP_COMPLETED", 2, durationMs=12)
    assert late.status_code == 409 and late.json()["error"]["code"] == "TERMINAL_STATE"
    refused = http.client.post(
        f"/internal/v1/tasks/{task_id}/steps/03_store:activate",
        json={"attempt": 1, "producerId": "store-service"},
        headers=http.coordinator,
    )
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "TERMINAL_STATE"
    after = _snapshot(http, task_id)
    assert after["taskVersion"] == ended["taskVersion"] and after["steps"] == ended["steps"]


def test_a_superseded_attempt_never_reads_as_running(http: Http) -> None:
    """A retried dynamic step (or known step) shows one running attempt: the replaced one timed out."""
    policy = {"allowedParentOperations": ["AGENT.RUN"], "allowedChildOperations": ["SEARCH.*"], "maxDynamicSteps": 5}
    task_id, agent = _agent_task(http, policy)
    url = f"/internal/v1/tasks/{task_id}/executions:register"
    body = {
        "clientStepKey": "tool",
        "operationCode": "SEARCH.WEB",
        "producerId": "search-service",
        "parentExecutionId": agent["executionId"],
    }
    first = http.client.post(url, json={**body, "attempt": 1}, headers=http.auth(agent["executionToken"])).json()
    assert report(http, first, "STEP_STARTED", 1).status_code == 200
    second = http.client.post(url, json={**body, "attempt": 2}, headers=http.auth(agent["executionToken"]))
    assert second.status_code == 201, second.text
    attempts = {s["attempt"]: s for s in _snapshot(http, task_id)["steps"] if s["stepId"] == "dyn_tool"}
    assert attempts[1]["lifecycleStatus"] == "TIMED_OUT" and attempts[2]["lifecycleStatus"] == "PENDING"
    late = report(http, first, "STEP_PROGRESS", 2)
    assert late.status_code in (403, 409)  # the replaced attempt's handle no longer reports
    # The same for a known step activated again by a retry.
    assert report(http, agent, "STEP_STARTED", 1).status_code == 200
    activate(http, task_id, "agent", attempt=2, producer="agent-service")
    agents = {s["attempt"]: s for s in _snapshot(http, task_id)["steps"] if s["stepId"] == "agent"}
    assert agents[1]["lifecycleStatus"] == "TIMED_OUT"


def test_a_worker_binds_its_own_executions_with_worker_alone_and_nothing_more(http: Http) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    worker = http.auth(http.service_token("document-parser", "WORKER"))
    url = f"/internal/v1/tasks/{task_id}/steps/02_parse:activate"
    other = http.client.post(url, json={"attempt": 1, "producerId": "someone-else"}, headers=worker)
    assert other.status_code == 403 and other.json()["error"]["code"] == "PERMISSION_DENIED"
    own = http.client.post(url, json={"attempt": 1, "producerId": "document-parser"}, headers=worker)
    assert own.status_code in (200, 201), own.text
    assert report(http, own.json(), "STEP_STARTED", 1).status_code == 200
    # The coordinator's powers stay the coordinator's.
    grant = http.client.put(f"/internal/v1/tasks/{task_id}/acl/USER/u2", json={}, headers=worker)
    assert grant.status_code == 403
    ended = http.client.post(
        "/internal/v1/task-events",
        headers=worker,
        json=event_body("TASK_COMPLETED", 1, taskId=task_id, taskAttempt=1),
    )
    assert ended.status_code == 403


def test_a_draining_replica_closes_each_connection_after_its_response(settings: Any, engine: Any, service: Any) -> None:
    """So a load balancer holds no idle connection to it when it stops (status/api/draining.py)."""
    from starlette.testclient import TestClient

    from status.api.app import create_app

    app = create_app(settings, engine, service)
    with TestClient(app) as client:
        assert client.get("/healthz").headers.get("connection") != "close"
        app.state.parts.readiness.drain()
        answer = client.get("/healthz")
        assert answer.status_code == 200 and answer.headers["connection"] == "close"
        assert client.get("/readyz").json()["status"] == "draining"
