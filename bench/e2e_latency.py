"""Commit → received by a real Centrifugo client (centrifuge-python), p50/p99 (design D16).

    .venv/bin/python bench/e2e_latency.py [--rate 50] [--seconds 10]

One process runs a producer thread (events committed through StatusService),
the relay loop and a client subscribed to the owner's summary channel; the
latency of each version is its arrival time minus the time its commit returned.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
import uuid
from pathlib import Path

from common import centrifugo_node, percentile, running_task, scratch_database  # type: ignore[import-not-found]

from observer.relay import OutboxRelay, RelayConfig
from status.app import commands as c
from status.bootstrap import build_service
from status.domain.auth import UserPrincipal
from status.domain.clock import utcnow
from status.domain.model import Progress
from status.infra.centrifugo import CentrifugoApi
from status.infra.db import create_engine
from status.infra.tokens import RealtimeTokens
from tests.support.realtime import recording_client
from tests.support.settings import make_settings


async def run(rate: float, seconds: float) -> None:  # noqa: C901
    with centrifugo_node() as node, scratch_database() as url:
        settings = make_settings(
            url,
            Path(tempfile.mkdtemp()),
            centrifugo_api_url=node.api_url,
            centrifugo_api_key=node.api_key,
            centrifugo_token_secret=node.token_secret,
        )
        engine = create_engine(url)
        service = build_service(settings, engine)
        service.install_default_definitions()
        task_id, claims = running_task(service, "alice", "latency")

        publisher = CentrifugoApi(node.api_url, node.api_key)
        relay = OutboxRelay(engine, publisher, "latency", RelayConfig(batch_size=500))
        while (await relay.run_once()).claimed:
            pass
        user = UserPrincipal("bench", "alice")
        token, _ = RealtimeTokens(node.token_secret, 300).connection(user, ["task_user:bench/alice"])
        client, recorder = recording_client(node.ws_url, token)
        await client.connect()
        await recorder.next_subscribed()

        committed: dict[int, float] = {}
        received: dict[int, float] = {}
        stop = threading.Event()

        def produce() -> None:
            seq, next_at = 1, time.perf_counter()
            while not stop.is_set():
                seq += 1
                result = service.report_event(
                    claims,
                    c.ReportEvent(uuid.uuid4().hex, "STEP_PROGRESS", seq, utcnow(), progress=Progress(seq % 100, 100)),
                )
                committed[int(result["taskVersion"])] = time.perf_counter()
                next_at += 1 / rate
                time.sleep(max(0.0, next_at - time.perf_counter()))

        async def consume() -> None:
            while True:
                _, _, data = await recorder.publications.get()
                if data.get("taskId") == task_id:
                    received.setdefault(int(data["taskVersion"]), time.perf_counter())

        async def relay_loop() -> None:
            while not stop.is_set():
                if not (await relay.run_once()).claimed:
                    await asyncio.sleep(0.005)

        producer = threading.Thread(target=produce)
        consumer = asyncio.create_task(consume())
        producer.start()
        relaying = asyncio.create_task(relay_loop())
        await asyncio.sleep(seconds)
        stop.set()
        producer.join()
        await relaying
        while (await relay.run_once()).claimed:
            pass
        await asyncio.sleep(0.5)
        consumer.cancel()
        lat = [(received[v] - committed[v]) * 1000 for v in committed if v in received]
        print(
            f"commit→client  {len(lat)}/{len(committed)} versions received at {len(committed) / seconds:.0f} events/s: "
            f"p50 {percentile(lat, 0.5):.0f} ms  p99 {percentile(lat, 0.99):.0f} ms   (target p99 < 50 ms)"
        )
        await client.disconnect()
        await publisher.aclose()
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=50)
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    asyncio.run(run(args.rate, args.seconds))


if __name__ == "__main__":
    main()
