"""Tasks granted to a PROJECT or ROLE reach its members live: every change's
summary (and notice) also goes to the group's shared channel, which the members' connections
subscribe to; a revoke sends the tombstone there, where the task was received; the fan-out of a
change is bounded."""

from __future__ import annotations

from typing import Any

import jwt

from status.app.access import MAX_GROUP_GRANTS
from status.app.service import StatusService
from tests.integration.conftest import Http
from tests.support.flows import activate, create_workflow, fail_task, report
from tests.support.outbox import publications
from tests.support.shards import engine_for


def _rows(service: StatusService, task_id: str, channel: str) -> list[dict[str, Any]]:
    with engine_for(service, task_id).connect() as conn:
        found = publications(conn, task_id, channel=channel)
    return [{"projection": p.projection, "payload": p.payload, "version": p.aggregate_version} for p in found]


def _grant(http: Http, task_id: str, kind: str, principal: str) -> Any:
    return http.client.put(f"/internal/v1/tasks/{task_id}/acl/{kind}/{principal}", json={}, headers=http.coordinator)


def test_a_project_grant_sends_every_change_and_its_notice_to_the_projects_shared_channel(
    http: Http, service: StatusService
) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    channel = f"task_shared:{http.tenant}/project.p9"
    assert _grant(http, task_id, "PROJECT", "p9").status_code == 200
    granted = _rows(service, task_id, channel)
    assert [r["payload"]["kind"] for r in granted] == ["task.summary"]  # the state at the grant
    ctx = activate(http, task_id)
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    assert fail_task(http, task_id, "PARSE_FAILED", "The file is not a contract").status_code == 200
    rows = _rows(service, task_id, channel)
    assert [r["version"] for r in rows] == sorted({r["version"] for r in rows})  # each version once, in order
    last = rows[-1]["payload"]
    assert last["lifecycleStatus"] == "FAILED" and last["notice"]["type"] == "TASK_FAILED"
    assert "steps" not in last  # a summary, as the owner's channel gets it
    owner = [r for r in _rows(service, task_id, f"task_user:{http.tenant}/user-1") if r["projection"] == "USER_SUMMARY"]
    assert owner[-1]["payload"] == last


def test_a_role_grant_and_its_revoke_reach_the_roles_channel_and_nothing_else(
    http: Http, service: StatusService
) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    channel = f"task_shared:{http.tenant}/role.reviewers"
    assert _grant(http, task_id, "ROLE", "reviewers").status_code == 200
    revoked = http.client.delete(f"/internal/v1/tasks/{task_id}/acl/ROLE/reviewers", headers=http.coordinator)
    assert revoked.status_code == 200 and revoked.json()["changed"] is True
    rows = _rows(service, task_id, channel)
    assert [r["payload"]["kind"] for r in rows] == ["task.summary", "task.removed"]
    ctx = activate(http, task_id)
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    assert len(_rows(service, task_id, channel)) == 2  # revoked: no more changes there


def test_a_revoked_project_grant_tombstones_the_shared_channel_not_the_project_broadcast(
    http: Http, service: StatusService
) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    assert _grant(http, task_id, "PROJECT", "p7").status_code == 200
    assert (
        http.client.delete(f"/internal/v1/tasks/{task_id}/acl/PROJECT/p7", headers=http.coordinator).status_code == 200
    )
    assert [r["payload"]["kind"] for r in _rows(service, task_id, f"task_shared:{http.tenant}/project.p7")][-1] == (
        "task.removed"
    )
    assert _rows(service, task_id, f"task_project:{http.tenant}/p7") == []  # it never received the task


def test_a_members_connection_subscribes_to_their_groups_shared_channels(http: Http) -> None:
    session = http.client.get(
        "/api/realtime/session", headers=http.user("member", projects=["p9", "bad/id"], roles=["reviewers"])
    ).json()
    shared = [f"task_shared:{http.tenant}/project.p9", f"task_shared:{http.tenant}/role.reviewers"]
    assert session["channels"] == {"summary": f"task_user:{http.tenant}/member", "shared": shared}
    claims = jwt.decode(session["token"], options={"verify_signature": False})
    assert claims["channels"] == [session["channels"]["summary"], *shared]  # server-side subscriptions
    # A member reads the granted task (the snapshot a removal or a recovery asks for).
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    assert _grant(http, task_id, "PROJECT", "p9").status_code == 200
    seen = http.client.post(
        "/api/tasks/status:batchGet", json={"taskIds": [task_id]}, headers=http.user("member", projects=["p9"])
    ).json()
    assert [s["taskId"] for s in seen["tasks"]] == [task_id]


def test_the_groups_a_task_is_shared_with_are_bounded(http: Http, service: StatusService) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    for n in range(MAX_GROUP_GRANTS):
        assert _grant(http, task_id, "PROJECT" if n % 2 else "ROLE", f"g{n}").status_code == 200
    refused = _grant(http, task_id, "PROJECT", "one-more")
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "VALIDATION_FAILED"
    assert _grant(http, task_id, "PROJECT", "g1").status_code == 200  # renewing one held is no new channel
    assert _grant(http, task_id, "USER", "someone").status_code == 200  # users have their own channels
    ctx = activate(http, task_id)
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    with engine_for(service, task_id).connect() as conn:
        channels = {p.channel for p in publications(conn, task_id) if p.channel.startswith("task_shared:")}
    assert len(channels) == MAX_GROUP_GRANTS
