"""Tenant-registered JSON Schemas never make the service fetch anything, and cannot stall it."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from status.infra.schemas import JsonSchemaValidator
from tests.integration.conftest import Http
from tests.support.flows import activate, create_workflow, report

CODE = "DOCUMENT.PARSE"


class Counting(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        Counting.hits.append(self.path)
        body = b'{"type": "string"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def counting_server() -> Iterator[str]:
    Counting.hits = []
    server = http.server.HTTPServer(("127.0.0.1", 0), Counting)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def _nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


def _definitions(schema: dict[str, Any], version: int = 2) -> dict[str, Any]:
    return {
        "operations": [
            {
                "operationCode": CODE,
                "version": version,
                "allowedEventTypes": ["STEP_STARTED", "STEP_PROGRESS", "STEP_COMPLETED", "STEP_FAILED"],
                "allowedDataSchemas": {"STEP_PROGRESS": ["tenant.progress.v1"]},
                "schemas": {"tenant.progress.v1": schema},
            }
        ]
    }


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "{url}/x.json"},
        {"type": "object", "properties": {"page": {"$ref": "{url}/page.json"}}},
        {"$defs": {"a": {"$dynamicRef": "{url}/d.json"}}, "type": "object"},
    ],
)
def test_a_remote_reference_is_refused_at_registration_and_never_fetched(
    http: Http, counting_server: str, schema: dict[str, Any]
) -> None:
    document = json.loads(json.dumps(schema).replace("{url}", counting_server))
    admin = http.auth(http.service_token("admin", "ADMIN"))
    response = http.client.put("/internal/v1/definitions", json=_definitions(document), headers=admin)
    assert response.status_code == 422 and response.json()["error"]["code"] == "VALIDATION_FAILED"
    assert "remote references are not allowed" in response.json()["error"]["message"]
    assert Counting.hits == []


def test_a_schema_stored_with_a_remote_reference_still_fetches_nothing(counting_server: str) -> None:
    """A document that predates the registration check: validation refuses, no request leaves."""
    problems = JsonSchemaValidator().errors("old.v1", {"$ref": f"{counting_server}/x.json"}, "text")
    assert problems and "not available" in problems[0]
    assert Counting.hits == []


def test_local_references_still_work(http: Http) -> None:
    admin = http.auth(http.service_token("admin", "ADMIN"))
    schema = {
        "$defs": {"page": {"type": "integer", "minimum": 1}},
        "type": "object",
        "properties": {"page": {"$ref": "#/$defs/page"}},
    }
    assert http.client.put("/internal/v1/definitions", json=_definitions(schema), headers=admin).status_code == 200
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    ctx = activate(http, task_id)
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    good = report(http, ctx, "STEP_PROGRESS", 2, data={"schema": "tenant.progress.v1", "value": {"page": 2}})
    assert good.status_code == 200, good.text
    bad = report(http, ctx, "STEP_PROGRESS", 3, data={"schema": "tenant.progress.v1", "value": {"page": 0}})
    assert bad.status_code == 422


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        ({"type": "string", "pattern": "^(a+)+$"}, "catastrophic backtracking"),
        ({"type": "object", "patternProperties": {"^(x*)*y$": {}}}, "catastrophic backtracking"),
        ({"type": "string", "pattern": "a" * 300}, "longer than"),
        ({"type": "string", "description": "x" * 40_000}, "larger than"),
        (_nested(40), "nests deeper"),
    ],
)
def test_costly_schemas_are_refused_at_registration(http: Http, schema: dict[str, Any], why: str) -> None:
    admin = http.auth(http.service_token("admin", "ADMIN"))
    response = http.client.put("/internal/v1/definitions", json=_definitions(schema), headers=admin)
    assert response.status_code == 422, response.text
    assert why in response.json()["error"]["message"]


def test_data_is_validated_before_the_task_row_is_locked(http: Http, monkeypatch: pytest.MonkeyPatch) -> None:
    """A costly validation must not hold the task's other reports: it runs before the lock, once."""
    from status.infra.schemas import JsonSchemaValidator
    from status.infra.stores import sql

    task_id = create_workflow(http)["tasks"][0]["taskId"]
    ctx = activate(http, task_id)
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    order: list[str] = []
    validate, lock = JsonSchemaValidator._validate, sql.lock_task_version

    def validating(*args: Any) -> list[str]:
        order.append("validate")
        return validate(*args)

    def locking(*args: Any) -> Any:
        order.append("lock")
        return lock(*args)

    monkeypatch.setattr(JsonSchemaValidator, "_validate", staticmethod(validating))
    monkeypatch.setattr(sql, "lock_task_version", locking)
    value = {"page": 3, "pageCount": 9, "nonce": str(id(order))}  # a value no earlier test validated
    response = report(http, ctx, "STEP_PROGRESS", 2, data={"schema": "document.parse.progress.v1", "value": value})
    assert response.status_code == 200, response.text
    assert order[:2] == ["validate", "lock"] and order.count("validate") == 1
