"""Relay benchmark (SPEC §16): drain rate of a backlog, and commit→publish latency at a steady rate.

    .venv/bin/python bench/relay.py [--backlog 100000] [--rate 500] [--seconds 10]

Needs MariaDB (``scripts/services up mariadb``) and the Centrifugo binary; it
starts its own Centrifugo node and a throwaway database.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
import uuid
from datetime import timedelta

import sqlalchemy as sa
from common import centrifugo_node, percentile, scratch_database  # type: ignore[import-not-found]

from observer.relay import OutboxRelay, RelayConfig
from status.app import commands as c
from status.bootstrap import build_service
from status.domain.auth import Role, ServicePrincipal
from status.domain.model import Progress
from status.infra import repository as repo
from status.infra import tables as t
from status.infra.centrifugo import CentrifugoApi
from status.infra.db import create_engine
from status.infra.repository import utcnow
from tests.support.settings import make_settings


async def drain_backlog(url: str, node, rows: int, batch: int) -> None:
    engine = create_engine(url)
    now = utcnow()
    payload = {"kind": "task.summary", "schemaVersion": 1, "state": "x" * 600}
    chunk = 5000
    with engine.begin() as conn:
        for start in range(0, rows, chunk):
            repo.insert_outbox(
                conn,
                [
                    {
                        "aggregate_type": "TASK",
                        "aggregate_id": f"tsk_bench_{i % 5000}",
                        "aggregate_version": i,
                        "channel": f"task_detail:bench/tsk_{i % 5000}" if i % 2 else f"task_user:bench/u{i % 500}",
                        "projection": "TASK_DETAIL" if i % 2 else "USER_SUMMARY",
                        "must_deliver": False,
                        "payload": {**payload, "n": i},
                        "status": "PENDING",
                        "available_at": now,
                        "created_at": now,
                    }
                    for i in range(start, min(rows, start + chunk))
                ],
            )
    publisher = CentrifugoApi(node.api_url, node.api_key, timeout=30)
    relay = OutboxRelay(engine, publisher, "bench", RelayConfig(batch_size=batch, coalesce_backlog=10**9))
    started = time.perf_counter()
    published = 0
    while (result := await relay.run_once()).claimed:
        published += result.published
    elapsed = time.perf_counter() - started
    print(
        f"drain          {published} publications in {elapsed:.1f}s = {published / elapsed:,.0f} publications/s"
        f"   (target >= 5,000/s; batch {batch})"
    )
    await publisher.aclose()
    engine.dispose()


async def steady_latency(url: str, node, rate: float, seconds: float) -> None:
    settings = make_settings(url, REPO_TMP, centrifugo_api_url=node.api_url, centrifugo_api_key=node.api_key)
    engine = create_engine(url)
    service = build_service(settings, engine)
    service.install_default_definitions()
    coordinator = ServicePrincipal("bench", "bench-steady", "s", frozenset({Role.COORDINATOR}))
    producers = 8
    claims = []
    for _ in range(producers):
        created = service.create_workflow(
            coordinator,
            c.CreateWorkflow(
                client_workflow_key=f"wf-{uuid.uuid4().hex}",
                owner_id="u",
                title="bench",
                initial_tasks=(c.NewTask("t", "t", known_steps=(c.KnownStep("s", "DOCUMENT.PARSE"),)),),
            ),
        )
        ctx = service.activate_step(coordinator, c.ActivateStep(created["tasks"][0]["taskId"], "s", 1, "p"))
        claims.append(service._tokens.verify(ctx.execution_token, service.now()))
    for cl in claims:
        service.report_event(cl, c.ReportEvent(f"evt-{uuid.uuid4().hex}", "STEP_STARTED", 1, utcnow()))
    publisher = CentrifugoApi(node.api_url, node.api_key)
    relay = OutboxRelay(engine, publisher, "steady", RelayConfig(batch_size=500))
    while (await relay.run_once()).claimed:
        pass
    stop = threading.Event()
    start_id = 0
    with engine.connect() as conn:
        start_id = conn.execute(sa.select(sa.func.coalesce(sa.func.max(t.task_outbox.c.id), 0))).scalar_one()

    def produce(i: int) -> None:
        seq, interval = 1, producers / rate
        next_at = time.perf_counter()
        while not stop.is_set():
            seq += 1
            service.report_event(
                claims[i],
                c.ReportEvent(
                    f"evt-{uuid.uuid4().hex}", "STEP_PROGRESS", seq, utcnow(), progress=Progress(seq % 100, 100)
                ),
            )
            next_at += interval
            time.sleep(max(0.0, next_at - time.perf_counter()))

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(producers)]
    for th in threads:
        th.start()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not (await relay.run_once()).claimed:
            await asyncio.sleep(0.005)
    stop.set()
    for th in threads:
        th.join()
    while (await relay.run_once()).claimed:
        pass
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(t.task_outbox.c.created_at, t.task_outbox.c.published_at).where(
                t.task_outbox.c.id > start_id, t.task_outbox.c.status == "PUBLISHED"
            )
        ).all()
    lags = [(p - c0) / timedelta(milliseconds=1) for c0, p in rows]
    events = len(rows) / 2
    print(
        f"steady         {events / seconds:,.0f} events/s ({len(rows)} publications): commit→publish "
        f"p50 {percentile(lags, 0.5):.0f} ms  p99 {percentile(lags, 0.99):.0f} ms"
        "   (target p99 < 100 ms at 1,000 events/s)"
    )
    await publisher.aclose()
    engine.dispose()


REPO_TMP = None


async def main() -> None:
    global REPO_TMP
    import tempfile
    from pathlib import Path

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=500.0, help="target events/s for the latency figure")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    REPO_TMP = Path(tempfile.mkdtemp())
    with centrifugo_node() as node:
        with scratch_database() as url:
            await drain_backlog(url, node, args.backlog, args.batch)
        with scratch_database() as url:
            await steady_latency(url, node, args.rate, args.seconds)


if __name__ == "__main__":
    asyncio.run(main())
