"""Broadcasts (design D8.12, D9): tenant/system channels and a user fan-out, text only."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from cent import AsyncClient, HistoryRequest

from observer.relay import OutboxRelay
from tests.e2e.test_realtime_delivery import DetailRecorder, connect_user, drain
from tests.integration.conftest import Http
from tests.support.processes import CentrifugoNode

pytestmark = pytest.mark.centrifugo


async def test_tenant_broadcast_and_user_fanout(api: Http, relay: OutboxRelay, centrifugo: CentrifugoNode) -> None:
    await drain(relay)
    client, events, _ = await connect_user(api, "user-1")
    token = api.client.post(
        "/api/realtime/subscription-token", json={"broadcast": "tenant"}, headers=api.user("user-1")
    ).json()
    tenant_events = DetailRecorder()
    sub = client.new_subscription(token["channel"], events=tenant_events, token=token["token"])
    await sub.subscribe()
    await asyncio.wait_for(tenant_events.subscribed.get(), 10)
    coordinator = api.coordinator
    sent = api.client.post(
        "/internal/v1/broadcasts",
        headers=coordinator,
        json={"broadcastId": "maintenance-1", "audience": "TENANT", "level": "WARNING", "text": "Maintenance at 22:00"},
    )
    assert sent.status_code == 201
    again = api.client.post(
        "/internal/v1/broadcasts",
        headers=coordinator,
        json={"broadcastId": "maintenance-1", "audience": "TENANT", "level": "WARNING", "text": "Maintenance at 22:00"},
    )
    assert again.status_code == 200 and again.json()["duplicate"] is True
    users = [f"user-{i}" for i in range(1, 1201)]  # three fan-out batches of at most 500 channels
    fanout = api.client.post(
        "/internal/v1/broadcasts",
        headers=coordinator,
        json={"broadcastId": "survey-7", "audience": "USERS", "text": "Tell us how we did", "userIds": users},
    )
    assert fanout.status_code == 201 and fanout.json()["messages"] == 3
    system = api.client.post(
        "/internal/v1/broadcasts",
        headers=coordinator,
        json={"broadcastId": "sys-1", "audience": "SYSTEM", "text": "hello"},
    )
    assert system.status_code == 403  # system-wide needs ADMIN
    await drain(relay)
    notice: dict[str, Any] = await asyncio.wait_for(tenant_events.publications.get(), 10)
    assert notice["kind"] == "system.notice" and notice["text"] == "Maintenance at 22:00" and notice["taskId"] is None
    _, _, personal = await events.next_publication()
    assert personal["id"] == "survey-7"
    async with AsyncClient(centrifugo.api_url, centrifugo.api_key) as cent:
        last = await cent.history(HistoryRequest(channel=f"task_user:{api.tenant}/user-1200", limit=10))
    assert [p.data["id"] for p in last.publications] == ["survey-7"]
    await client.disconnect()
