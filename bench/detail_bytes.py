"""Bytes on the wire per detail change, with and without fossil delta compression.

    .venv/bin/python bench/detail_bytes.py [--steps 50] [--changes 40]

A task with ``--steps`` known steps has one running step that reports
``--changes`` progress ticks; every tick publishes the task's whole detail
state.  A WebSocket client follows the detail channel through a byte-counting
TCP proxy, once plainly and once with ``delta: fossil`` negotiated; the
figure is the bytes Centrifugo sent to the client per change (frames,
protocol envelope and payload).  Needs MariaDB and the Centrifugo binary.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from centrifuge import Client, DeltaType, PublicationContext, SubscribedContext, SubscriptionEventHandler
from common import centrifugo_node, scratch_database  # type: ignore[import-not-found]

from observer.relay import OutboxRelay
from status.app import commands as c
from status.bootstrap import build_service
from status.domain.auth import Role, ServicePrincipal, UserPrincipal
from status.domain.clock import utcnow
from status.domain.model import Progress
from status.infra.centrifugo import CentrifugoApi
from status.infra.db import create_engine
from status.infra.tokens import RealtimeTokens
from tests.support.settings import make_settings


class CountingProxy:
    """Forwards one TCP connection to Centrifugo and counts the bytes sent to the client."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.to_client = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._connections: list[asyncio.Task[Any]] = []

    async def start(self) -> CountingProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        current = asyncio.current_task()
        if current is not None:
            self._connections.append(current)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, counted: bool) -> None:
            try:
                while data := await src.read(65536):
                    if counted:
                        self.to_client += len(data)
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer, False), pipe(up_reader, writer, True))

    async def close(self) -> None:
        """After the client disconnected: both directions end on their own."""
        if self._server is not None:
            self._server.close()
        await asyncio.wait_for(asyncio.gather(*self._connections, return_exceptions=True), 10)


class Detail(SubscriptionEventHandler):
    def __init__(self) -> None:
        self.subscribed = asyncio.Event()
        self.publications: asyncio.Queue[Any] = asyncio.Queue()

    async def on_subscribed(self, ctx: SubscribedContext) -> None:
        self.subscribed.set()

    async def on_publication(self, ctx: PublicationContext) -> None:
        self.publications.put_nowait(ctx.pub.data)


async def measure(url: str, node: Any, steps: int, changes: int, delta: DeltaType | None) -> tuple[float, int]:
    settings = make_settings(
        url, Path(tempfile.mkdtemp()), centrifugo_api_url=node.api_url, centrifugo_api_key=node.api_key
    )
    engine = create_engine(url)
    service = build_service(settings, engine)
    service.install_default_definitions()
    coordinator = ServicePrincipal("bench", "bench-bytes", "s", frozenset({Role.COORDINATOR}))
    known = tuple(c.KnownStep(f"s{i:02d}", "DOCUMENT.PARSE") for i in range(steps))
    created = service.create_workflow(
        coordinator,
        c.CreateWorkflow(
            client_workflow_key=f"wf-{uuid.uuid4().hex}",
            owner_id="viewer",
            title="fifty steps",
            initial_tasks=(c.NewTask("t", "A long task", known_steps=known),),
        ),
    )
    task_id = created["tasks"][0]["taskId"]
    # The viewer has the detail open (a detail grant): its changes publish their detail message.
    service.watching.watch([task_id], service.now() + timedelta(minutes=10))
    ctx = service.activate_step(coordinator, c.ActivateStep(task_id, "s00", 1, "p"))
    claim = service._tokens.verify(ctx.execution_token, service.now())
    service.report_event(claim, c.ReportEvent(f"evt-{uuid.uuid4().hex}", "STEP_STARTED", 1, utcnow()))
    publisher = CentrifugoApi(node.api_url, node.api_key)
    relay = OutboxRelay(engine, publisher, f"bytes-{uuid.uuid4().hex[:6]}")
    while (await relay.run_once()).claimed:
        pass

    proxy = await CountingProxy(node.port).start()
    tokens = RealtimeTokens(node.token_secret, 600)
    user = UserPrincipal("bench-bytes", "viewer")
    channel = f"task_detail:bench-bytes/{task_id}"
    client = Client(f"ws://127.0.0.1:{proxy.port}/connection/websocket", token=tokens.connection(user, [])[0])
    handler = Detail()
    subscription = client.new_subscription(
        channel, events=handler, token=tokens.subscription(user, channel)[0], delta=delta
    )
    await client.connect()
    await subscription.subscribe()
    await asyncio.wait_for(handler.subscribed.wait(), 10)
    before = proxy.to_client
    for seq in range(2, 2 + changes):
        service.report_event(
            claim,
            c.ReportEvent(f"evt-{uuid.uuid4().hex}", "STEP_PROGRESS", seq, utcnow(), progress=Progress(seq, 1000)),
        )
        while (await relay.run_once()).claimed:
            pass
    received = 0
    last: Any = None
    while received < changes:
        last = await asyncio.wait_for(handler.publications.get(), 10)
        received += 1
    await asyncio.sleep(0.2)  # let the last frames' bytes be counted by the proxy
    sent = proxy.to_client - before
    assert last is not None and last["state"]["steps"], "the client rebuilt a full detail state"
    payload = len(str(last))
    await client.disconnect()
    await proxy.close()
    relay.release_partitions()
    await publisher.aclose()
    engine.dispose()
    return sent / changes, payload


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--changes", type=int, default=40)
    args = parser.parse_args()
    with centrifugo_node() as node:
        with scratch_database() as url:
            plain, size = await measure(url, node, args.steps, args.changes, None)
        with scratch_database() as url:
            fossil, _ = await measure(url, node, args.steps, args.changes, DeltaType.FOSSIL)
    print(f"detail state of a {args.steps}-step task: ~{size:,} characters")
    print(f"bytes on the wire per progress change, full payloads : {plain:8,.0f}")
    print(f"bytes on the wire per progress change, fossil deltas : {fossil:8,.0f}")
    print(f"ratio full / delta: {plain / max(1.0, fossil):.1f}x")


if __name__ == "__main__":
    asyncio.run(main())
