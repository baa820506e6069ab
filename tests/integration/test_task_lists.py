"""The user's task list over HTTP: status filters with keyset paging, and the list-level fields
the dashboard shows (added steps, needs action)."""

from __future__ import annotations

import sqlalchemy as sa

from status.app.service import StatusService
from status.infra import tables as t
from tests.integration.conftest import Http
from tests.support.flows import activate, complete_task, create_workflow, fail_task, report
from tests.support.shards import rows_everywhere


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


def _page(http: Http, user: str, limit: int, cursor: str | None = None, **claims: list[str]) -> tuple[list[str], str]:
    query = f"?limit={limit}" + (f"&cursor={cursor}" if cursor else "")
    response = http.client.get(f"/api/me/tasks{query}", headers=http.user(user, **claims))
    assert response.status_code == 200, response.text
    body = response.json()
    return [t["taskId"] for t in body["tasks"]], body["nextCursor"]


def _newest_first(service: StatusService, task_ids: list[str]) -> list[str]:
    """The list's order (created_at, then id, descending), as the databases (every shard) hold them."""
    rows = rows_everywhere(service, sa.select(t.task.c.id, t.task.c.created_at).where(t.task.c.id.in_(task_ids)))
    return [row.id for row in sorted(rows, key=lambda row: (row.created_at, row.id), reverse=True)]


def test_a_task_seen_several_ways_is_listed_once_and_paging_goes_through_all(
    http: Http, service: StatusService
) -> None:
    """Owned, granted to the user, to their projects, to their role: each way is read on its own
    and merged (reads.page_of_tasks). A task seen several ways appears once and takes one place on
    its page — also within one way (granted to each of the user's projects), where it must not
    push an older task of that way off the page — and the pages hold every task once, newest first."""
    user = "seen-many-ways"

    def task(owner: str = "someone-else", *grants: tuple[str, str]) -> str:
        task_id = str(create_workflow(http, owner=owner)["tasks"][0]["taskId"])
        for kind, principal in grants:
            path = f"/internal/v1/tasks/{task_id}/acl/{kind}/{principal}"
            assert http.client.put(path, json={}, headers=http.coordinator).status_code == 200
        return task_id

    # Oldest first; pages of two, newest first: [f, e], [c, b], [a, d].
    d = task("someone-else", ("USER", user), ("PROJECT", "p-one"))
    a = task(user)
    b = task("someone-else", ("PROJECT", "p-two"))
    # Granted to all three of the user's projects: three rows of that way for one task (a page
    # of two reads three of each way, to know whether a next page exists).
    c = task("someone-else", ("PROJECT", "p-one"), ("PROJECT", "p-two"), ("PROJECT", "p-three"))
    e = task("someone-else", ("ROLE", "reviewer"))
    f = task(user, ("USER", user), ("ROLE", "reviewer"))
    unseen = task("someone-else", ("PROJECT", "not-theirs"))
    claims = {"projects": ["p-one", "p-two", "p-three"], "roles": ["reviewer"]}
    pages, cursor = [], None
    while True:
        page, cursor = _page(http, user, 2, cursor, **claims)
        pages.append(page)
        if cursor is None:
            break
    assert [task_id for page in pages for task_id in page] == _newest_first(service, [a, b, c, d, e, f])
    assert all(len(page) == 2 for page in pages) and unseen not in pages[0] + pages[1] + pages[2]
    # Without the groups' claims: what the user owns or was granted by name.
    alone, _ = _page(http, user, 50)
    assert alone == _newest_first(service, [a, d, f])
