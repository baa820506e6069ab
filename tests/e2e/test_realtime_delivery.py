"""Committed facts reach the right users through a real Centrifugo, and only them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from centrifuge import (
    Client,
    PublicationContext,
    SubscribedContext,
    SubscriptionErrorContext,
    SubscriptionEventHandler,
    UnsubscribedContext,
)

from observer.relay import OutboxRelay
from tests.integration.conftest import Http
from tests.support.flows import activate, create_workflow, report
from tests.support.realtime import recording_client

pytestmark = pytest.mark.centrifugo


class DetailRecorder(SubscriptionEventHandler):
    def __init__(self) -> None:
        self.publications: asyncio.Queue[Any] = asyncio.Queue()
        self.subscribed: asyncio.Queue[SubscribedContext] = asyncio.Queue()
        self.ended: asyncio.Queue[UnsubscribedContext | SubscriptionErrorContext] = asyncio.Queue()

    async def on_unsubscribed(self, ctx: UnsubscribedContext) -> None:
        self.ended.put_nowait(ctx)

    async def on_error(self, ctx: SubscriptionErrorContext) -> None:
        self.ended.put_nowait(ctx)

    async def on_subscribed(self, ctx: SubscribedContext) -> None:
        self.subscribed.put_nowait(ctx)

    async def on_publication(self, ctx: PublicationContext) -> None:
        self.publications.put_nowait(ctx.pub.data)


async def drain(relay: OutboxRelay) -> int:
    """Run relay passes until the outbox has nothing due (the relay loop, stepped by hand)."""
    total = 0
    while (result := await relay.run_once()).claimed:
        total += result.published
    return total


async def connect_user(api: Http, user: str) -> tuple[Client, Any, dict[str, Any]]:
    session = api.client.get("/api/realtime/session", headers=api.user(user)).json()
    client, recorder = recording_client(session["endpoints"]["websocket"], session["token"])
    await client.connect()
    subscribed = await recorder.next_subscribed()
    assert subscribed.channel == session["channels"]["summary"]
    return client, recorder, session


async def next_for_task(recorder: Any, task_id: str, timeout: float = 10) -> dict[str, Any]:
    while True:
        _, _, data = await recorder.next_publication(timeout)
        if data.get("taskId") == task_id:
            return dict(data)


async def test_committed_event_reaches_summary_and_detail_with_full_state(api: Http, relay: OutboxRelay) -> None:
    created = create_workflow(api)
    task_id = created["tasks"][0]["taskId"]
    await drain(relay)
    alice, alice_events, _ = await connect_user(api, "user-1")
    ctx = activate(api, task_id)
    assert report(api, ctx, "STEP_STARTED", 1).status_code == 200
    await drain(relay)
    summary = await next_for_task(alice_events, task_id)
    while summary["lifecycleStatus"] != "RUNNING":
        summary = await next_for_task(alice_events, task_id)
    assert summary["kind"] == "task.summary" and summary["workflowId"] == created["workflowId"]
    assert int(summary["taskVersion"]) >= 3 and "steps" not in summary

    token = api.client.post("/api/realtime/subscription-token", json={"taskId": task_id}, headers=api.user("user-1"))
    assert token.status_code == 200, token.text
    detail_events = DetailRecorder()
    sub = alice.new_subscription(token.json()["channel"], events=detail_events, token=token.json()["token"])
    await sub.subscribe()
    await asyncio.wait_for(detail_events.subscribed.get(), 10)
    assert report(api, ctx, "STEP_PROGRESS", 2, progress={"current": 4, "total": 10, "unit": "page"}).status_code == 200
    await drain(relay)
    detail = await asyncio.wait_for(detail_events.publications.get(), 10)
    assert detail["kind"] == "task.detail" and detail["triggerEvent"]["eventType"] == "STEP_PROGRESS"
    parse = next(s for s in detail["state"]["steps"] if s["stepId"] == "02_parse")
    assert parse["progress"]["current"] == 4 and detail["taskVersion"] == detail["state"]["taskVersion"]
    await alice.disconnect()


async def test_other_users_receive_nothing_and_get_no_tokens(api: Http, relay: OutboxRelay) -> None:
    task_id = create_workflow(api)["tasks"][0]["taskId"]
    bob, bob_events, bob_session = await connect_user(api, "user-2")
    ctx = activate(api, task_id)
    assert report(api, ctx, "STEP_STARTED", 1).status_code == 200
    await drain(relay)
    with pytest.raises(TimeoutError):
        await next_for_task(bob_events, task_id, timeout=1.0)
    # No token for someone else's task, other tenant, or a made-up channel.
    assert (
        api.client.post(
            "/api/realtime/subscription-token", json={"taskId": task_id}, headers=api.user("user-2")
        ).status_code
        == 404
    )
    assert (
        api.client.post(
            "/api/realtime/subscription-token", json={"taskId": task_id}, headers=api.user("user-1", tenant="other")
        ).status_code
        == 404
    )
    assert (
        api.client.post(
            "/api/realtime/subscription-token",
            json={"channel": f"task_detail:{api.tenant}/{task_id}"},
            headers=api.user("user-2"),
        ).status_code
        == 422
    )
    # Subscribing without a token (allow_subscribe_for_client is off) or with a token for another
    # subject fails in Centrifugo itself.
    forged_channel = f"task_detail:{api.tenant}/{task_id}"
    events = DetailRecorder()
    sub = bob.new_subscription(forged_channel, events=events)
    await sub.subscribe()
    refused = await asyncio.wait_for(events.ended.get(), 10)
    assert refused.code == 103 and events.subscribed.empty()  # 103: permission denied
    # A valid token for alice's subject is useless on bob's connection: Centrifugo
    # closes the connection ("invalid token", 3500) rather than subscribing.
    alice_token = api.client.post(
        "/api/realtime/subscription-token", json={"taskId": task_id}, headers=api.user("user-1")
    ).json()["token"]
    stolen = DetailRecorder()
    bob.remove_subscription(sub)
    sub2 = bob.new_subscription(forged_channel, events=stolen, token=alice_token)
    await sub2.subscribe()
    closed = await bob_events.next_disconnect()
    assert closed.code == 3500 and stolen.subscribed.empty()
    assert "token" in bob_session and bob_session["channels"]["summary"].endswith("/user-2")


async def test_ac26_grant_publishes_the_summary_and_revoke_a_removal(api: Http, relay: OutboxRelay) -> None:
    task_id = create_workflow(api)["tasks"][0]["taskId"]
    await drain(relay)
    carol, carol_events, _ = await connect_user(api, "user-3")
    granted = api.client.put(f"/internal/v1/tasks/{task_id}/acl/USER/user-3", json={}, headers=api.coordinator)
    assert granted.status_code == 200
    await drain(relay)
    summary = await next_for_task(carol_events, task_id)
    assert summary["kind"] == "task.summary" and summary["taskVersion"] == granted.json()["taskVersion"]
    login = api.user("user-3")
    assert (
        api.client.post("/api/realtime/subscription-token", json={"taskId": task_id}, headers=login).status_code == 200
    )
    revoked = api.client.delete(f"/internal/v1/tasks/{task_id}/acl/USER/user-3", headers=api.coordinator)
    assert revoked.status_code == 200
    await drain(relay)
    removal = await next_for_task(carol_events, task_id)
    assert removal["kind"] == "task.removed" and removal["taskVersion"] == revoked.json()["taskVersion"]
    # And the fact side refuses further reads and tokens.
    assert api.client.get(f"/api/tasks/{task_id}", headers=login).status_code == 404
    assert (
        api.client.post("/api/realtime/subscription-token", json={"taskId": task_id}, headers=login).status_code == 404
    )
    await carol.disconnect()
