"""A revoke stops live data at once, not when a token runs out."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa

from observer.relay import OutboxRelay
from status.infra import tables as t
from status.infra.centrifugo import CentrifugoApi
from tests.e2e.test_realtime_delivery import DetailRecorder, connect_user, drain, next_for_task
from tests.integration.conftest import Http
from tests.support.flows import activate, create_workflow, report
from tests.support.realtime import recording_client

pytestmark = pytest.mark.centrifugo


async def test_a_revoked_viewer_stops_receiving_the_task_at_once(
    api: Http, relay: OutboxRelay, e2e_engine: sa.Engine
) -> None:
    task_id = create_workflow(api)["tasks"][0]["taskId"]  # owned by user-1
    shared = api.client.put(f"/internal/v1/tasks/{task_id}/acl/USER/viewer", json={}, headers=api.coordinator)
    assert shared.status_code == 200, shared.text
    ctx = activate(api, task_id)
    await drain(relay)
    client, summaries, _ = await connect_user(api, "viewer")
    login = api.user("viewer")
    grant = api.client.post("/api/realtime/subscription-token", json={"taskId": task_id}, headers=login).json()
    detail = DetailRecorder()
    subscription = client.new_subscription(grant["channel"], events=detail, token=grant["token"])
    await subscription.subscribe()
    await asyncio.wait_for(detail.subscribed.get(), 10)
    assert report(api, ctx, "STEP_STARTED", 1).status_code == 200
    await drain(relay)
    assert (await asyncio.wait_for(detail.publications.get(), 10))["taskId"] == task_id

    revoked = api.client.delete(f"/internal/v1/tasks/{task_id}/acl/USER/viewer", headers=api.coordinator)
    assert revoked.status_code == 200 and revoked.json()["changed"] is True
    with e2e_engine.connect() as conn:  # the session's watch/grant entry for the task is gone with the revoke
        left = conn.scalar(
            sa.select(sa.func.count())
            .select_from(t.realtime_grant)
            .where(t.realtime_grant.c.user_id == "viewer", t.realtime_grant.c.channel == grant["channel"])
        )
    assert left == 0
    await drain(relay)
    ended = await asyncio.wait_for(detail.ended.get(), 10)  # Centrifugo ended the subscription server-side
    assert ended is not None
    while (await next_for_task(summaries, task_id))["kind"] != "task.removed":
        pass
    # Later changes go out on the detail channel, but not to the ended subscription.
    assert report(api, ctx, "STEP_PROGRESS", 2, progress={"current": 1, "total": 2}).status_code == 200
    await drain(relay)
    assert subscription.state.value == "unsubscribed" and detail.publications.empty()
    refused = api.client.post("/api/realtime/subscription-token", json={"taskId": task_id}, headers=login)
    assert refused.status_code == 404
    await client.disconnect()


async def test_a_project_revocation_ends_its_members_live_data(
    api: Http, relay: OutboxRelay, e2e_settings: Any
) -> None:
    task_id = create_workflow(api)["tasks"][0]["taskId"]
    shared = api.client.put(f"/internal/v1/tasks/{task_id}/acl/PROJECT/alpha", json={}, headers=api.coordinator)
    assert shared.status_code == 200, shared.text
    await drain(relay)
    member = {"Authorization": f"Bearer {api.user_tokens.issue(api.tenant, 'member', projects=['alpha'])}"}
    session = api.client.get("/api/realtime/session", headers=member).json()
    client, recorder = recording_client(session["endpoints"]["websocket"], session["token"])
    await client.connect()
    await recorder.next_subscribed()
    grant = api.client.post("/api/realtime/subscription-token", json={"taskId": task_id}, headers=member).json()
    detail = DetailRecorder()
    subscription = client.new_subscription(grant["channel"], events=detail, token=grant["token"])
    await subscription.subscribe()
    await asyncio.wait_for(detail.subscribed.get(), 10)

    revoked = api.client.delete(f"/internal/v1/tasks/{task_id}/acl/PROJECT/alpha", headers=api.coordinator)
    assert revoked.status_code == 200 and revoked.json()["changed"] is True
    await drain(relay)
    await asyncio.wait_for(detail.ended.get(), 10)  # the member's detail subscription ended server-side
    api_client = CentrifugoApi(e2e_settings.centrifugo_api_url, e2e_settings.centrifugo_api_key)
    try:
        shared_history = await api_client.history(f"task_shared:{api.tenant}/project.alpha")
        project = await api_client.history(f"task_project:{api.tenant}/alpha")
    finally:
        await api_client.aclose()
    # The tombstone goes where the members received the task: the project's shared channel, not
    # the project broadcast channel (which never carried this task).
    assert any(p.get("kind") == "task.removed" and p.get("taskId") == task_id for p in shared_history)
    assert not any(p.get("taskId") == task_id for p in project)
    refused = api.client.post("/api/realtime/subscription-token", json={"taskId": task_id}, headers=member)
    assert refused.status_code == 404
    await client.disconnect()


async def test_a_project_member_gets_the_granted_task_live_and_its_removal_on_the_shared_channel(
    api: Http, relay: OutboxRelay
) -> None:
    """Issue 29 item 4, through a real Centrifugo: the member's connection subscribes to the project's
    shared channel (server-side, from the connection token), every change of a task granted to the
    project arrives there with its notice, and the revoke's tombstone arrives where the task did."""
    task_id = create_workflow(api)["tasks"][0]["taskId"]  # owned by user-1
    session = api.client.get("/api/realtime/session", headers=api.user("member", projects=["p9"])).json()
    client, recorder = recording_client(session["endpoints"]["websocket"], session["token"])
    await client.connect()
    shared = f"task_shared:{api.tenant}/project.p9"
    subscribed = {(await recorder.next_subscribed()).channel for _ in range(2)}
    assert subscribed == {session["channels"]["summary"], shared}
    try:
        granted = api.client.put(f"/internal/v1/tasks/{task_id}/acl/PROJECT/p9", json={}, headers=api.coordinator)
        assert granted.status_code == 200, granted.text
        await drain(relay)
        channel, _, first = await recorder.next_publication()
        assert (channel, first["kind"], first["taskId"]) == (shared, "task.summary", task_id)
        ctx = activate(api, task_id)
        assert report(api, ctx, "STEP_STARTED", 1).status_code == 200
        failed = report(
            api,
            ctx,
            "STEP_FAILED",
            2,
            error={
                "category": "DEPENDENCY",
                "code": "OCR_DOWN",
                "userMessage": "The OCR service is down",
                "retryable": True,
            },
        )
        assert failed.status_code == 200, failed.text
        await drain(relay)
        noticed = None
        while noticed is None:
            channel, _, message = await recorder.next_publication()
            assert channel == shared and message["taskId"] == task_id
            noticed = message if message.get("notice") else None
        assert noticed["notice"]["type"] == "STEP_FAILED" and noticed["notice"]["level"] == "WARNING"

        revoked = api.client.delete(f"/internal/v1/tasks/{task_id}/acl/PROJECT/p9", headers=api.coordinator)
        assert revoked.status_code == 200 and revoked.json()["changed"] is True
        await drain(relay)
        while (message := (await recorder.next_publication())[2])["kind"] != "task.removed":
            pass
        assert message["taskId"] == task_id
    finally:
        await client.disconnect()
