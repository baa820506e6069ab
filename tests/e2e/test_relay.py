"""Outbox relay against a real Centrifugo: at-least-once, no double claims, DEAD, backoff,
coalescing (design D8.14, P29)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
import time
import uuid
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import structlog
from cent import AsyncClient, HistoryRequest

from observer import metrics
from observer.relay import OutboxRelay, RelayConfig
from status.domain.clock import utcnow
from status.infra import tables as t
from status.infra.centrifugo import CentrifugoApi
from status.infra.outbox_rows import OUTBOX_PARTITIONS
from status.infra.stores import sql
from tests.integration.conftest import Http
from tests.support.flows import activate, create_workflow, follow_detail, report
from tests.support.outbox import message, publications
from tests.support.processes import CentrifugoNode, free_port, missing_service

pytestmark = pytest.mark.centrifugo
ot = t.task_outbox


def _rows(engine: sa.Engine, task_id: str) -> list[sa.RowMapping]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(ot).where(ot.c.aggregate_id == task_id).order_by(ot.c.id)).mappings())


def _detail_versions(engine: sa.Engine, task_id: str) -> list[int]:
    with engine.connect() as conn:
        return sorted(p.aggregate_version for p in publications(conn, task_id, projection="TASK_DETAIL"))


def _task_with_events(api: Http, progress_events: int = 2, owner: str = "user-1") -> tuple[str, dict]:
    task_id = create_workflow(api, owner)["tasks"][0]["taskId"]
    follow_detail(api, task_id, owner)  # its detail channel followed: every change publishes there too
    ctx = activate(api, task_id)
    assert report(api, ctx, "STEP_STARTED", 1).status_code == 200
    for seq in range(2, 2 + progress_events):
        assert report(api, ctx, "STEP_PROGRESS", seq, progress={"current": seq, "total": 100}).status_code == 200
    return task_id, ctx


def _later(relay: OutboxRelay, seconds: float) -> OutboxRelay:
    """The same relay type seen from a clock ahead (lease expiry, backoff) without sleeping."""
    return OutboxRelay(
        relay.engine,
        relay.publisher,
        f"relay-{uuid.uuid4().hex[:6]}",
        relay.config,
        clock=lambda: utcnow() + timedelta(seconds=seconds),
    )


def _pending_partitions(engine: sa.Engine) -> dict[int, int]:
    """Each pending row's partition, by row id."""
    with engine.connect() as conn:
        rows = conn.execute(sa.select(ot.c.id, ot.c.partition_no).where(ot.c.status == "PENDING")).all()
    return {row.id: row.partition_no for row in rows}


async def _history(node_api: str, key: str, channel: str) -> list[dict]:
    async with AsyncClient(node_api, key) as api:
        result = await api.history(HistoryRequest(channel=channel, limit=100))
    return [p.data for p in result.publications]


async def _drain(relay: OutboxRelay) -> None:
    while (await relay.run_once()).claimed:
        pass


async def test_ac29_relay_killed_between_publish_and_mark_redelivers_without_regress(
    api: Http, relay: OutboxRelay, centrifugo: CentrifugoNode, e2e_engine: sa.Engine
) -> None:
    await _drain(relay)
    task_id, _ = _task_with_events(api)
    rows = relay.claim()
    mine = [r for r in rows if r.aggregate_id == task_id]
    assert mine and all(r.aggregate_id for r in rows)
    # Publish, then "crash" before marking: nothing says the rows went out.
    await relay.publisher.publish_batch(relay.publications(rows))
    assert {r["status"] for r in _rows(e2e_engine, task_id)} == {"PENDING"}
    # Another relay takes the partitions once the dead one's lease has run out.
    successor = _later(relay, relay.config.partition_lease_seconds + 1)
    await _drain(successor)
    successor.release_partitions()
    assert {r["status"] for r in _rows(e2e_engine, task_id)} == {"PUBLISHED"}
    detail = f"task_detail:{api.tenant}/{task_id}"
    versions = [int(p["taskVersion"]) for p in await _history(centrifugo.api_url, centrifugo.api_key, detail)]
    # At least once, never backwards, and the repeats dropped by Centrifugo (same publish keys).
    assert versions == _detail_versions(e2e_engine, task_id)


async def test_two_relays_hold_disjoint_partitions_and_never_claim_the_same_row(  # noqa: C901
    api: Http, relay: OutboxRelay, e2e_engine: sa.Engine
) -> None:
    await _drain(relay)
    relay.release_partitions()
    for _ in range(3):
        _task_with_events(api, progress_events=5)
    # A row's partition is its owner's summary channel's hash: tasks of more owners until every
    # partition has due rows, so whichever half each relay ends up with, both have something to claim.
    for n in range(200):
        if len(set(_pending_partitions(e2e_engine).values())) == OUTBOX_PARTITIONS:
            break
        _task_with_events(api, progress_events=0, owner=f"owner-{n}")
    assert len(set(_pending_partitions(e2e_engine).values())) == OUTBOX_PARTITIONS
    config = RelayConfig(batch_size=7, partition_lease_seconds=5.0, partition_renew_seconds=0.0)
    relays = [OutboxRelay(e2e_engine, relay.publisher, f"r{i}", config) for i in range(2)]
    barrier = threading.Barrier(2)
    held: list[list[tuple[int, ...]]] = [[], []]
    claimed: list[list[set[int]]] = [[], []]

    def work(i: int) -> None:
        for _ in range(6):
            barrier.wait()  # both renew and claim at the same moment, round after round
            held[i].append(relays[i].partitions())
            claimed[i].append({r.id for r in relays[i].claim()})

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for first, second in zip(*held, strict=True):
        assert not set(first) & set(second)  # never the same partition at the same time
    for first_rows, second_rows in zip(*claimed, strict=True):
        assert not first_rows & second_rows  # so never the same row
    assert len(held[0][-1]) == len(held[1][-1]) == OUTBOX_PARTITIONS // 2  # once both are known, a fair share each
    pending = _pending_partitions(e2e_engine)
    for i in range(2):  # each claims what its partitions hold, and only that
        assert claimed[i][-1]
        assert {pending[row_id] for row_id in claimed[i][-1]} <= set(held[i][-1])
    for r in relays:
        r.release_partitions()
    await _drain(relay)


async def test_permanent_errors_go_dead_and_stay_dead(relay: OutboxRelay, e2e_engine: sa.Engine) -> None:
    await _drain(relay)
    now = utcnow()
    with e2e_engine.begin() as conn:
        bad_task = f"tsk_bad_{uuid.uuid4().hex}"
        sql.insert_outbox(
            conn, [message(bad_task, 1, "no_such_namespace:x", payload={"kind": "task.summary"}, created_at=now)]
        )
        bad_id = conn.scalar(sa.select(ot.c.id).where(ot.c.aggregate_id == bad_task))
    result = await relay.run_once()
    assert result.dead == 1
    with e2e_engine.connect() as conn:
        row = conn.execute(sa.select(ot).where(ot.c.id == bad_id)).mappings().one()
    assert row["status"] == "DEAD" and "102" in row["last_error"] and row["attempts"] == 1
    assert (await relay.run_once()).claimed == 0  # never hot-loops


async def test_an_unreachable_centrifugo_holds_rows_in_order_and_nothing_is_lost(
    api: Http, relay: OutboxRelay, e2e_engine: sa.Engine, centrifugo_factory: type[CentrifugoNode]
) -> None:
    await _drain(relay)
    relay.release_partitions()  # the flaky relay below does the work
    node = centrifugo_factory().start()
    down_publisher = CentrifugoApi(node.api_url, node.api_key, timeout=2)
    flaky = OutboxRelay(e2e_engine, down_publisher, "flaky", RelayConfig(batch_size=1000))
    node.stop()
    task_id, _ = _task_with_events(api)
    result = await flaky.run_once()
    assert result.held >= 1 and result.published == 0 and result.dead == 0
    rows = _rows(e2e_engine, task_id)
    # Not the rows' fault: no attempt counted, no back-off of their own (that would reorder them).
    assert {r["status"] for r in rows} == {"PENDING"}
    assert all(r["attempts"] == 0 and r["last_error"] is None and r["available_at"] <= utcnow() for r in rows)
    assert (await flaky.run_once()).claimed == 0  # the relay backs off as a whole, not hot-looping
    node.start()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (await flaky.run_once()).published == 0:
        await asyncio.sleep(0.1)  # until the relay's own back-off (at most 5 s) has passed
    await _drain(flaky)
    flaky.release_partitions()
    assert {r["status"] for r in _rows(e2e_engine, task_id)} == {"PUBLISHED"}
    detail = f"task_detail:{api.tenant}/{task_id}"
    assert [int(p["taskVersion"]) for p in await _history(node.api_url, node.api_key, detail)] == _detail_versions(
        e2e_engine, task_id
    )
    await down_publisher.aclose()


def _refused_for_now() -> float:
    """Publications Centrifugo answered with an error worth retrying (counted by the relay)."""
    return metrics.REGISTRY.get_sample_value("relay_publish_errors_total", {"kind": "temporary"}) or 0.0


@pytest.mark.redis
async def test_an_outage_of_centrifugos_broker_holds_rows_uncounted_and_kills_none(
    api: Http, relay: OutboxRelay, e2e_engine: sa.Engine, centrifugo_factory: type[CentrifugoNode], tmp_path: Path
) -> None:
    server = shutil.which("redis-server")
    if server is None:
        missing_service("redis-server", "scripts/services install redis")
    await _drain(relay)
    relay.release_partitions()  # the relay below does the work
    port = free_port()
    redis = [server, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--dir", str(tmp_path)]
    broker = subprocess.Popen(redis, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    node = centrifugo_factory(redis_address=f"redis://127.0.0.1:{port}").start()
    publisher = CentrifugoApi(node.api_url, node.api_key, timeout=2)
    # One counted attempt would make a row DEAD: none may be counted while the broker is down.
    relay = OutboxRelay(e2e_engine, publisher, "broker-down", RelayConfig(batch_size=1000, max_attempts=1))
    try:
        broker.kill()
        broker.wait(10)
        task_id, _ = _task_with_events(api)
        before, passes = _refused_for_now(), 0
        deadline = time.monotonic() + 30
        while passes < 4:  # past the relay's back-off: a pass every 0.25, 0.5, 1, 2 s
            assert time.monotonic() < deadline, "the relay stopped trying"
            result = await relay.run_once()
            if result.claimed:
                passes += 1
                assert (result.published, result.dead) == (0, 0) and result.held >= 1
            await asyncio.sleep(0.05)
        # Centrifugo answered and refused (for now), not a transport failure.
        assert _refused_for_now() > before
        rows = _rows(e2e_engine, task_id)
        assert {r["status"] for r in rows} == {"PENDING"} and {r["attempts"] for r in rows} == {0}
        broker = subprocess.Popen(redis, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while {r["status"] for r in _rows(e2e_engine, task_id)} != {"PUBLISHED"}:
            assert time.monotonic() < deadline, _rows(e2e_engine, task_id)
            await relay.run_once()
            await asyncio.sleep(0.1)
        await _drain(relay)
        detail = f"task_detail:{api.tenant}/{task_id}"
        shown = [int(p["taskVersion"]) for p in await _history(node.api_url, node.api_key, detail)]
        assert shown == _detail_versions(e2e_engine, task_id)
    finally:
        relay.release_partitions()
        await publisher.aclose()
        broker.kill()
        broker.wait(10)


async def test_ac24_coalescing_under_backlog_never_drops_notices_or_terminal(
    api: Http, e2e_engine: sa.Engine, relay: OutboxRelay, centrifugo: CentrifugoNode
) -> None:
    await _drain(relay)
    task_id, ctx = _task_with_events(api, progress_events=8)
    failed = report(api, ctx, "STEP_FAILED", 10, error={"category": "SYSTEM", "code": "BOOM", "message": "boom"})
    assert failed.status_code == 200
    more = [report(api, ctx, "STEP_PROGRESS", 11 + i) for i in range(1)]
    assert all(r.status_code == 409 for r in more)  # a failed step takes no more progress
    relay.release_partitions()
    eager = OutboxRelay(e2e_engine, relay.publisher, "eager", RelayConfig(batch_size=1000, coalesce_backlog=1))
    result = await eager.run_once()
    eager.release_partitions()
    assert result.coalesced > 0
    summary = f"task_user:{api.tenant}/user-1"
    delivered = [
        p for p in await _history(centrifugo.api_url, centrifugo.api_key, summary) if p.get("taskId") == task_id
    ]
    kinds = [p["notice"]["type"] for p in delivered if p.get("notice")]
    assert "STEP_FAILED" in kinds  # the notice survived coalescing
    final = max(int(r["aggregate_version"]) for r in _rows(e2e_engine, task_id))
    assert int(delivered[-1]["taskVersion"]) == final
    assert {r["status"] for r in _rows(e2e_engine, task_id)} == {"PUBLISHED"}
    _ = datetime


async def test_published_changes_are_logged_with_their_outbox_ids_and_channels(
    api: Http, relay: OutboxRelay, make_relay: Any, e2e_engine: sa.Engine
) -> None:
    """design D12: the relay's sampled "published" line carries outboxId and channel beside the
    eventId, so an operator goes from the API's "event accepted" line to what users were sent."""
    await _drain(relay)
    relay.release_partitions()
    logging_relay = make_relay(relay.publisher, "logging", replace(relay.config, log_sample=1.0))
    task_id, _ = _task_with_events(api, progress_events=1)
    with structlog.testing.capture_logs() as lines:
        await _drain(logging_relay)
    published = [line for line in lines if line["event"] == "published" and line["taskId"] == task_id]
    rows = [r for r in _rows(e2e_engine, task_id) if r["event_id"] is not None]
    assert {(line["outboxId"], line["channel"], line["eventId"]) for line in published} == {
        (r["id"], r["channel"], r["event_id"]) for r in rows
    }
    assert {line["taskVersion"] for line in published} == {r["aggregate_version"] for r in rows}


def _statuses(engine: sa.Engine, task_id: str) -> set[str]:
    return {r["status"] for r in _rows(engine, task_id)}


async def test_a_caught_up_pass_records_its_batch_with_the_next_claim_on_one_connection(
    api: Http, relay: OutboxRelay, e2e_engine: sa.Engine, make_relay: Any
) -> None:
    await _drain(relay)
    relay.release_partitions()
    looping = make_relay(
        relay.publisher,
        "relay-looping",
        RelayConfig(batch_size=1000, partition_lease_seconds=7200, partition_renew_seconds=3600),
    )
    assert len(looping.partitions()) == OUTBOX_PARTITIONS  # all of them, held from here on: no lease round below
    task_id, _ = _task_with_events(api)
    first = await looping.run_once(wait_for_mark=False)  # as the observer's loop runs it
    assert first.published >= 3 and first.claimed < 1000
    assert _statuses(e2e_engine, task_id) == {"PENDING"}  # published; the mark waits for the next claim
    checkouts: list[object] = []

    def checked_out(*_: object) -> None:
        checkouts.append(1)

    sa.event.listen(e2e_engine.pool, "checkout", checked_out)
    try:
        second = await looping.run_once(wait_for_mark=False)
    finally:
        sa.event.remove(e2e_engine.pool, "checkout", checked_out)
    assert second.claimed == 0  # the published rows were marked before the read, not read again
    assert _statuses(e2e_engine, task_id) == {"PUBLISHED"}
    assert len(checkouts) == 1  # mark and claim on one connection
    # A mark still waiting when the relay stops is written by flush (the observer's close).
    other, _ = _task_with_events(api)
    assert (await looping.run_once(wait_for_mark=False)).published >= 3
    assert _statuses(e2e_engine, other) == {"PENDING"}
    await looping.flush()
    assert _statuses(e2e_engine, other) == {"PUBLISHED"}


async def test_a_backlog_is_marked_while_the_next_batch_goes_out_and_nothing_goes_twice(
    api: Http, relay: OutboxRelay, centrifugo: CentrifugoNode, e2e_engine: sa.Engine, make_relay: Any
) -> None:
    await _drain(relay)
    relay.release_partitions()
    task_id, _ = _task_with_events(api, progress_events=8)
    draining = make_relay(
        relay.publisher,
        "relay-draining",
        RelayConfig(batch_size=3, partition_lease_seconds=7200, partition_renew_seconds=3600),
    )
    assert len(draining.partitions()) == OUTBOX_PARTITIONS
    passes = []
    while (result := await draining.run_once(wait_for_mark=False)).claimed:
        passes.append(result)
    await draining.flush()
    assert len(passes) >= 4 and all(p.claimed == 3 for p in passes[:-1])  # full batches: pipelined marks
    assert _statuses(e2e_engine, task_id) == {"PUBLISHED"}
    detail = f"task_detail:{api.tenant}/{task_id}"
    versions = [int(p["taskVersion"]) for p in await _history(centrifugo.api_url, centrifugo.api_key, detail)]
    assert versions == sorted(set(versions))  # every version once, in order
