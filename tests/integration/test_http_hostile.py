"""Hostile input: stable codes, never a 500, never a state change."""

from __future__ import annotations

import json

import pytest

from status.domain.auth import Role
from tests.integration.conftest import Http
from tests.support.flows import activate, create_workflow, event_body


@pytest.fixture
def ctx(http: Http) -> dict:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    return {**activate(http, task_id), "taskId": task_id}


def _version(http: Http, task_id: str) -> str:
    return str(http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()["taskVersion"])


BAD_EVENT_BODIES = [
    b"{",
    b"null",
    b"[]",
    b'"string"',
    json.dumps({"eventId": 1, "eventType": "STEP_STARTED", "sourceSeq": 1, "occurredAt": "now"}).encode(),
    json.dumps({**event_body("STEP_STARTED", 1), "sourceSeq": -1}).encode(),
    json.dumps({**event_body("STEP_STARTED", 1), "sourceSeq": 2**70}).encode(),
    json.dumps({**event_body("STEP_STARTED", 1), "unknown": True}).encode(),
    json.dumps({**event_body("STEP_STARTED", 1), "eventType": "NOT_A_TYPE"}).encode(),
    json.dumps({**event_body("STEP_STARTED", 1), "eventId": "a" * 500}).encode(),
    json.dumps({**event_body("STEP_STARTED", 1), "eventId": "has space"}).encode(),
    json.dumps({**event_body("STEP_PROGRESS", 1), "progress": {"current": "x"}}).encode(),
    json.dumps({**event_body("STEP_PROGRESS", 1), "progress": {"current": 5, "total": 2}}).encode(),
    json.dumps({**event_body("STEP_PROGRESS", 1), "phaseLabel": "x" * 1000}).encode(),
    json.dumps({**event_body("STEP_FAILED", 1), "error": {"category": "NOPE", "code": "X"}}).encode(),
    json.dumps({**event_body("STEP_FAILED", 1)}).encode(),
    json.dumps(
        {
            **event_body("STEP_PROGRESS", 1),
            "data": {"schema": "document.parse.progress.v1", "value": {"page": 1, "x": "y" * 5000}},
        }
    ).encode(),
    json.dumps({**event_body("STEP_HEALTH_CHANGED", 1)}).encode(),
    '{"eventId": "\ud800"}'.encode("utf-8", "surrogatepass"),
    b"\xff\xfe\x00",
]


@pytest.mark.parametrize("raw", BAD_EVENT_BODIES, ids=range(len(BAD_EVENT_BODIES)))
def test_malformed_events_get_a_stable_code_and_change_nothing(http: Http, ctx: dict, raw: bytes) -> None:
    before = _version(http, ctx["taskId"])
    response = http.client.post(
        "/internal/v1/task-events",
        content=raw,
        headers={**http.auth(ctx["executionToken"]), "Content-Type": "application/json"},
    )
    assert response.status_code in (403, 409, 413, 422), response.text
    body = response.json()
    assert set(body["error"]) == {"code", "message", "retryable"}
    assert "Traceback" not in response.text and "SELECT" not in response.text
    assert _version(http, ctx["taskId"]) == before


def test_oversized_body_is_413(http: Http, ctx: dict) -> None:
    big = json.dumps({**event_body("STEP_STARTED", 1), "phaseLabel": "x" * 100_000})
    response = http.client.post(
        "/internal/v1/task-events",
        content=big,
        headers={**http.auth(ctx["executionToken"]), "Content-Type": "application/json"},
    )
    assert response.status_code == 413 and response.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"


@pytest.mark.parametrize("header", ["", "Bearer", "Bearer ", "Basic abc", "Bearer not.a.jwt", "Bearer a.b.c"])
def test_bad_credentials_are_401(http: Http, ctx: dict, header: str) -> None:
    response = http.client.post(
        "/internal/v1/task-events",
        json=event_body("STEP_STARTED", 1),
        headers={"Authorization": header} if header else {},
    )
    assert response.status_code == 401 and response.json()["error"]["code"] == "UNAUTHENTICATED"
    assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/internal/v1/workflows", {"clientWorkflowKey": "", "ownerId": "u", "title": "t"}),
        ("POST", "/internal/v1/workflows", {"clientWorkflowKey": "k", "ownerId": "u", "title": "t" * 300}),
        (
            "POST",
            "/internal/v1/workflows",
            {"clientWorkflowKey": "k", "ownerId": "u", "title": "t", "initialTasks": "x"},
        ),
        (
            "POST",
            "/internal/v1/workflows",
            {
                "clientWorkflowKey": "k",
                "ownerId": "u",
                "title": "t",
                "initialTasks": [
                    {"clientTaskKey": "a", "title": "a", "knownSteps": [{"stepId": "s", "operationCode": "lower.case"}]}
                ],
            },
        ),
        (
            "POST",
            "/internal/v1/workflows",
            {
                "clientWorkflowKey": "k",
                "ownerId": "u",
                "title": "t",
                "initialTasks": [{"clientTaskKey": "a", "title": "a"}, {"clientTaskKey": "a", "title": "b"}],
            },
        ),
        ("POST", "/internal/v1/workflows/wf_nope/tasks", {"clientTaskKey": "a", "title": "a"}),
        ("POST", "/internal/v1/tasks/tsk_nope/steps/x:activate", {"attempt": 1, "producerId": "p"}),
        ("POST", "/internal/v1/tasks/tsk_nope/steps/x:activate", {"attempt": 0, "producerId": "p"}),
        ("POST", "/internal/v1/task-heartbeats:batch", {"heartbeats": []}),
        ("PATCH", "/internal/v1/tasks/tsk_nope/classification", {"productId": "x"}),
        ("PUT", "/internal/v1/tasks/tsk_nope/acl/USER/u2", {}),
        ("PUT", "/internal/v1/tasks/tsk_nope/acl/ALIEN/u2", {}),
        ("PUT", "/internal/v1/definitions", {"operations": [{"operationCode": "X"}]}),
        ("PUT", "/internal/v1/definitions", {"nonsense": 1}),
        ("GET", "/internal/v1/nothing-here", None),
        ("DELETE", "/internal/v1/workflows", None),
    ],
)
def test_internal_endpoints_never_500(http: Http, method: str, path: str, body: object) -> None:
    headers = {**http.coordinator}
    headers.update(http.auth(http.service_token("admin", "ADMIN", "COORDINATOR", "WORKER")))
    response = http.client.request(method, path, json=body, headers=headers)
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    assert response.json()["error"]["code"]


def test_heartbeat_items_are_rejected_one_by_one(http: Http, ctx: dict) -> None:
    body = {
        "heartbeats": [
            {"heartbeatSeq": 1, "executionHandle": "exh_nonexistent"},
            {"heartbeatSeq": 1, "executionHandle": ctx["executionHandle"]},
        ]
    }
    response = http.client.post("/internal/v1/task-heartbeats:batch", json=body, headers=http.worker)
    assert response.status_code == 200
    first, second = response.json()["results"]
    assert (first["accepted"], first["reason"]) == (False, "TOKEN_REVOKED")
    # The step is still PENDING (not started): a heartbeat can't make it RUNNING.
    assert (second["accepted"], second["reason"]) == (False, "INVALID_TRANSITION")


@pytest.mark.parametrize(
    "path",
    [
        "/api/tasks/{task}/events?afterTaskVersion=-1",
        "/api/tasks/{task}/events?limit=abc",
        "/api/tasks/{task}/events?limit=",
        "/api/me/tasks?cursor=%%%",
        "/api/me/tasks?cursor=eyJ4IjoxfQ",
        "/api/me/tasks?limit=99999999999999999999999",
        "/api/me/tasks?limit=",
    ],
)
def test_public_reads_reject_bad_parameters(http: Http, path: str) -> None:
    """On a task the user sees, so the parameter is what is refused (not the task: 404)."""
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    response = http.client.get(path.format(task=task_id), headers=http.user("user-1"))
    assert response.status_code == 422, response.text
    assert response.json()["error"] == {
        "code": "VALIDATION_FAILED",
        "message": response.json()["error"]["message"],
        "retryable": False,
    }


@pytest.mark.parametrize("query", ["limit=", "limit=x", "limit=-1"])
def test_an_empty_or_malformed_number_on_the_internal_api_is_422(http: Http, query: str) -> None:
    response = http.client.get(
        f"/internal/v1/tasks:overdue?{query}", headers=http.auth(http.service_token("r", "HEALTH"))
    )
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "VALIDATION_FAILED"


def test_openapi_served_matches_the_checked_in_file(http: Http) -> None:
    from pathlib import Path

    served = http.client.get("/openapi.json").json()
    checked_in = json.loads((Path(__file__).resolve().parents[2] / "docs" / "openapi.json").read_text())
    assert served == checked_in, "run: python -m status.api.openapi > docs/openapi.json"
    for path in ("/internal/v1/task-events", "/api/tasks/status:batchGet", "/internal/v1/task-heartbeats:batch"):
        assert path in served["paths"]


def test_metrics_endpoint_exports_the_spec_counters(http: Http, ctx: dict) -> None:
    assert (
        http.client.post(
            "/internal/v1/task-events", json=event_body("STEP_STARTED", 1), headers=http.auth(ctx["executionToken"])
        ).status_code
        == 200
    )
    assert (
        http.client.post(
            "/internal/v1/task-events", json=event_body("STEP_STARTED", 1), headers=http.auth(ctx["executionToken"])
        ).status_code
        == 409
    )
    text = http.client.get("/metrics").text
    assert 'task_status_events_total{code="",result="accepted",transport="http"}' in text
    assert 'result="rejected"' in text and "task_status_ingest_seconds_bucket" in text
    assert "db_transaction_retries_total" in text and "task_status_heartbeats_total" in text


def test_deeply_nested_json_is_a_validation_error(http: Http, ctx: dict) -> None:
    nested = b'{"eventId": "x", "data": ' + b"[" * 30_000 + b"]" * 30_000 + b"}"
    for path, auth in (
        ("/internal/v1/task-events", http.auth(ctx["executionToken"])),
        ("/internal/v1/task-events:batch", http.auth(ctx["executionToken"])),
        ("/internal/v1/workflows", http.coordinator),
    ):
        response = http.client.post(path, content=nested, headers={**auth, "Content-Type": "application/json"})
        assert response.status_code in (413, 422), (path, response.status_code, response.text)
        assert response.json()["error"]["code"] in ("VALIDATION_FAILED", "PAYLOAD_TOO_LARGE")


def test_an_unknown_acl_permission_is_a_validation_error(http: Http, ctx: dict) -> None:
    response = http.client.put(
        f"/internal/v1/tasks/{ctx['taskId']}/acl/USER/u2", json={"permission": "SUPERUSER"}, headers=http.coordinator
    )
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "VALIDATION_FAILED"


@pytest.mark.parametrize("owner", ["a/b", "a:b", "a b", "", "x" * 65, "ü" * 3, "a\u0000"])
def test_identifiers_that_end_up_in_channel_names_have_a_safe_alphabet(http: Http, owner: str) -> None:
    response = http.client.post(
        "/internal/v1/workflows",
        json={"clientWorkflowKey": "k-alphabet", "ownerId": owner, "title": "t"},
        headers=http.coordinator,
    )
    assert response.status_code == 422, (owner, response.status_code, response.text)
    assert response.json()["error"]["code"] == "VALIDATION_FAILED"


@pytest.mark.parametrize(("tenant", "user"), [("t/x", "u"), ("t", "a/b"), ("t", "a:b"), ("t#x", "u"), ("t", "u,v")])
def test_tokens_whose_ids_could_forge_a_channel_name_are_refused(http: Http, tenant: str, user: str) -> None:
    token = http.user_tokens.issue(tenant, user)
    response = http.client.get("/api/me/tasks", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 401 and response.json()["error"]["code"] == "UNAUTHENTICATED"
    service = http.service_tokens.issue("producer", tenant, "s", [Role.COORDINATOR])
    created = http.client.post(
        "/internal/v1/workflows",
        json={"clientWorkflowKey": "k", "ownerId": "u", "title": "t"},
        headers={"Authorization": f"Bearer {service}"},
    )
    assert created.status_code in ((401,) if tenant != "t" else (200, 201))


def test_the_openapi_document_describes_snapshots_and_every_error_code(http: Http) -> None:
    """etaMs/etaConfidence and the snapshot's fields are described, and every stable code is listed."""
    import jsonschema

    from status.domain.errors import ErrorCode

    document = http.client.get("/openapi.json").json()
    codes = set(document["components"]["schemas"]["Error"]["properties"]["error"]["properties"]["code"]["enum"])
    assert {c.value for c in ErrorCode} | {"INTERNAL"} == codes and "PERMISSION_DENIED" in codes
    snapshot_schema = document["components"]["schemas"]["TaskSnapshot"]
    assert {"etaMs", "etaConfidence"} <= set(snapshot_schema["properties"])
    created = create_workflow(http)
    task_id, workflow_id = created["tasks"][0]["taskId"], created["workflowId"]
    # What is served against the served document ("#/components/…" resolved in it).
    for path, shape in [
        (f"/api/tasks/{task_id}", "TaskSnapshot"),
        (f"/api/workflows/{workflow_id}", "WorkflowSummaryMessage"),
        (f"/api/workflows/{workflow_id}/tasks", "WorkflowTasks"),
    ]:
        served = http.client.get(path, headers=http.user("user-1"))
        assert served.status_code == 200, served.text
        jsonschema.validate(served.json(), {**document, "$ref": f"#/components/schemas/{shape}"})
