"""The boundary is total : whatever passes validation is storable and decodable,
everything else is VALIDATION_FAILED; nothing a client sends gets a 5xx; a refusal commits nothing.

First the inputs seen from the outside, one by one; then Hypothesis throws generated JSON, strings,
numbers and dates at every write endpoint.
"""

from __future__ import annotations

import base64
import json
import math
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from status.app.service import StatusService
from status.infra import tables as t
from tests.integration.conftest import Http
from tests.support.flows import activate, create_workflow, event_body, report
from tests.support.shards import rows_everywhere


def _committed(service: StatusService) -> tuple[int, int]:
    """Rows that any accepted change writes (its event, its outbox messages), on every shard."""
    events = rows_everywhere(service, sa.select(sa.func.count()).select_from(t.task_event_log))
    outbox = rows_everywhere(service, sa.select(sa.func.count()).select_from(t.task_outbox))
    return sum(row[0] for row in events), sum(row[0] for row in outbox)


def _raw(value: Any) -> bytes:
    """JSON text as a hostile client may send it: NaN and Infinity spelled out, lone surrogates escaped."""
    return json.dumps(value, allow_nan=True).encode("utf-8", "surrogatepass")


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"n": value}
    return value


@pytest.fixture
def ctx(http: Http) -> dict[str, Any]:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    context = activate(http, task_id)
    assert report(http, context, "STEP_STARTED", 1).status_code == 200
    return {**context, "taskId": task_id}


def _post_event(http: Http, ctx: dict[str, Any], raw: bytes) -> Any:
    return http.client.post(
        "/internal/v1/task-events",
        content=raw,
        headers={**http.auth(ctx["executionToken"]), "Content-Type": "application/json"},
    )


def _refused(response: Any) -> None:
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "VALIDATION_FAILED"
    assert response.json()["error"]["retryable"] is False


PROGRESS_SCHEMA = "document.parse.progress.v1"


@pytest.mark.parametrize(
    "value",
    [
        {"page": float("nan")},
        {"page": 1, "ratio": float("inf")},
        {"page": 1, "ratio": float("-inf")},
        {"page": 1, "label": "\ud800"},
        {"page": 1, "\udfff": 1},
        {"page": 1, "deep": _nested(28)},
    ],
    ids=["nan", "inf", "-inf", "lone-surrogate", "surrogate-key", "28-levels"],
)
def test_data_that_storage_cannot_hold_is_refused(
    http: Http, service: StatusService, ctx: dict[str, Any], value: Any
) -> None:
    before = _committed(service)
    body = event_body("STEP_PROGRESS", 2, progress={"current": 1}, data={"schema": PROGRESS_SCHEMA, "value": value})
    _refused(_post_event(http, ctx, _raw(body)))
    assert _committed(service) == before


def test_data_nests_to_the_limit_counted_from_the_body(http: Http, service: StatusService, ctx: dict[str, Any]) -> None:
    """The limit counts levels from the request body, wherever the data sits in it: an event's
    value is at level 3 of a single event's body and level 5 of a batch's, so the deepest data
    one holds is two levels deeper than the other's. At the limit it is taken; one level more
    is refused and commits nothing."""

    def event(seq: int, levels: int, **fields: Any) -> dict[str, Any]:
        data = {"schema": PROGRESS_SCHEMA, "value": {"page": 1, "deep": _nested(levels)}}
        return event_body("STEP_PROGRESS", seq, progress={"current": seq}, data=data, **fields)

    def single(seq: int, levels: int) -> Any:
        return _post_event(http, ctx, _raw(event(seq, levels)))

    def batch(seq: int, levels: int) -> Any:
        body = {"events": [event(seq, levels, executionHandle=ctx["executionHandle"])]}
        return http.client.post("/internal/v1/task-events:batch", json=body, headers=http.worker)

    # value {"page", "deep": n levels}: its deepest object sits at value's level + n
    for seq, (send, deepest) in enumerate([(single, 20 - 3), (batch, 20 - 5)], start=2):
        before = _committed(service)
        refused = send(seq, deepest + 1)
        _refused(refused)
        assert "nests deeper" in refused.json()["error"]["message"], refused.text
        assert _committed(service) == before
        taken = send(seq, deepest)
        assert taken.status_code == 200, taken.text
        assert _committed(service) != before


@pytest.mark.parametrize(
    "document",
    [
        {
            "operations": [
                {
                    "operationCode": "X.Y",
                    "version": 1,
                    "allowedEventTypes": ["STEP_PROGRESS"],
                    "schemas": {"s": _nested(32)},
                }
            ]
        },
        {
            "operations": [
                {
                    "operationCode": "X.Y",
                    "version": 1,
                    "allowedEventTypes": ["STEP_PROGRESS"],
                    "schemas": {"s": {"type": "number", "maximum": float("nan")}},
                }
            ]
        },
    ],
    ids=["32-levels", "maximum-nan"],
)
def test_definitions_that_storage_cannot_hold_are_refused(http: Http, service: StatusService, document: Any) -> None:
    admin = http.auth(http.service_token("ops", "ADMIN"))
    before = _committed(service)
    response = http.client.put(
        "/internal/v1/definitions", content=_raw(document), headers={**admin, "Content-Type": "application/json"}
    )
    _refused(response)
    assert _committed(service) == before


def test_a_definitions_document_of_the_wrong_shape_is_refused(http: Http, service: StatusService) -> None:
    """Found by the property test below: {"operations": 1} was iterated (500)."""
    admin = http.auth(http.service_token("ops", "ADMIN"))
    for document in ({"operations": 1}, {"statuses": "x"}, {"operations": [1]}, {"statuses": [None]}):
        before = _committed(service)
        _refused(http.client.put("/internal/v1/definitions", json=document, headers=admin))
        assert _committed(service) == before


@pytest.mark.parametrize("moment", ["9999-12-31T23:59:59-01:00", "0001-01-01T00:30:00+01:00", "0999-01-01T00:00:00Z"])
@pytest.mark.parametrize("field", ["occurredAt", "observedAt"])
def test_instants_outside_the_calendar_in_utc_are_refused(
    http: Http, service: StatusService, ctx: dict[str, Any], moment: str, field: str
) -> None:
    before = _committed(service)
    if field == "occurredAt":
        response = _post_event(
            http, ctx, _raw({**event_body("STEP_PROGRESS", 2, progress={"current": 1}), field: moment})
        )
    else:
        beat = {"executionHandle": ctx["executionHandle"], "heartbeatSeq": 1, "observedAt": moment}
        response = http.client.post(
            "/internal/v1/task-heartbeats:batch", json={"heartbeats": [beat]}, headers=http.worker
        )
    _refused(response)
    assert _committed(service) == before


@pytest.mark.parametrize("digits", ["²", "①", "٣", "1²"])
def test_numbers_are_ascii_digits_only(http: Http, ctx: dict[str, Any], digits: str) -> None:
    user = http.user("user-1")
    _refused(http.client.get(f"/api/tasks/{ctx['taskId']}/events", params={"afterTaskVersion": digits}, headers=user))
    _refused(http.client.get("/api/me/tasks", params={"limit": digits}, headers=user))
    _refused(http.client.get("/api/me/notifications", params={"limit": digits}, headers=user))
    response = http.client.patch(
        f"/internal/v1/tasks/{ctx['taskId']}/classification",
        json={"productId": "p"},
        headers={**http.coordinator, "If-Match": f'"task-version-{digits}"'.encode()},  # UTF-8 on the wire
    )
    _refused(response)


def test_a_tampered_cursor_is_refused_not_sent_to_the_driver(http: Http) -> None:
    forged = base64.urlsafe_b64encode(_raw(["2026-01-01T00:00:00", "\ud800"])).decode().rstrip("=")
    for path in ("/api/me/tasks", "/api/me/notifications"):
        _refused(http.client.get(path, params={"cursor": forged}, headers=http.user("user-1")))


def test_the_services_own_event_ids_cannot_be_taken(http: Http, ctx: dict[str, Any]) -> None:
    """sys:<taskId>:<version> names the service's timeline entries: a producer may use neither the
    current one (a collision) nor a future one (which would break the service's next entry)."""
    version = int(http.client.get(f"/api/tasks/{ctx['taskId']}", headers=http.user("user-1")).json()["taskVersion"])
    for taken in (version, version + 2):
        body = event_body("STEP_PROGRESS", 2, progress={"current": 1}, eventId=f"sys:{ctx['taskId']}:{taken}")
        _refused(_post_event(http, ctx, _raw(body)))
    # The service's next own entry (an access grant) still commits.
    grant = http.client.put(f"/internal/v1/tasks/{ctx['taskId']}/acl/USER/user-2", json={}, headers=http.coordinator)
    assert grant.status_code == 200, grant.text


@pytest.mark.parametrize(
    ("field", "value", "code"),
    [
        ("workflowId", "wf_someone_elses", "PERMISSION_DENIED"),
        ("operationCode", "SEARCH.WEB", "OPERATION_MISMATCH"),
        ("taskType", "video.export", "PERMISSION_DENIED"),
        ("taskAttempt", 7, "STALE_ATTEMPT"),
    ],
)
def test_the_envelope_of_a_compact_event_must_match_its_execution(
    http: Http, service: StatusService, ctx: dict[str, Any], field: str, value: Any, code: str
) -> None:
    """The handle binds the execution; the body may not claim another workflow, operation, task
    type or task attempt (design D3.2): those used to be ignored on the compact path."""
    before = _committed(service)
    body = event_body("STEP_PROGRESS", 2, progress={"current": 1}, executionHandle=ctx["executionHandle"])
    response = http.client.post("/internal/v1/task-events", json={**body, field: value}, headers=http.worker)
    assert response.status_code in (403, 409), response.text
    assert response.json()["error"]["code"] == code
    assert _committed(service) == before
    same = {**event_body("STEP_PROGRESS", 2, progress={"current": 1}, executionHandle=ctx["executionHandle"])}
    assert http.client.post("/internal/v1/task-events", json=same, headers=http.worker).status_code == 200


# ---------------------------------------------------------------- generated input at every write endpoint
def _json_values() -> st.SearchStrategy[Any]:
    lone_surrogate = st.characters(categories=["Cs"])  # Hypothesis leaves these out of text() by default
    text = st.text(max_size=12) | st.builds(
        lambda a, c, b: a + c + b, st.text(max_size=4), lone_surrogate, st.text(max_size=4)
    )
    numbers = st.one_of(
        st.integers(min_value=-(2**80), max_value=2**80), st.floats(allow_nan=True, allow_infinity=True)
    )
    dates = st.datetimes().map(lambda d: d.isoformat()) | st.sampled_from(
        ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59", "2026-13-01T00:00:00Z", "now"]
    )
    leaves = st.one_of(st.none(), st.booleans(), numbers, text, dates)
    return st.recursive(
        leaves, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3), max_leaves=12
    ) | st.builds(_nested, st.integers(min_value=15, max_value=40))


Endpoint = Callable[[Http, dict[str, Any], dict[str, Any]], Any]


def _endpoints(http: Http, ctx: dict[str, Any]) -> dict[str, tuple[dict[str, Any], Endpoint]]:
    """A valid body for each write endpoint, and how to send a body there."""
    admin = http.auth(http.service_token("ops", "ADMIN"))
    task = ctx["taskId"]

    def send(method: str, path: str, headers: dict[str, str]) -> Endpoint:
        return lambda h, c, body: h.client.request(
            method, path, content=_raw(body), headers={**headers, "Content-Type": "application/json"}
        )

    return {
        "event": (
            event_body(
                "STEP_PROGRESS", 5, progress={"current": 1}, data={"schema": PROGRESS_SCHEMA, "value": {"page": 1}}
            ),
            send("POST", "/internal/v1/task-events", http.auth(ctx["executionToken"])),
        ),
        "batch": (
            {
                "events": [
                    event_body("STEP_PROGRESS", 6, progress={"current": 2}, executionHandle=ctx["executionHandle"])
                ]
            },
            send("POST", "/internal/v1/task-events:batch", http.worker),
        ),
        "heartbeats": (
            {"heartbeats": [{"executionHandle": ctx["executionHandle"], "heartbeatSeq": 1}]},
            send("POST", "/internal/v1/task-heartbeats:batch", http.worker),
        ),
        "workflow": (
            {
                "clientWorkflowKey": f"wf-{uuid.uuid4().hex}",
                "ownerId": "user-1",
                "title": "t",
                "initialTasks": [{"clientTaskKey": "a", "title": "a"}],
            },
            send("POST", "/internal/v1/workflows", http.coordinator),
        ),
        "classification": (
            {"productId": "p"},
            send("PATCH", f"/internal/v1/tasks/{task}/classification", http.coordinator),
        ),
        "register": (
            {"clientStepKey": "k", "operationCode": "SEARCH.WEB", "producerId": "document-parser"},
            send("POST", f"/internal/v1/tasks/{task}/executions:register", http.coordinator),
        ),
        "owner": (
            {"namespace": "default", "workflowId": "wf"},
            send("PUT", f"/internal/v1/tasks/{task}/temporal-owner", http.coordinator),
        ),
        "correction": (
            {"correctionId": "c", "operatorId": "o", "reason": "r", "businessStatus": "RUNNING"},
            send("POST", f"/internal/v1/tasks/{task}/corrections", admin),
        ),
        "definitions": (
            {"operations": [{"operationCode": "GEN.OP", "version": 1, "allowedEventTypes": ["STEP_STARTED"]}]},
            send("PUT", "/internal/v1/definitions", admin),
        ),
        "external-refs": (
            {"externalRefs": [{"refType": "ORDER_ID", "refValue": "SO-1"}]},
            send("POST", f"/internal/v1/tasks/{task}/external-refs", http.coordinator),
        ),
    }


def _mutate(body: Any, path: list[int], value: Any) -> Any:
    """``body`` with one value somewhere inside it (chosen by ``path``) replaced by ``value``."""
    if not path or not isinstance(body, dict | list) or not body:
        return value
    if isinstance(body, dict):
        key = sorted(body)[path[0] % len(body)]
        return {**body, key: _mutate(body[key], path[1:], value)}
    index = path[0] % len(body)
    return [*body[:index], _mutate(body[index], path[1:], value), *body[index + 1 :]]


# Where free-form client data goes all the way to storage: a generated value is put there half
# the time (the other half, anywhere in the body).
STORED_AT: dict[str, list[tuple[str | int, ...]]] = {
    "event": [("data", "value", "extra"), ("data", "value", "page"), ("phaseLabel",), ("occurredAt",)],
    "batch": [("events", 0, "phaseLabel"), ("events", 0, "occurredAt"), ("events", 0, "progress", "current")],
    "heartbeats": [("heartbeats", 0, "observedAt"), ("heartbeats", 0, "heartbeatSeq")],
    "workflow": [("title",), ("initialTasks", 0, "title"), ("ownerId",)],
    "classification": [("productId",), ("taskType",)],
    "register": [("displayName",), ("clientStepKey",)],
    "owner": [("workflowId",), ("namespace",), ("runId",)],
    "correction": [("reason",), ("operatorId",), ("correctionId",)],
    "definitions": [("operations", 0, "schemas", "s"), ("operations", 0, "displayName"), ("operations", 0, "x")],
    "external-refs": [("externalRefs", 0, "refValue"), ("externalRefs", 0, "refType")],
}


def _put(body: Any, where: tuple[str | int, ...], value: Any) -> Any:
    if not where:
        return value
    head, rest = where[0], where[1:]
    if isinstance(body, list) and isinstance(head, int) and head < len(body):
        return [*body[:head], _put(body[head], rest, value), *body[head + 1 :]]
    current = body.get(head, {}) if isinstance(body, dict) else {}
    return {**(body if isinstance(body, dict) else {}), head: _put(current, rest, value)}


# Derandomized: the suite explores the same 300 inputs every run (it must be green every time);
# run it with HYPOTHESIS_SEED unset and derandomize off locally to explore further.
@settings(
    max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    endpoint=st.sampled_from(
        [
            "event",
            "batch",
            "heartbeats",
            "workflow",
            "classification",
            "register",
            "owner",
            "correction",
            "definitions",
            "external-refs",
        ]
    ),
    path=st.lists(st.integers(min_value=0, max_value=7), max_size=4),
    stored=st.integers(min_value=-4, max_value=3),
    value=_json_values(),
)
def test_generated_input_never_gets_a_5xx_and_a_refusal_commits_nothing(
    http: Http, service: StatusService, ctx: dict[str, Any], endpoint: str, path: list[int], stored: int, value: Any
) -> None:
    valid, send = _endpoints(http, ctx)[endpoint]
    places = STORED_AT[endpoint]
    body = _put(valid, places[stored % len(places)], value) if stored >= 0 else _mutate(valid, path, value)
    before = _committed(service)
    response = send(http, ctx, body)
    assert response.status_code < 500, (endpoint, body, response.text)
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"code", "message", "retryable"}
        assert _committed(service) == before, (endpoint, body, response.text)
    if isinstance(value, float) and not math.isfinite(value):
        assert response.status_code >= 400  # never stored, wherever it was put
