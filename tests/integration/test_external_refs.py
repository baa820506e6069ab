"""External references over HTTP (design D5 task_external_ref): attach at creation or later, unique per
scope, idempotent, looked up internally and publicly with the usual ACL."""

from __future__ import annotations

import uuid
from typing import Any

from tests.integration.conftest import Http
from tests.support.flows import create_workflow


def _refs(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"refType": ref_type, "refValue": value} for ref_type, value in pairs]


def _attach(http: Http, task_id: str, *pairs: tuple[str, str], headers: dict[str, str] | None = None) -> Any:
    return http.client.post(
        f"/internal/v1/tasks/{task_id}/external-refs",
        json={"externalRefs": _refs(*pairs)},
        headers=headers or http.coordinator,
    )


def _lookup(http: Http, ref_type: str, value: str, headers: dict[str, str] | None = None) -> Any:
    return http.client.get(
        "/internal/v1/external-refs",
        params={"refType": ref_type, "refValue": value},
        headers=headers or http.coordinator,
    )


def test_references_given_at_creation_find_the_task(http: Http) -> None:
    order = f"SO-{uuid.uuid4().hex[:8]}"
    created = create_workflow(http, externalRefs=_refs(("ORDER_ID", order), ("TICKET", f"INC/{order}")))
    task_id = created["tasks"][0]["taskId"]
    found = _lookup(http, "ORDER_ID", order)
    assert found.status_code == 200, found.text
    assert found.json()["taskId"] == task_id and found.json()["workflowId"] == created["workflowId"]
    # A value with a slash is a query parameter, not a path: it round-trips intact.
    assert _lookup(http, "TICKET", f"INC/{order}").json()["taskId"] == task_id
    # The owner finds the task's snapshot by the reference.
    public = http.client.get(
        "/api/tasks:byExternalRef", params={"refType": "ORDER_ID", "refValue": order}, headers=http.user("user-1")
    )
    assert public.status_code == 200 and public.json()["taskId"] == task_id and "steps" in public.json()


def test_attaching_is_idempotent_unique_per_scope_and_conflicts_across_tasks(http: Http) -> None:
    first = create_workflow(http)["tasks"][0]["taskId"]
    second = create_workflow(http)["tasks"][0]["taskId"]
    order = f"SO-{uuid.uuid4().hex[:8]}"
    attached = _attach(http, first, ("ORDER_ID", order))
    assert attached.status_code == 201 and attached.json()["externalRefs"][0]["created"] is True
    again = _attach(http, first, ("ORDER_ID", order))
    assert again.status_code == 200 and again.json()["externalRefs"][0]["created"] is False
    clash = _attach(http, second, ("ORDER_ID", order))
    assert clash.status_code == 409 and clash.json()["error"]["code"] == "EXTERNAL_REF_CONFLICT"
    # A creation that would take another task's reference is refused as a whole: no task is left behind.
    refused = http.client.post(
        "/internal/v1/workflows",
        headers=http.coordinator,
        json={
            "clientWorkflowKey": f"wf-{uuid.uuid4().hex}",
            "ownerId": "user-1",
            "title": "Clash",
            "initialTasks": [{"clientTaskKey": "a", "title": "A", "externalRefs": _refs(("ORDER_ID", order))}],
        },
    )
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "EXTERNAL_REF_CONFLICT"
    assert _lookup(http, "ORDER_ID", order).json()["taskId"] == first
    # Another authority scope has its own namespace of references.
    billing = http.auth(http.service_token("coordinator-1", "COORDINATOR", scope="billing"))
    assert _lookup(http, "ORDER_ID", order, headers=billing).status_code == 404
    billing_task = http.client.post(
        "/internal/v1/workflows",
        headers=billing,
        json={
            "clientWorkflowKey": f"wf-{uuid.uuid4().hex}",
            "ownerId": "user-1",
            "title": "Billing",
            "initialTasks": [{"clientTaskKey": "a", "title": "Invoice", "externalRefs": _refs(("ORDER_ID", order))}],
        },
    )
    assert billing_task.status_code == 201, billing_task.text
    assert _lookup(http, "ORDER_ID", order, headers=billing).json()["taskId"] != first
    # The user sees the order in both scopes: the public lookup asks which one.
    ambiguous = http.client.get(
        "/api/tasks:byExternalRef", params={"refType": "ORDER_ID", "refValue": order}, headers=http.user("user-1")
    )
    assert ambiguous.status_code == 422
    scoped = http.client.get(
        "/api/tasks:byExternalRef",
        params={"refType": "ORDER_ID", "refValue": order, "authorityScope": "billing"},
        headers=http.user("user-1"),
    )
    assert scoped.status_code == 200 and scoped.json()["title"] == "Invoice"


def test_the_public_lookup_respects_the_acl_and_refs_are_validated(http: Http) -> None:
    task_id = create_workflow(http, owner="user-1")["tasks"][0]["taskId"]
    order = f"SO-{uuid.uuid4().hex[:8]}"
    assert _attach(http, task_id, ("ORDER_ID", order)).status_code == 201
    params = {"refType": "ORDER_ID", "refValue": order}
    stranger = http.client.get("/api/tasks:byExternalRef", params=params, headers=http.user("user-2"))
    unknown = http.client.get(
        "/api/tasks:byExternalRef", params={**params, "refValue": "nope"}, headers=http.user("user-2")
    )
    # Not visible answers exactly like unknown (no probing by reference).
    assert stranger.status_code == unknown.status_code == 404
    assert stranger.json()["error"]["code"] == unknown.json()["error"]["code"] == "NOT_FOUND"
    grant = http.client.put(f"/internal/v1/tasks/{task_id}/acl/USER/user-2", json={}, headers=http.coordinator)
    assert grant.status_code == 200
    granted = http.client.get("/api/tasks:byExternalRef", params=params, headers=http.user("user-2"))
    assert granted.status_code == 200 and granted.json()["taskId"] == task_id
    # Bad references are clear 422s; a missing parameter too; a task of another tenant is unknown.
    assert _attach(http, task_id, ("bad type!", "x")).status_code == 422
    assert _attach(http, task_id, ("ORDER_ID", "line\nbreak")).status_code == 422
    assert http.client.get("/internal/v1/external-refs", headers=http.coordinator).status_code == 422
    other_tenant = http.auth(http.service_token("coordinator-1", "COORDINATOR", tenant="other-tenant"))
    assert _attach(http, task_id, ("ORDER_ID", "x"), headers=other_tenant).status_code == 404
    # Workers may report, not re-map tasks.
    worker = http.auth(http.service_token("worker-1", "WORKER"))
    assert _attach(http, task_id, ("ORDER_ID", "y"), headers=worker).status_code == 403


def test_references_are_exact_strings(http: Http) -> None:
    """A trailing space makes another reference (MySQL's padding collations used to fold them)."""
    order = f"SO-{uuid.uuid4().hex[:6]}"
    plain = create_workflow(http)["tasks"][0]["taskId"]
    spaced = create_workflow(http)["tasks"][0]["taskId"]
    assert _attach(http, plain, ("ORDER_ID", order)).status_code == 201
    attached = _attach(http, spaced, ("ORDER_ID", order + " "))
    assert attached.status_code == 201, attached.text  # not EXTERNAL_REF_CONFLICT
    assert _lookup(http, "ORDER_ID", order).json()["taskId"] == plain
    assert _lookup(http, "ORDER_ID", order + " ").json()["taskId"] == spaced
    assert _lookup(http, "ORDER_ID", order.lower() if order.lower() != order else order + "x").status_code == 404
