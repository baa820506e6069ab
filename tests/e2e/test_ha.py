"""Two Centrifugo nodes on one Redis engine (design P28): a node dies, clients fail over and converge."""

from __future__ import annotations

from typing import Any

import pytest

from status.infra.centrifugo import CentrifugoApi
from tests.e2e.test_realtime_delivery import drain, next_for_task
from tests.integration.conftest import Http
from tests.support.flows import activate, create_workflow, report
from tests.support.processes import CentrifugoNode
from tests.support.proxy import FailoverProxy
from tests.support.realtime import recording_client

pytestmark = [pytest.mark.centrifugo, pytest.mark.redis]


async def test_ac28_node_dies_client_fails_over_and_converges(
    api: Http, e2e_engine: Any, e2e_settings: Any, centrifugo_factory: type[CentrifugoNode], make_relay: Any
) -> None:
    shared = {
        "api_key": e2e_settings.centrifugo_api_key,
        "token_secret": e2e_settings.centrifugo_token_secret,
        "redis_address": "redis://127.0.0.1:6379",
    }
    node_a = centrifugo_factory(**shared).start()
    node_b = centrifugo_factory(**shared).start()
    publisher = CentrifugoApi(node_a.api_url, node_a.api_key)  # the relay only talks to node A
    relay = make_relay(publisher, "ha-relay")
    balancer = await FailoverProxy([node_b.port, node_a.port]).start()  # clients land on B first
    task_id = create_workflow(api)["tasks"][0]["taskId"]
    ctx = activate(api, task_id)
    await drain(relay)
    session = api.client.get("/api/realtime/session", headers=api.user("user-1")).json()
    client, events = recording_client(f"ws://127.0.0.1:{balancer.port}/connection/websocket", session["token"])
    await client.connect()
    await events.next_subscribed()
    assert balancer.routed == [node_b.port]

    assert report(api, ctx, "STEP_STARTED", 1).status_code == 200
    await drain(relay)
    first = await next_for_task(events, task_id)  # published on A, delivered by B through Redis
    node_b.stop(kill=True)  # mid-stream
    assert report(api, ctx, "STEP_PROGRESS", 2).status_code == 200
    assert report(api, ctx, "STEP_PROGRESS", 3).status_code == 200
    await drain(relay)
    again = await events.next_subscribed(timeout=30)
    assert balancer.routed[-1] == node_a.port
    latest = int(first["taskVersion"])
    if again.recovered:  # history in Redis survived the node: the missed publications arrive
        while latest < int(api.client.get(f"/api/tasks/{task_id}", headers=api.user("user-1")).json()["taskVersion"]):
            message = await next_for_task(events, task_id)
            assert int(message["taskVersion"]) > latest  # never backwards
            latest = int(message["taskVersion"])
    else:  # otherwise the snapshot path converges
        snapshot = api.client.post(
            "/api/tasks/status:batchGet",
            headers=api.user("user-1"),
            json={"taskIds": [task_id], "knownVersions": {task_id: str(latest)}},
        ).json()
        latest = int(snapshot["tasks"][0]["taskVersion"])
    current = api.client.get(f"/api/tasks/{task_id}", headers=api.user("user-1")).json()
    assert latest == int(current["taskVersion"])
    assert again.recovered, "with a shared Redis engine the stream should be recoverable on the other node"
    await client.disconnect()
    await balancer.close()
    await publisher.aclose()
