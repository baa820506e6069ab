"""The user's task list over HTTP: status filters with keyset paging, and the list-level fields
the dashboard shows (added steps, needs action)."""

from __future__ import annotations

from tests.integration.conftest import Http
from tests.support.flows import activate, complete_task, create_workflow, fail_task, report


def _ids(http: Http, status: str | None = None, user: str = "user-1") -> list[str]:
    query = f"?status={status}" if status else ""
    response = http.client.get(f"/api/me/tasks{query}", headers=http.user(user))
    assert response.status_code == 200, response.text
    return [t["taskId"] for t in response.json()["tasks"]]


def test_filters_split_the_list_by_what_users_look_for(http: Http) -> None:
    user = "lister"
    pending = create_workflow(http, owner=user)["tasks"][0]["taskId"]
    failed = create_workflow(http, owner=user)["tasks"][0]["taskId"]
    assert fail_task(http, failed, "PARSE_FAILED").status_code == 200
    done = create_workflow(http, owner=user)["tasks"][0]["taskId"]
    completed = complete_task(http, done)
    assert completed.status_code == 200
    steps = [{"stepId": "02_parse", "operationCode": "DOCUMENT.PARSE", "failurePolicy": "WAIT_FOR_USER"}]
    waiting = create_workflow(http, owner=user, knownSteps=steps)["tasks"][0]["taskId"]
    ctx = activate(http, waiting)
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    error = {"category": "BUSINESS_INPUT", "code": "PASSWORD", "userMessage": "Enter the password."}
    assert report(http, ctx, "STEP_FAILED", 2, error=error).status_code == 200
    assert set(_ids(http, user=user)) == {pending, failed, done, waiting}
    assert set(_ids(http, "running", user)) == {pending, waiting}
    assert _ids(http, "failed", user) == [failed]
    assert _ids(http, "done", user) == [done]
    assert _ids(http, "needs_action", user) == [waiting]
    listed = {t["taskId"]: t for t in http.client.get("/api/me/tasks", headers=http.user(user)).json()["tasks"]}
    assert listed[waiting]["needsAction"] is True and listed[pending]["needsAction"] is False
    bad = http.client.get("/api/me/tasks?status=everything", headers=http.user(user))
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "VALIDATION_FAILED"


def test_added_steps_are_counted_beside_the_known_ones(http: Http) -> None:
    policy = {
        "allowedParentOperations": ["DOCUMENT.PARSE"],
        "allowedChildOperations": ["SEARCH.*"],
        "maxDynamicSteps": 5,
    }
    task_id = create_workflow(http, dynamicRegistrationPolicy=policy)["tasks"][0]["taskId"]
    ctx = activate(http, task_id)
    for key in ("search-0", "search-1"):
        registered = http.client.post(
            f"/internal/v1/tasks/{task_id}/executions:register",
            json={
                "clientStepKey": key,
                "operationCode": "SEARCH.WEB",
                "producerId": "search-service",
                "parentExecutionId": ctx["executionId"],
            },
            headers=http.auth(ctx["executionToken"]),
        )
        assert registered.status_code == 201, registered.text
    snap = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    assert snap["progress"]["totalSteps"] == 3 and snap["progress"]["addedSteps"] == 2
    assert snap["silentSince"] is None and snap["needsAction"] is False
