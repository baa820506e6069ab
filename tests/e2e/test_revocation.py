"""A revoke stops live data at once, not when a token runs out (issue: hardening, item 3)."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from observer.relay import OutboxRelay
from status.infra import tables as t
from tests.e2e.test_realtime_delivery import DetailRecorder, connect_user, drain, next_for_task
from tests.integration.conftest import Http
from tests.support.flows import activate, create_workflow, report

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
