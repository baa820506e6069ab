"""Overload (design D9): a subscriber that cannot keep up is disconnected by Centrifugo's
per-connection queue limit (``client.queue_max_size``) instead of holding the node's memory; it
recovers what it missed from history on reconnect, other subscribers of the same channel are
unaffected, and the terminal state is among what both get — never dropped or coalesced."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.request
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
import websockets

from status.domain.projections import user_channel
from status.infra import tables as t
from status.infra.centrifugo import CentrifugoApi
from tests.e2e.test_realtime_delivery import drain, next_for_task
from tests.integration.conftest import Http
from tests.support.flows import activate, create_workflow, fail_task, report
from tests.support.processes import CentrifugoNode
from tests.support.realtime import connection_token, recording_client

pytestmark = pytest.mark.centrifugo

QUEUE_LIMIT = 64 * 1024  # the test node's; deploy/centrifugo/config.json ships 1 MB
FILLER = "x" * 16_000


def _slow_disconnects(node: CentrifugoNode) -> float:
    """Server-initiated disconnects with code 3008 ("slow") counted by the node."""
    with urllib.request.urlopen(f"http://127.0.0.1:{node.port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("centrifugo_client_num_server_disconnects") and 'code="3008"' in line
    )


async def _until(predicate: Any, timeout: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def _connect(url: str, token: str, subs: dict[str, Any] | None = None, **options: Any) -> tuple[Any, dict]:
    """A raw Centrifugo JSON-protocol connection (so the test decides when it reads)."""
    ws = await websockets.connect(url, **options)
    await ws.send(json.dumps({"id": 1, "connect": {"token": token, **({"subs": subs} if subs else {})}}))
    reply = json.loads(str(await ws.recv()).splitlines()[0])
    assert "connect" in reply, reply
    return ws, reply["connect"]


async def test_a_slow_subscriber_is_cut_off_and_recovers_while_others_are_unaffected(
    api: Http, e2e_engine: sa.Engine, e2e_settings: Any, centrifugo_factory: type[CentrifugoNode], make_relay: Any
) -> None:
    node = centrifugo_factory(
        api_key=e2e_settings.centrifugo_api_key,
        token_secret=e2e_settings.centrifugo_token_secret,
        client_queue_max_size=QUEUE_LIMIT,
        prometheus=True,
    ).start()
    publisher = CentrifugoApi(node.api_url, node.api_key)
    relay = make_relay(publisher, "overload-relay")
    with e2e_engine.begin() as conn:  # leases other tests' relays may have left behind
        conn.execute(sa.update(t.outbox_partition).values(relay_id=None, lease_until=None))
    await drain(relay)
    task_id = create_workflow(api)["tasks"][0]["taskId"]
    await drain(relay)
    channel = user_channel(api.tenant, "user-1")
    # The slow device of user-1 also follows a busy channel (a flood of large messages); the
    # other device follows only the user's channel. Both get the same task's changes.
    busy = f"task_detail:{api.tenant}/busy-{task_id}"
    secret = e2e_settings.centrifugo_token_secret
    fast, seen = recording_client(node.ws_url, connection_token(secret, "user-1", [channel]))
    await fast.connect()
    await seen.next_subscribed()

    tiny = socket.socket()
    tiny.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    tiny.connect(("127.0.0.1", node.port))
    slow, hello = await _connect(
        node.ws_url, connection_token(secret, "user-1", [channel, busy]), sock=tiny, max_queue=1
    )
    position = hello["subs"][channel]
    assert position.get("recoverable") is True and position.get("epoch"), hello

    # The flood: not in history (a burst of others' large messages), only to the slow device.
    flood = {"publish": {"channel": busy, "data": {"kind": "test.filler", "pad": FILLER}, "skip_history": True}}
    async with httpx.AsyncClient(headers={"X-API-Key": node.api_key}, timeout=10) as server_api:
        for _ in range(40):  # 40 × 20 × 16 kB: far past the kernel's buffers and the queue limit
            sent = await server_api.post(f"{node.api_url}/batch", json={"commands": [flood] * 20})
            assert sent.status_code == 200 and "error" not in sent.text, sent.text
    await _until(lambda: _slow_disconnects(node) >= 1, 30, "Centrifugo to cut off the slow subscriber")

    # Meanwhile the task runs and fails; the relay publishes its changes to the user's channel.
    ctx = activate(api, task_id)
    assert report(api, ctx, "STEP_STARTED", 1).status_code == 200
    assert report(api, ctx, "STEP_PROGRESS", 2, progress={"current": 1, "total": 2}).status_code == 200
    failed = fail_task(api, task_id, "PARSE_FAILED", "The file could not be read.")
    assert failed.status_code == 200
    final = failed.json()["taskVersion"]
    await drain(relay)

    # The other device got every change live, in order, ending with the failure; it was never cut off.
    versions: list[str] = []
    while not versions or versions[-1] != final:
        message = await next_for_task(seen, task_id)
        if "taskVersion" in message:  # task states (notices carry no version of their own)
            versions.append(message["taskVersion"])
    assert [int(v) for v in versions] == sorted(int(v) for v in versions)
    assert message["lifecycleStatus"] == "FAILED"
    assert seen.disconnects.empty() and _slow_disconnects(node) == 1

    # The slow device reconnects from where it was: history holds what it missed, the failure too.
    await slow.close()
    again, reply = await _connect(
        node.ws_url,
        connection_token(secret, "user-1", [channel]),
        subs={channel: {"recover": True, "epoch": position["epoch"], "offset": position.get("offset", 0)}},
    )
    recovered = reply["subs"][channel]
    assert recovered.get("recovered") is True, recovered
    mine = [
        p["data"]
        for p in recovered.get("publications", [])
        if p["data"].get("taskId") == task_id and "taskVersion" in p["data"]
    ]
    assert [m["taskVersion"] for m in mine if int(m["taskVersion"]) >= int(versions[0])] == versions
    assert mine[-1]["lifecycleStatus"] == "FAILED"
    kinds = {p["data"].get("kind") for p in recovered["publications"] if p["data"].get("taskId") == task_id}
    assert "notification.created" in kinds  # the failure's notice to the user is recovered too
    await again.close()
    await fast.disconnect()
    await publisher.aclose()
