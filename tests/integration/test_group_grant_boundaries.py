"""A task granted to PROJECT p9 and ROLE r1 is seen by their members and by nobody else: every read
that applies the visibility rule answers a non-member as if the task did not exist.

The members' side is ``test_group_grants.py``; this is the other side, which a rule that let any
project or role grant through would fail: a user of project p8, of role r2, and of neither.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import Http
from tests.support.flows import create_workflow, fail_task

OUTSIDERS = {
    "another project": {"projects": ["p8"]},
    "another role": {"roles": ["r2"]},
    "both others": {"projects": ["p8"], "roles": ["r2"]},
    "no groups": {},
}
MEMBERS = {"the project": {"projects": ["p9"]}, "the role": {"roles": ["r1"]}}


@pytest.fixture
def granted(http: Http) -> str:
    task_id = str(create_workflow(http)["tasks"][0]["taskId"])
    acl = f"/internal/v1/tasks/{task_id}/acl"
    for kind, principal in (("PROJECT", "p9"), ("ROLE", "r1"), ("USER", "member"), ("USER", "outsider")):
        response = http.client.put(f"{acl}/{kind}/{principal}", json={}, headers=http.coordinator)
        assert response.status_code == 200, response.text
    # An ending stores a notification for each USER viewer; both users' own grants then go, so
    # whether each may still list it is the groups' rule alone.
    assert fail_task(http, task_id, "PARSE_FAILED", "The file is not a contract").status_code == 200
    for user in ("member", "outsider"):
        assert http.client.delete(f"{acl}/USER/{user}", headers=http.coordinator).status_code == 200
    return task_id


def _reads(http: Http, user: str, groups: dict[str, Any], task_id: str) -> dict[str, Any]:
    headers = http.user(user, **groups)
    return {
        "snapshot": http.client.get(f"/api/tasks/{task_id}", headers=headers),
        "events": http.client.get(f"/api/tasks/{task_id}/events", headers=headers),
        "batchGet": http.client.post("/api/tasks/status:batchGet", json={"taskIds": [task_id]}, headers=headers),
        "my tasks": http.client.get("/api/me/tasks", headers=headers),
        "notifications": http.client.get("/api/me/notifications", headers=headers),
        "subscription": http.client.post("/api/realtime/subscription-token", json={"taskId": task_id}, headers=headers),
    }


@pytest.mark.parametrize("groups", list(MEMBERS.values()), ids=list(MEMBERS))
def test_a_member_of_either_group_sees_the_task_on_every_read(http: Http, granted: str, groups: dict) -> None:
    reads = _reads(http, "member", groups, granted)
    assert reads["snapshot"].status_code == 200 and reads["snapshot"].json()["taskId"] == granted
    assert reads["events"].status_code == 200 and reads["events"].json()["events"]
    assert [t["taskId"] for t in reads["batchGet"].json()["tasks"]] == [granted]
    assert granted in [t["taskId"] for t in reads["my tasks"].json()["tasks"]]
    assert granted in [n["taskId"] for n in reads["notifications"].json()["notifications"]]
    assert reads["subscription"].status_code == 200, reads["subscription"].text


@pytest.mark.parametrize("groups", list(OUTSIDERS.values()), ids=list(OUTSIDERS))
def test_nobody_outside_the_granted_groups_sees_it_anywhere(http: Http, granted: str, groups: dict) -> None:
    reads = _reads(http, "outsider", groups, granted)
    for name in ("snapshot", "events", "subscription"):
        response = reads[name]
        assert response.status_code == 404, (name, response.status_code, response.text)
        assert response.json()["error"]["code"] == "NOT_FOUND", name
    batch = reads["batchGet"].json()
    assert batch["tasks"] == [] and batch["notFound"] == [granted]
    assert granted not in [t["taskId"] for t in reads["my tasks"].json()["tasks"]]
    assert granted not in [n["taskId"] for n in reads["notifications"].json()["notifications"]]
    watch = http.client.put(
        "/api/v1/me/task-watch-set",
        json={"sessionId": "sse-session-1", "taskIds": [granted]},
        headers=http.user("outsider", **groups),
    )
    assert watch.status_code == 200, watch.text
    assert watch.json()["watching"] == [] and watch.json()["notFound"] == [granted]
    session = http.client.get("/api/realtime/session", headers=http.user("outsider", **groups)).json()
    assert not [c for c in session["channels"]["shared"] if c.endswith("/project.p9") or c.endswith("/role.r1")]
