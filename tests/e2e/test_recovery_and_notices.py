"""Recovery, notices, detail limits and workflow versions through a real Centrifugo (design P20, P22, P30, P32)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from observer.relay import OutboxRelay
from tests.e2e.test_realtime_delivery import DetailRecorder, connect_user, drain, next_for_task
from tests.integration.conftest import Http
from tests.support.flows import activate, create_workflow, fail_task, report
from tests.support.processes import CentrifugoNode
from tests.support.realtime import recording_client
from tests.support.wiring import projector_for

pytestmark = pytest.mark.centrifugo


async def test_reconnect_recovers_missed_publications_from_history(api: Http, relay: OutboxRelay) -> None:
    task_id = create_workflow(api)["tasks"][0]["taskId"]
    ctx = activate(api, task_id)
    await drain(relay)
    client, events, _ = await connect_user(api, "user-1")
    await client.disconnect()
    assert report(api, ctx, "STEP_STARTED", 1).status_code == 200
    assert report(api, ctx, "STEP_PROGRESS", 2).status_code == 200
    await drain(relay)
    await client.connect()
    again = await events.next_subscribed()
    assert again.was_recovering and again.recovered
    seen = [await next_for_task(events, task_id), await next_for_task(events, task_id)]
    assert [int(p["taskVersion"]) for p in seen] == sorted(int(p["taskVersion"]) for p in seen)
    assert seen[-1]["lifecycleStatus"] == "RUNNING"
    await client.disconnect()


async def test_ac30_lost_history_means_snapshot_recovery(
    api: Http,
    e2e_service: Any,
    e2e_engine: Any,
    centrifugo_factory: type[CentrifugoNode],
    e2e_settings: Any,
    make_relay: Any,
) -> None:
    from status.infra.centrifugo import CentrifugoApi

    node = centrifugo_factory(
        api_key=e2e_settings.centrifugo_api_key, token_secret=e2e_settings.centrifugo_token_secret
    )
    node.start()
    publisher = CentrifugoApi(node.api_url, node.api_key)
    relay = make_relay(publisher, "restart-relay")
    task_id = create_workflow(api)["tasks"][0]["taskId"]
    ctx = activate(api, task_id)
    await drain(relay)
    session = api.client.get("/api/realtime/session", headers=api.user("user-1")).json()
    client, events = recording_client(node.ws_url, session["token"])
    await client.connect()
    await events.next_subscribed()
    node.stop()  # memory engine: history and epoch are gone
    assert report(api, ctx, "STEP_STARTED", 1).status_code == 200
    node.start()
    await drain(relay)
    again = await events.next_subscribed(timeout=20)
    assert again.was_recovering and not again.recovered  # the client must fall back to snapshots
    # The snapshot path: only what changed since the versions the client knew.
    snapshot = api.client.post(
        "/api/tasks/status:batchGet",
        headers=api.user("user-1"),
        json={"taskIds": [task_id], "knownVersions": {task_id: "2"}},
    ).json()
    current = api.client.get(f"/api/tasks/{task_id}", headers=api.user("user-1")).json()
    assert [s["taskVersion"] for s in snapshot["tasks"]] == [current["taskVersion"]]
    assert current["lifecycleStatus"] == "RUNNING"
    await client.disconnect()
    await publisher.aclose()


async def test_ac22_failure_notices_reach_summary_only_clients(api: Http, relay: OutboxRelay) -> None:
    task_id = create_workflow(api)["tasks"][0]["taskId"]
    ctx = activate(api, task_id)
    await drain(relay)
    client, events, _ = await connect_user(api, "user-1")  # never subscribes to details
    assert report(api, ctx, "STEP_STARTED", 1).status_code == 200
    assert (
        report(
            api,
            ctx,
            "STEP_FAILED",
            2,
            error={"category": "DEPENDENCY", "code": "OCR_DOWN", "message": "The OCR service is down"},
        ).status_code
        == 200
    )
    failed = fail_task(api, task_id, "PARSE_FAILED")
    assert failed.status_code == 200
    await drain(relay)
    notices = []
    while len(notices) < 2:
        message = await next_for_task(events, task_id)
        if message.get("notice"):
            notices.append(message["notice"])
    assert [(n["type"], n["level"]) for n in notices] == [("STEP_FAILED", "ERROR"), ("TASK_FAILED", "ERROR")]
    assert notices[0]["message"] == "The OCR service is down" and notices[0]["id"].startswith(task_id + ":")
    await client.disconnect()


async def test_ac32_detail_limit_and_independent_unsubscribe(api: Http, relay: OutboxRelay) -> None:
    created = [create_workflow(api)["tasks"][0]["taskId"] for _ in range(4)]
    contexts = {task_id: activate(api, task_id) for task_id in created}
    await drain(relay)
    client, events, session = await connect_user(api, "user-1")
    limit = session["detailSubscriptionLimit"]
    assert limit == 3
    login = api.user("user-1")  # one login session: the limit is per session
    tokens = [api.client.post("/api/realtime/subscription-token", json={"taskId": t}, headers=login) for t in created]
    assert [r.status_code for r in tokens] == [200, 200, 200, 409]
    assert tokens[3].json()["error"]["code"] == "DETAIL_SUBSCRIPTION_LIMIT"
    recorders = {}
    subs = {}
    for task_id, token in zip(created[:3], tokens[:3], strict=True):
        recorders[task_id] = DetailRecorder()
        subs[task_id] = client.new_subscription(
            token.json()["channel"], events=recorders[task_id], token=token.json()["token"]
        )
        await subs[task_id].subscribe()
        await asyncio.wait_for(recorders[task_id].subscribed.get(), 10)
    # Unsubscribe one detail and release its slot: the 4th now fits.
    gone = created[0]
    await subs[gone].unsubscribe()
    released = api.client.post(
        "/api/realtime/subscription-token:release", headers=login, json={"channel": tokens[0].json()["channel"]}
    )
    assert released.json()["released"] is True
    assert (
        api.client.post("/api/realtime/subscription-token", json={"taskId": created[3]}, headers=login).status_code
        == 200
    )
    for ctx in contexts.values():
        assert report(api, ctx, "STEP_STARTED", 1).status_code == 200
    await drain(relay)
    for task_id in created[1:3]:  # the other details keep flowing
        detail = await asyncio.wait_for(recorders[task_id].publications.get(), 10)
        assert detail["taskId"] == task_id
    assert recorders[gone].publications.empty()
    for task_id in created:  # and the summary channel carries every task
        await next_for_task(events, task_id)
    await client.disconnect()


async def test_ac20_workflow_versions_advance_on_their_own(api: Http, relay: OutboxRelay, e2e_engine: Any) -> None:
    created = create_workflow(api)
    workflow_id, task_id = created["workflowId"], created["tasks"][0]["taskId"]
    projector = projector_for(e2e_engine)
    while projector.run_once():
        pass
    before = api.client.get(f"/api/workflows/{workflow_id}", headers=api.user("user-1")).json()
    ctx = activate(api, task_id)
    for seq, kind in enumerate(["STEP_STARTED", "STEP_PROGRESS", "STEP_PROGRESS"], start=1):
        assert report(api, ctx, kind, seq).status_code == 200
    while projector.run_once():
        pass
    after = api.client.get(f"/api/workflows/{workflow_id}", headers=api.user("user-1")).json()
    task = api.client.get(f"/api/tasks/{task_id}", headers=api.user("user-1")).json()
    # The task moved several versions; the workflow one (PENDING -> RUNNING): two separate axes.
    assert int(after["workflowVersion"]) == int(before["workflowVersion"]) + 1
    assert int(task["taskVersion"]) >= int(before["workflowVersion"]) + 3
    assert after["lifecycleStatus"] == "RUNNING" and after["aggregate"]["counts"]["RUNNING"] == 1
    client, events, _ = await connect_user(api, "user-1")
    await client.disconnect()
    await drain(relay)
