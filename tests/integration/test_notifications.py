"""Durable notifications for offline users over HTTP (design D8.13, unread state shared
across devices): which changes create them, idempotency, the unread list, marking read, ACL."""

from __future__ import annotations

from typing import Any

from status.app.service import StatusService
from tests.integration.conftest import Http
from tests.support.flows import activate, complete_task, create_workflow, fail_task, now_iso, report
from tests.support.outbox import publications
from tests.support.shards import engine_for


def _notifications(http: Http, user: str = "user-1", **params: Any) -> dict[str, Any]:
    response = http.client.get("/api/me/notifications", params=params, headers=http.user(user))
    assert response.status_code == 200, response.text
    return dict(response.json())


def _mine(http: Http, task_id: str, user: str = "user-1", **params: Any) -> list[dict[str, Any]]:
    return [n for n in _notifications(http, user, **params)["notifications"] if n["taskId"] == task_id]


def test_terminal_changes_notify_every_viewer_once(http: Http, service: StatusService) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    grant = http.client.put(f"/internal/v1/tasks/{task_id}/acl/USER/user-2", json={}, headers=http.coordinator)
    assert grant.status_code == 200
    ctx = activate(http, task_id)
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    # A failure that will be retried is not something to tell an offline user about.
    retried = {"category": "DEPENDENCY", "code": "OCR_DOWN", "retryable": True, "userMessage": "OCR down"}
    assert report(http, ctx, "STEP_FAILED", 2, error=retried).status_code == 200
    assert _mine(http, task_id) == []
    when = now_iso()
    failed = fail_task(http, task_id, "PARSE_FAILED", "The file could not be read.", occurred_at=when)
    assert failed.status_code == 200
    version = failed.json()["taskVersion"]
    for user in ("user-1", "user-2"):
        (found,) = _mine(http, task_id, user, unread="true")
        assert found["id"] == f"{task_id}:{version}:TASK_FAILED" and found["taskVersion"] == version
        assert (found["type"], found["level"], found["read"]) == ("TASK_FAILED", "ERROR", False)
        assert found["message"] == "The file could not be read." and found["title"] == "Contract.pdf failed"
    # The same event again (a retry) is a duplicate and notifies nobody a second time.
    again = http.client.post(
        "/internal/v1/task-events",
        headers=http.coordinator,
        json={
            "eventId": f"evt-fail-{task_id}",
            "eventType": "TASK_FAILED",
            "sourceSeq": 1,
            "taskId": task_id,
            "taskAttempt": 1,
            "occurredAt": when,
            "error": {
                "category": "BUSINESS_INPUT",
                "code": "PARSE_FAILED",
                "retryable": False,
                "userMessage": "The file could not be read.",
            },
        },
    )
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert len(_mine(http, task_id)) == 1
    # Each viewer's channel gets a realtime hint in the same transaction.
    with engine_for(service, task_id).connect() as conn:
        hints = publications(conn, task_id, projection="USER_NOTIFICATION")
    assert sorted(h.channel.rsplit("/", 1)[1] for h in hints) == ["user-1", "user-2"]
    assert all(
        h.payload["kind"] == "notification.created" and h.payload["notifications"][0]["type"] == "TASK_FAILED"
        for h in hints
    )


def test_success_and_action_required_notify(http: Http) -> None:
    done = create_workflow(http)["tasks"][0]["taskId"]
    assert complete_task(http, done).status_code == 200
    assert [n["type"] for n in _mine(http, done)] == ["TASK_SUCCEEDED"]
    steps = [{"stepId": "02_parse", "operationCode": "DOCUMENT.PARSE", "failurePolicy": "WAIT_FOR_USER"}]
    waiting = create_workflow(http, knownSteps=steps)["tasks"][0]["taskId"]
    ctx = activate(http, waiting)
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    error = {"category": "BUSINESS_INPUT", "code": "PASSWORD_PROTECTED", "userMessage": "Enter the password."}
    assert report(http, ctx, "STEP_FAILED", 2, error=error).status_code == 200
    (action,) = _mine(http, waiting)
    assert action["type"] == "ACTION_REQUIRED" and action["message"] == "Enter the password."


def test_read_state_is_shared_paged_and_private(http: Http) -> None:
    tasks = [create_workflow(http)["tasks"][0]["taskId"] for _ in range(3)]
    for task_id in tasks:
        assert complete_task(http, task_id).status_code == 200
    assert _notifications(http, unread="true")["unreadCount"] == 3
    # Paging, newest first.
    first = _notifications(http, limit="2")
    assert len(first["notifications"]) == 2 and first["nextCursor"]
    rest = _notifications(http, limit="2", cursor=first["nextCursor"])
    seen = [n["taskId"] for n in first["notifications"] + rest["notifications"]]
    assert sorted(seen) == sorted(tasks) and rest["nextCursor"] is None
    # Another user can't mark this user's notifications.
    one = first["notifications"][0]["id"]
    stranger = http.client.post("/api/me/notifications:read", json={"ids": [one]}, headers=http.user("user-2"))
    assert stranger.status_code == 200 and stranger.json()["marked"] == 0
    # Marked on one device (one login) ...
    marked = http.client.post("/api/me/notifications:read", json={"ids": [one]}, headers=http.user("user-1"))
    assert marked.json() == {"marked": 1, "unreadCount": 2}
    # ... is read on another (a second, separate login of the same user).
    other_device = http.client.get("/api/me/notifications?unread=true", headers=http.user("user-1"))
    assert one not in [n["id"] for n in other_device.json()["notifications"]]
    assert other_device.json()["unreadCount"] == 2
    again = http.client.post("/api/me/notifications:read", json={"ids": [one]}, headers=http.user("user-1"))
    assert again.json()["marked"] == 0  # idempotent
    everything = http.client.post("/api/me/notifications:read", json={"all": True}, headers=http.user("user-1"))
    assert everything.json() == {"marked": 2, "unreadCount": 0}
    assert _notifications(http, unread="true")["notifications"] == []
    assert all(n["read"] and n["readAt"] for n in _notifications(http)["notifications"])


def test_revoked_tasks_hide_their_notifications_and_bad_requests_are_clear(http: Http) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    assert (
        http.client.put(f"/internal/v1/tasks/{task_id}/acl/USER/user-3", json={}, headers=http.coordinator).status_code
        == 200
    )
    assert complete_task(http, task_id).status_code == 200
    assert len(_mine(http, task_id, "user-3")) == 1
    revoke = http.client.delete(f"/internal/v1/tasks/{task_id}/acl/USER/user-3", headers=http.coordinator)
    assert revoke.status_code == 200
    assert _mine(http, task_id, "user-3") == []
    for body in ({}, {"ids": ["x"], "all": True}, {"ids": []}, {"all": False}):
        bad = http.client.post("/api/me/notifications:read", json=body, headers=http.user("user-1"))
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "VALIDATION_FAILED", body
    for params in ({"unread": "maybe"}, {"limit": "-1"}, {"cursor": "%%%"}):
        bad = http.client.get("/api/me/notifications", params=params, headers=http.user("user-1"))
        assert bad.status_code == 422, params
    assert http.client.get("/api/me/notifications").status_code == 401
