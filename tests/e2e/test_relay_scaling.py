"""Several relays, database failover and cent against a real Centrifugo."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from observer.relay import OutboxRelay, RelayConfig
from status.app import commands as c
from status.bootstrap import build_service
from status.domain.auth import Role, ServicePrincipal
from status.infra import migrate
from status.infra import tables as t
from status.infra.centrifugo import CentrifugoApi, Publication, TransportError
from status.infra.db import create_engine
from status.infra.outbox_rows import OUTBOX_PARTITIONS, partition_of
from tests.conftest import _mysql_server_engine
from tests.integration.conftest import Http
from tests.support.flows import activate, create_workflow, follow_detail, report
from tests.support.outbox import publications
from tests.support.processes import CentrifugoNode
from tests.support.settings import make_settings

pytestmark = [pytest.mark.centrifugo, pytest.mark.mariadb]
ot = t.task_outbox


async def _history(node: CentrifugoNode, channel: str, limit: int = 300) -> list[dict[str, Any]]:
    api = CentrifugoApi(node.api_url, node.api_key)
    try:
        return await api.history(channel, limit)
    finally:
        await api.aclose()


def _open_rows(engine: sa.Engine, task_ids: list[str]) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count())
                .select_from(ot)
                .where(ot.c.aggregate_id.in_(task_ids), ot.c.status.in_(["PENDING", "PROCESSING"]))
            ).scalar_one()
        )


async def test_three_relays_share_the_work_and_keep_each_channels_order(  # noqa: C901
    api: Http, e2e_engine: sa.Engine, relay: OutboxRelay, centrifugo: CentrifugoNode
) -> None:
    while (await relay.run_once()).claimed:
        pass
    relay.release_partitions()
    # A row's partition is its owner's summary channel's: five tasks of one user (whose channel's
    # order is checked) and one task of an owner in every other partition, so every relay has work.
    homes = {partition_of(f"task_user:{api.tenant}/user-1")}
    owners = ["user-1"] * 5
    for n in range(1000):
        if len(homes) == OUTBOX_PARTITIONS:
            break
        home = partition_of(f"task_user:{api.tenant}/owner-{n}")
        if home not in homes:
            homes.add(home)
            owners.append(f"owner-{n}")
    tasks = [create_workflow(api, owner)["tasks"][0]["taskId"] for owner in owners]
    for task_id in tasks[:5]:  # user-1 has their tasks' details open: those changes go there too
        follow_detail(api, task_id)
    contexts = [activate(api, task_id) for task_id in tasks]
    # Small claims, no coalescing, short leases: partitions change hands while rows flow.
    config = RelayConfig(
        batch_size=10, coalesce_backlog=10**9, partition_lease_seconds=3.0, partition_renew_seconds=0.3
    )
    relays = [OutboxRelay(e2e_engine, relay.publisher, f"scale-{i}", config) for i in range(3)]
    published = [0, 0, 0]
    stop = asyncio.Event()

    async def run(i: int) -> None:
        while not stop.is_set():
            result = await relays[i].run_once()
            published[i] += result.published
            if not result.claimed:
                await asyncio.sleep(0.02)

    def produce(rounds: range) -> None:
        for seq in rounds:
            for ctx in contexts:  # user-1's channel interleaves its five tasks
                kind = "STEP_STARTED" if seq == 1 else "STEP_PROGRESS"
                assert report(api, ctx, kind, seq, progress={"current": seq, "total": 100}).status_code == 200

    # A backlog first, so that three relays start on it at once and rebalance while they drain it
    # (the first to look takes every partition, and gives back all but its share a round later);
    # once each holds its share, more rows: those must be published by several relays.
    await asyncio.to_thread(produce, range(1, 12))
    running = [asyncio.create_task(run(i)) for i in range(3)]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while not all(r.leases.current for r in relays) and loop.time() < deadline:
        await asyncio.sleep(0.05)
    assert all(r.leases.current for r in relays), "the relays did not share the partitions"
    await asyncio.to_thread(produce, range(12, 18))
    deadline = loop.time() + 60
    while _open_rows(e2e_engine, tasks) and loop.time() < deadline:
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.gather(*running)
    for r in relays:
        r.release_partitions()
    assert _open_rows(e2e_engine, tasks) == 0
    assert sum(1 for n in published if n) >= 2, f"the work was not shared: {published}"

    with e2e_engine.connect() as conn:
        rows = [p for p in publications(conn) if p.aggregate_id in tasks]
    user_channel = f"task_user:{api.tenant}/user-1"
    committed = [(r.aggregate_id, int(r.aggregate_version)) for r in rows if r.channel == user_channel]
    delivered = [
        (p["taskId"], int(p["taskVersion"]))
        for p in await _history(centrifugo, user_channel)
        if p.get("taskId") in tasks
    ]
    assert len(committed) > 60
    assert delivered == committed  # every row once, in commit order, across three relays
    for task_id in tasks:
        detail = f"task_detail:{api.tenant}/{task_id}"
        versions = [int(p["taskVersion"]) for p in await _history(centrifugo, detail)]
        assert versions == [r.aggregate_version for r in rows if r.channel == detail]
        assert bool(versions) == (task_id in tasks[:5])  # a detail nobody followed was not published


async def test_a_recreated_database_in_front_of_the_same_centrifugo_still_reaches_clients(
    scratch_mariadb_url: str, centrifugo: CentrifugoNode, tmp_path: Path
) -> None:
    """Auto-increment ids restart; Centrifugo still remembers the old rows' idempotency keys."""
    settings = make_settings(
        scratch_mariadb_url, tmp_path, centrifugo_api_url=centrifugo.api_url, centrifugo_api_key=centrifugo.api_key
    )
    coordinator = ServicePrincipal("recreate", "tenant-recreate", "s", frozenset({Role.COORDINATOR}))
    publisher = CentrifugoApi(centrifugo.api_url, centrifugo.api_key)

    async def one_life() -> tuple[str, list[int]]:
        migrate.upgrade(scratch_mariadb_url)
        engine = create_engine(scratch_mariadb_url)
        service = build_service(settings, engine)
        service.install_default_definitions()
        created = service.create_workflow(
            coordinator,
            c.CreateWorkflow(
                client_workflow_key="wf-same-key",
                owner_id="viewer",
                title="same",
                initial_tasks=(c.NewTask("t", "same"),),
            ),
        )
        relay = OutboxRelay(engine, publisher, "recreate")
        while (await relay.run_once()).claimed:
            pass
        relay.release_partitions()
        with engine.connect() as conn:
            ids = list(conn.scalars(sa.select(ot.c.id).where(ot.c.status == "PUBLISHED").order_by(ot.c.id)))
        engine.dispose()
        return created["tasks"][0]["taskId"], ids

    first_task, first_ids = await one_life()
    name = sa.engine.make_url(scratch_mariadb_url).database
    server = _mysql_server_engine()
    with server.begin() as conn:  # the same database name, empty again: ids start over
        conn.execute(sa.text(f"DROP DATABASE {name}"))
        conn.execute(sa.text(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
    server.dispose()
    second_task, second_ids = await one_life()
    await publisher.aclose()

    assert second_ids == first_ids  # the ids did repeat
    delivered = [p["taskId"] for p in await _history(centrifugo, "task_user:tenant-recreate/viewer")]
    assert first_task in delivered and second_task in delivered


async def test_one_bad_channel_in_a_batch_never_blocks_its_neighbours(centrifugo: CentrifugoNode) -> None:
    api = CentrifugoApi(centrifugo.api_url, centrifugo.api_key)
    try:
        good = [f"task_system:public-batch-{i}" for i in range(2)]
        results = await api.publish_batch(
            [
                Publication(good[0], {"n": 1}, "key-batch-1"),
                Publication("no_such_namespace:x", {"n": 2}, "key-batch-2"),
                Publication(good[1], {"n": 3}, "key-batch-3"),
            ]
        )
        assert [r.ok for r in results] == [True, False, True]
        assert results[1].permanent and "102" in (results[1].error or "")
        assert [p["n"] for p in await api.history(good[0])] == [1]
        assert [p["n"] for p in await api.history(good[1])] == [3]
        # The same keys again (a retry): Centrifugo drops the duplicates, results stay per command.
        again = await api.publish_batch([Publication(good[0], {"n": 1}, "key-batch-1")])
        assert again[0].ok and [p["n"] for p in await api.history(good[0])] == [1]
    finally:
        await api.aclose()


async def test_a_batch_larger_than_one_request_keeps_its_order(centrifugo: CentrifugoNode) -> None:
    api = CentrifugoApi(centrifugo.api_url, centrifugo.api_key)
    try:
        channel = "task_system:public-large"
        filler = "x" * 20_000
        results = await api.publish_batch(
            [Publication(channel, {"n": i, "filler": filler}, f"large-{i}", size_hint=20_050) for i in range(40)]
        )
        assert all(r.ok for r in results)
        assert [p["n"] for p in await api.history(channel)] == list(range(40))
    finally:
        await api.aclose()


async def test_an_unreachable_centrifugo_is_a_transport_error() -> None:
    api = CentrifugoApi("http://127.0.0.1:1/api", "key", timeout=2)
    try:
        with pytest.raises(TransportError):
            await api.publish_batch([Publication("task_system:public", {}, "k")])
    finally:
        await api.aclose()


async def test_coalescing_engages_under_backlog_with_the_shipped_defaults_and_keeps_must_deliver_rows(
    api: Http, e2e_engine: sa.Engine, relay: OutboxRelay, centrifugo: CentrifugoNode
) -> None:
    while (await relay.run_once()).claimed:
        pass
    relay.release_partitions()
    task_id = create_workflow(api)["tasks"][0]["taskId"]
    ctx = activate(api, task_id)
    assert report(api, ctx, "STEP_STARTED", 1).status_code == 200
    # A backlog: 600 progress ticks, one request and one row each (ticks sent in one batch would
    # be one transaction, whose last tick's row covers the others before the relay sees them).
    for seq in range(2, 602):
        assert report(api, ctx, "STEP_PROGRESS", seq, progress={"current": seq, "total": 700}).status_code == 200
    error = {"category": "SYSTEM", "code": "BOOM", "message": "boom"}
    assert report(api, ctx, "STEP_FAILED", 602, error=error).status_code == 200

    shipped = OutboxRelay(e2e_engine, relay.publisher, "shipped-defaults")  # RelayConfig() as shipped
    coalesced = 0
    while (result := await shipped.run_once()).claimed:
        coalesced += result.coalesced
    shipped.release_partitions()
    assert coalesced > 0

    with e2e_engine.connect() as conn:
        rows = publications(conn, task_id)
    assert {r.status for r in rows} == {"PUBLISHED"}
    histories = {ch: await _history(centrifugo, ch) for ch in {r.channel for r in rows}}
    seen = {(ch, int(p["taskVersion"])) for ch, pubs in histories.items() for p in pubs if p.get("taskId") == task_id}
    must = {(r.channel, int(r.aggregate_version)) for r in rows if r.must_deliver}
    assert must and must <= seen  # every must-deliver row went out
    assert len(seen) < len(rows)  # and superseded progress did not
    final = max(int(r.aggregate_version) for r in rows)
    for pubs in histories.values():
        assert int([p for p in pubs if p.get("taskId") == task_id][-1]["taskVersion"]) == final
