"""A workflow's aggregate never tells a user about tasks they cannot see."""

from __future__ import annotations

import uuid
from typing import Any

from status.app.service import StatusService
from tests.integration.conftest import Http
from tests.support.flows import activate, report
from tests.support.shards import fold_everywhere

STEPS = [{"stepId": "02_parse", "operationCode": "DOCUMENT.PARSE"}]


def _created(http: Http) -> dict[str, Any]:
    body = {
        "clientWorkflowKey": f"wf-{uuid.uuid4().hex}",
        "ownerId": "owner",
        "title": "Quarterly close",
        "initialTasks": [
            {"clientTaskKey": "mine", "title": "Owner's task", "knownSteps": STEPS},
            {"clientTaskKey": "also-mine", "title": "Owner's other task"},
            {"clientTaskKey": "theirs", "title": "Guest's task", "ownerId": "guest", "knownSteps": STEPS},
        ],
    }
    response = http.client.post("/internal/v1/workflows", json=body, headers=http.coordinator)
    assert response.status_code == 201, response.text
    return dict(response.json())


def _two_owner_workflow(http: Http) -> tuple[str, str]:
    created = _created(http)
    return created["workflowId"], next(t["taskId"] for t in created["tasks"] if t["clientTaskKey"] == "theirs")


def test_a_user_who_sees_some_tasks_gets_an_aggregate_over_those_only(http: Http, service: StatusService) -> None:
    workflow_id, _ = _two_owner_workflow(http)
    fold_everywhere(service)  # the owner's aggregate, as the observer folds it
    owner = http.client.get(f"/api/workflows/{workflow_id}", headers=http.user("owner")).json()
    guest = http.client.get(f"/api/workflows/{workflow_id}", headers=http.user("guest")).json()
    assert owner["taskCount"] == 3 and owner["aggregate"]["taskCount"] == 3
    assert guest["taskCount"] == 1 and guest["aggregate"]["taskCount"] == 1
    nobody = http.client.get(f"/api/workflows/{workflow_id}", headers=http.user("stranger"))
    assert nobody.status_code == 404


def test_a_trimmed_summary_neither_dates_nor_counts_the_hidden_tasks(http: Http, service: StatusService) -> None:
    """startedAt, finishedAt and workflowVersion come from the visible tasks alone: the owner's task
    starting and changing moves the owner's summary, never the guest's."""
    created = _created(http)
    workflow_id = created["workflowId"]
    task_of = {t["clientTaskKey"]: t["taskId"] for t in created["tasks"]}

    def summaries() -> tuple[dict[str, Any], dict[str, Any]]:
        fold_everywhere(service)
        owner = http.client.get(f"/api/workflows/{workflow_id}", headers=http.user("owner")).json()
        batch = http.client.post(
            "/api/workflows:batchGet", json={"workflowIds": [workflow_id]}, headers=http.user("guest")
        ).json()["workflows"][0]
        guest = http.client.get(f"/api/workflows/{workflow_id}", headers=http.user("guest")).json()
        assert {k: v for k, v in batch.items() if k != "asOf"} == {k: v for k, v in guest.items() if k != "asOf"}
        return owner, guest

    _, before = summaries()
    hidden = activate(http, task_of["mine"])
    assert report(http, hidden, "STEP_STARTED", 1).status_code == 200
    assert report(http, hidden, "STEP_PROGRESS", 2, progress={"current": 1, "total": 4}).status_code == 200
    owner, guest = summaries()
    assert owner["startedAt"] is not None and owner["lifecycleStatus"] == "RUNNING"
    assert guest["startedAt"] is None and guest["lifecycleStatus"] == "PENDING"
    assert guest["workflowVersion"] == before["workflowVersion"]  # the hidden task's changes are not counted
    assert guest["finishedAt"] is None

    theirs = activate(http, task_of["theirs"])
    assert report(http, theirs, "STEP_STARTED", 1).status_code == 200
    _, seen = summaries()
    assert int(seen["workflowVersion"]) > int(guest["workflowVersion"])  # a change the guest sees moves it
    assert seen["startedAt"] is not None and seen["lifecycleStatus"] == "RUNNING"
    assert seen["startedAt"] > owner["startedAt"]  # their task's start, not the workflow's first


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


def test_many_workflows_in_one_read_answer_as_one_get_each(http: Http, service: StatusService) -> None:
    """Issue 32 item 3: a page's list of workflows in one request, each as GET /api/workflows/{id}
    answers it for that user (a guest's aggregate trimmed), those not seen in notFound."""
    first, _ = _two_owner_workflow(http)
    second, _ = _two_owner_workflow(http)
    fold_everywhere(service)
    ids = [first, second, "wf_never_there", first]
    for user in ("owner", "guest", "stranger"):
        batch = http.client.post("/api/workflows:batchGet", json={"workflowIds": ids}, headers=http.user(user))
        assert batch.status_code == 200, batch.text
        one_by_one = {w: http.client.get(f"/api/workflows/{w}", headers=http.user(user)) for w in dict.fromkeys(ids)}
        expected = {w: r.json() for w, r in one_by_one.items() if r.status_code == 200}
        got = {w["workflowId"]: w for w in batch.json()["workflows"]}
        assert got.keys() == expected.keys()
        for workflow_id, summary in got.items():
            assert {k: v for k, v in summary.items() if k != "asOf"} == {
                k: v for k, v in expected[workflow_id].items() if k != "asOf"
            }
        assert sorted(batch.json()["notFound"]) == sorted(w for w, r in one_by_one.items() if r.status_code == 404)
    too_many = http.client.post(
        "/api/workflows:batchGet", json={"workflowIds": [f"wf-{n}" for n in range(101)]}, headers=http.user("owner")
    )
    assert too_many.status_code == 422 and too_many.json()["error"]["code"] == "VALIDATION_FAILED"
    assert http.client.post("/api/workflows:batchGet", json={"workflowIds": [first]}).status_code == 401
