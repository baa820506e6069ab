"""A workflow's aggregate never tells a user about tasks they cannot see (issue: hardening, item 9)."""

from __future__ import annotations

import uuid

import sqlalchemy as sa

from tests.integration.conftest import Http
from tests.support.wiring import projector_for


def _two_owner_workflow(http: Http) -> tuple[str, str]:
    body = {
        "clientWorkflowKey": f"wf-{uuid.uuid4().hex}",
        "ownerId": "owner",
        "title": "Quarterly close",
        "initialTasks": [
            {"clientTaskKey": "mine", "title": "Owner's task"},
            {"clientTaskKey": "also-mine", "title": "Owner's other task"},
            {"clientTaskKey": "theirs", "title": "Guest's task", "ownerId": "guest"},
        ],
    }
    response = http.client.post("/internal/v1/workflows", json=body, headers=http.coordinator)
    assert response.status_code == 201, response.text
    created = response.json()
    return created["workflowId"], next(t["taskId"] for t in created["tasks"] if t["clientTaskKey"] == "theirs")


def test_a_user_who_sees_some_tasks_gets_an_aggregate_over_those_only(http: Http, engine: sa.Engine) -> None:
    workflow_id, _ = _two_owner_workflow(http)
    projector_for(engine).run_once()  # the owner's aggregate, as the observer folds it
    owner = http.client.get(f"/api/workflows/{workflow_id}", headers=http.user("owner")).json()
    guest = http.client.get(f"/api/workflows/{workflow_id}", headers=http.user("guest")).json()
    assert owner["taskCount"] == 3 and owner["aggregate"]["taskCount"] == 3
    assert guest["taskCount"] == 1 and guest["aggregate"]["taskCount"] == 1
    assert guest["workflowVersion"] == owner["workflowVersion"]
    nobody = http.client.get(f"/api/workflows/{workflow_id}", headers=http.user("stranger"))
    assert nobody.status_code == 404


def test_only_the_owner_may_follow_the_workflow_channel(http: Http) -> None:
    workflow_id, _ = _two_owner_workflow(http)
    owner = http.client.post(
        "/api/realtime/subscription-token", json={"workflowId": workflow_id}, headers=http.user("owner")
    )
    assert owner.status_code == 200, owner.text
    guest = http.client.post(
        "/api/realtime/subscription-token", json={"workflowId": workflow_id}, headers=http.user("guest")
    )
    assert guest.status_code == 403 and guest.json()["error"]["code"] == "PERMISSION_DENIED"
