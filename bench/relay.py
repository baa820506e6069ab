"""Relay benchmark (design D16): drain rate of a backlog, and commit→publish latency at a steady rate.

    .venv/bin/python bench/relay.py [--backlog 100000] [--rate 1000] [--seconds 10] [--producers 2]

The steady figure has producers in their own processes (direct service calls,
a few events per transaction) and the relay woken as the observer is: by a
datagram after each commit, addressed through the database.

Needs MariaDB (``scripts/services up mariadb``) and the Centrifugo binary; it
starts its own Centrifugo node and a throwaway database.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import sqlalchemy as sa
from common import centrifugo_node, percentile, process_tree_cpu, scratch_database  # type: ignore[import-not-found]

from observer.relay import OutboxRelay, RelayConfig
from status.app import commands as c
from status.bootstrap import build_service
from status.domain.auth import Role, ServicePrincipal
from status.domain.clock import utcnow
from status.domain.messages import Aggregate, Message
from status.domain.model import Progress
from status.infra import tables as t
from status.infra.centrifugo import CentrifugoApi
from status.infra.db import create_engine
from status.infra.outbox_rows import stored_columns, unpack
from status.infra.stores import sql
from status.infra.uow import SqlDatabase
from status.infra.wakeup import OutboxSignal, WakeReceiver
from tests.support.settings import make_settings


def _mariadb_pid() -> int | None:
    """The local MariaDB/MySQL server's pid, when it runs on this machine."""
    for stat in Path("/proc").glob("[0-9]*/comm"):
        try:
            if stat.read_text().strip() in ("mariadbd", "mysqld"):
                return int(stat.parent.name)
        except OSError:
            continue
    return None


async def drain_backlog(url: str, node, rows: int, batch: int) -> None:
    engine = create_engine(url)
    now = utcnow()
    payload = {"kind": "task.summary", "schemaVersion": 1, "state": "x" * 600}
    chunk = 5000
    with engine.begin() as conn:
        for start in range(0, rows, chunk):
            sql.insert_outbox(
                conn,
                [
                    # one message per row, as a change seen on one channel
                    Message(
                        Aggregate("TASK", f"tsk_bench_{i % 5000}", i, f"task_user:bench/u{i % 500}"),
                        (f"task_detail:bench/tsk_{i % 5000}" if i % 2 else f"task_user:bench/u{i % 500}",),
                        "TASK_DETAIL" if i % 2 else "USER_SUMMARY",
                        {**payload, "n": i},
                        False,
                        None,
                        now,
                    )
                    for i in range(start, min(rows, start + chunk))
                ],
            )
    publisher = CentrifugoApi(node.api_url, node.api_key, timeout=30)
    relay = OutboxRelay(engine, publisher, "bench", RelayConfig(batch_size=batch, coalesce_backlog=10**9))
    mariadb = _mariadb_pid()
    before = {"relay": time.process_time(), "centrifugo": process_tree_cpu(node.process.pid)}
    if mariadb:
        before["database"] = process_tree_cpu(mariadb)
    started = time.perf_counter()
    published = 0
    while (result := await relay.run_once(wait_for_mark=False)).claimed:
        published += result.published
    elapsed = time.perf_counter() - started
    spent = {
        "relay": time.process_time() - before["relay"],
        "centrifugo": process_tree_cpu(node.process.pid) - before["centrifugo"],
    }
    if mariadb:
        spent["database"] = process_tree_cpu(mariadb) - before["database"]
    print(
        f"drain          {published} publications in {elapsed:.1f}s = {published / elapsed:,.0f} publications/s"
        f"   (target >= 15,000/s; batch {batch})"
    )
    print(
        "drain CPU      "
        + ", ".join(f"{name} {cpu:.1f} s ({cpu / elapsed:.0%} of a core)" for name, cpu in spent.items())
        + f"; {sum(spent.values()) / max(1, published) * 1e6:.0f} µs per publication in all"
    )
    await publisher.aclose()
    engine.dispose()


def produce(
    settings: Any, tokens: list[str], rate: float, seconds: float, batch: int, ready: Any, direct: bool
) -> None:
    """A producer process: progress events for its tasks at ``rate`` events/s, ``batch`` per transaction.

    ``direct``: write what such events commit to the outbox (a summary and a detail row
    each, the tasks' own payloads) without the event path, to load the relay alone.
    """
    engine = create_engine(settings.database_url)
    service = build_service(settings, engine)
    claims = [service._tokens.verify(token, service.now()) for token in tokens]
    seq = {i: 1 for i in range(len(claims))}
    if direct:
        _produce_rows(engine, [claim.task_id for claim in claims], rate, seconds, batch, ready)
        engine.dispose()
        return
    ready.wait()
    interval, next_at = batch / rate, time.perf_counter()
    end = time.perf_counter() + seconds
    turn = 0
    while time.perf_counter() < end:
        i = turn % len(claims)
        turn += 1
        events = []
        for _ in range(batch):
            seq[i] += 1
            progress = Progress(seq[i] % 1000, 1000)
            events.append(
                c.ReportEvent(f"evt-{uuid.uuid4().hex}", "STEP_PROGRESS", seq[i], utcnow(), progress=progress)
            )
        service.report_events(claims[i], events)
        next_at += interval
        time.sleep(max(0.0, next_at - time.perf_counter()))
    engine.dispose()


def _produce_rows(engine: Any, task_ids: list[str], rate: float, seconds: float, batch: int, ready: Any) -> None:
    database = SqlDatabase(engine, [OutboxSignal(engine).committed])
    ot = t.task_outbox
    with engine.connect() as conn:
        templates = {
            r.aggregate_id: [
                (m.projection, m.channels, orjson.loads(m.data))
                for m in unpack(r.projection, r.channel, r.payload, r.payload_zstd)
                if m.projection in ("USER_SUMMARY", "TASK_DETAIL")
            ]
            for r in conn.execute(
                sa.select(
                    ot.c.aggregate_id,
                    *stored_columns(ot),
                )
                .where(ot.c.aggregate_id.in_(task_ids))
                .order_by(ot.c.id)
            )
        }
    version = 1_000_000
    ready.wait()
    interval, next_at = batch / rate, time.perf_counter()
    end = time.perf_counter() + seconds
    turn = 0
    while time.perf_counter() < end:
        task_id = task_ids[turn % len(task_ids)]
        turn += 1
        now = utcnow()
        rows = []
        for _ in range(batch):
            version += 1
            for projection, channels, data in templates[task_id]:
                home = templates[task_id][0][1][0]
                rows.append(
                    Message(Aggregate("TASK", task_id, version, home), channels, projection, data, False, None, now)
                )
        with database.unit_of_work() as uow:
            uow.log.insert_outbox(rows)
            uow.commit()  # wakes the relay, as the event path's commit does
        next_at += interval
        time.sleep(max(0.0, next_at - time.perf_counter()))


async def steady_latency(
    url: str, node: Any, rate: float, seconds: float, producers: int, batch: int, direct: bool = False
) -> None:
    settings = make_settings(url, REPO_TMP, centrifugo_api_url=node.api_url, centrifugo_api_key=node.api_key)
    engine = create_engine(url)
    service = build_service(settings, engine)
    service.install_default_definitions()
    coordinator = ServicePrincipal("bench", "bench-steady", "s", frozenset({Role.COORDINATOR}))
    tokens: list[list[str]] = [[] for _ in range(producers)]
    for n in range(producers * 4):  # four tasks per producer, one user watching all of them
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
        claim = service._tokens.verify(ctx.execution_token, service.now())
        service.report_event(claim, c.ReportEvent(f"evt-{uuid.uuid4().hex}", "STEP_STARTED", 1, utcnow()))
        tokens[n % producers].append(ctx.execution_token)

    # The relay as the observer runs it: woken by each commit (UDP from the producer
    # processes, addressed through the database), safety poll of 1 s.
    publisher = CentrifugoApi(node.api_url, node.api_key)
    relay = OutboxRelay(engine, publisher, "steady")
    receiver = WakeReceiver(None)  # the producers are other processes: their commits wake it by datagram
    relay.leases.wake_address = await receiver.start()
    wake = receiver.event()
    while (await relay.run_once(wait_for_mark=False)).claimed:
        pass
    with engine.connect() as conn:
        start_id = conn.execute(sa.select(sa.func.coalesce(sa.func.max(t.task_outbox.c.id), 0))).scalar_one()
        logged_before = _logged(conn)

    spawn = multiprocessing.get_context("spawn")
    ready = spawn.Event()
    workers = [
        spawn.Process(target=produce, args=(settings, tokens[i], rate / producers, seconds, batch, ready, direct))
        for i in range(producers)
    ]
    for worker in workers:
        worker.start()
    await asyncio.sleep(3)  # producer processes import and connect before the clock starts
    relay_cpu = time.process_time()
    ready.set()
    deadline = time.monotonic() + seconds + 1
    passes = 0
    while time.monotonic() < deadline or any(w.is_alive() for w in workers):
        wake.clear()
        passes += 1
        if not (await relay.run_once(wait_for_mark=False)).claimed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), 1.0)
    while (await relay.run_once(wait_for_mark=False)).claimed:
        pass
    relay_cpu = time.process_time() - relay_cpu
    receiver.close()
    relay.release_partitions()
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(t.task_outbox.c.created_at, t.task_outbox.c.published_at, *stored_columns(t.task_outbox)).where(
                t.task_outbox.c.id > start_id, t.task_outbox.c.status == "PUBLISHED"
            )
        ).all()
        logged = _logged(conn) - logged_before
    lags = [(row[1] - row[0]) / timedelta(milliseconds=1) for row in rows]
    # A change is one outbox row carrying its messages (one publication each); on the event path
    # an event a transaction changed again writes none of its own, so events are counted in the
    # event log; written directly, each row is one change.
    publications = sum(len(unpack(*row[2:])) for row in rows)
    events = len(rows) if direct else logged
    how = "outbox rows written directly (the relay alone)" if direct else "through the event path"
    print(
        f"steady, {how}:\n"
        f"               {events / seconds:,.0f} events/s reached of {rate:,.0f} asked ({len(rows)} outbox rows,"
        f" {publications} publications, {producers} producer processes, {batch} events per transaction):"
        f" commit→publish p50 {percentile(lags, 0.5):.0f} ms  p99 {percentile(lags, 0.99):.0f} ms"
        "   (target p99 < 25 ms at 1,000 events/s)"
    )
    print(
        f"relay CPU      {relay_cpu:.2f} s = {relay_cpu / max(1, publications) * 1e6:.0f} µs per publication,"
        f" {passes} passes"
    )
    await publisher.aclose()
    engine.dispose()


def _logged(conn: sa.Connection) -> int:
    """Events in the steady phase's tenant's log."""
    log = t.task_event_log
    return int(conn.execute(sa.select(sa.func.count()).where(log.c.tenant_id == "bench-steady")).scalar_one())


async def main() -> None:
    global REPO_TMP
    import tempfile
    from pathlib import Path

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=1000.0, help="target events/s for the latency figure")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--producers", type=int, default=2, help="producer processes")
    parser.add_argument("--events-per-transaction", type=int, default=5)
    args = parser.parse_args()
    REPO_TMP = Path(tempfile.mkdtemp())
    with centrifugo_node() as node:
        with scratch_database() as url:
            await drain_backlog(url, node, args.backlog, args.batch)
        for direct in (False, True):
            with scratch_database() as url:
                await steady_latency(
                    url, node, args.rate, args.seconds, args.producers, args.events_per_transaction, direct
                )


if __name__ == "__main__":
    asyncio.run(main())
