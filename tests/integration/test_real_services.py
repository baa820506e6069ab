"""Smoke tests proving each external part is the real thing.

Each test exercises behaviour a stub would not have: Centrifugo's history
recovery, Temporal's workflow execution, InnoDB's ``SKIP LOCKED``, Redis as a
shared Centrifugo engine, and Alembic migrations that really round-trip.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime

import jwt
import pytest
import sqlalchemy as sa
from cent import AsyncClient, PublishRequest
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from status.domain.auth import UserPrincipal
from status.infra import migrate, tables
from status.infra.tokens import RealtimeTokens
from tests.support.processes import CentrifugoNode
from tests.support.realtime import connection_token, recording_client
from tests.support.smoke_workflows import ShoutWorkflow, shout


# ----------------------------------------------------------------- Centrifugo
@pytest.mark.centrifugo
async def test_centrifugo_delivers_and_recovers_missed_publications(
    centrifugo: CentrifugoNode,
) -> None:
    channel = f"task_user:t-{uuid.uuid4().hex[:8]}/u1"
    token = connection_token(centrifugo.token_secret, "t/u1", [channel])
    client, recorder = recording_client(centrifugo.ws_url, token)
    async with AsyncClient(centrifugo.api_url, centrifugo.api_key) as api:
        await client.connect()
        first = await recorder.next_subscribed()
        assert first.channel == channel and first.recoverable and first.positioned

        await api.publish(PublishRequest(channel=channel, data={"n": 1}))
        assert await recorder.next_publication() == (channel, 1, {"n": 1})

        # Missed while disconnected; recovered from history on reconnect.
        await client.disconnect()
        await api.publish(PublishRequest(channel=channel, data={"n": 2}))
        await api.publish(PublishRequest(channel=channel, data={"n": 3}))
        await client.connect()
        again = await recorder.next_subscribed()
        assert again.was_recovering and again.recovered
        got = [await recorder.next_publication(), await recorder.next_publication()]
        assert [data for _, _, data in got] == [{"n": 2}, {"n": 3}]
        await client.disconnect()


@pytest.mark.centrifugo
async def test_centrifugo_takes_only_connection_tokens_with_the_services_audience_and_issuer(
    centrifugo: CentrifugoNode,
) -> None:
    """The shipped configuration names the audience and issuer the API's RealtimeTokens put in
    every connection token: a token signed with the same secret for anything else is refused."""
    channel = f"task_user:t-{uuid.uuid4().hex[:8]}/u1"
    issued, _ = RealtimeTokens(centrifugo.token_secret, 60).connection(UserPrincipal("t", "u1"), [channel])
    claims = jwt.decode(issued, options={"verify_signature": False})
    assert (claims["aud"], claims["iss"]) == (RealtimeTokens.AUDIENCE, RealtimeTokens.ISSUER)
    client, recorder = recording_client(centrifugo.ws_url, issued)
    await client.connect()
    assert (await recorder.next_subscribed()).channel == channel
    await client.disconnect()
    base = {"sub": "t/u1", "channels": [channel], "exp": int(time.time()) + 60}
    for wrong in (
        base,
        base | {"iss": RealtimeTokens.ISSUER},
        base | {"aud": "someone-else", "iss": RealtimeTokens.ISSUER},
        base | {"aud": RealtimeTokens.AUDIENCE, "iss": "someone-else"},
    ):
        client, recorder = recording_client(centrifugo.ws_url, jwt.encode(wrong, centrifugo.token_secret, "HS256"))
        await client.connect()
        refused = await recorder.next_disconnect()
        assert refused.code == 3500, (wrong, refused)  # Centrifugo's "invalid token": not retried
        assert recorder.subscribed.empty()
        await client.disconnect()


@pytest.mark.centrifugo
async def test_centrifugo_rejects_bad_api_key_and_unknown_namespace(
    centrifugo: CentrifugoNode,
) -> None:
    from cent import CentApiResponseError, CentUnauthorizedError

    async with AsyncClient(centrifugo.api_url, "not-the-key") as api:
        with pytest.raises(CentUnauthorizedError):
            await api.publish(PublishRequest(channel="task_user:t/u", data={}))
    async with AsyncClient(centrifugo.api_url, centrifugo.api_key) as api:
        with pytest.raises(CentApiResponseError) as err:
            await api.publish(PublishRequest(channel="nonexistent_ns:x", data={}))
        assert err.value.code == 102


@pytest.mark.centrifugo
@pytest.mark.redis
async def test_two_centrifugo_nodes_share_the_redis_engine(
    centrifugo_factory: type[CentrifugoNode],
) -> None:
    node_a = centrifugo_factory(redis_address="redis://127.0.0.1:6379").start()
    node_b = centrifugo_factory(
        redis_address="redis://127.0.0.1:6379",
        api_key=node_a.api_key,
        token_secret=node_a.token_secret,
    ).start()
    channel = f"task_user:t-{uuid.uuid4().hex[:8]}/u1"
    client, recorder = recording_client(node_b.ws_url, connection_token(node_b.token_secret, "t/u1", [channel]))
    await client.connect()
    await recorder.next_subscribed()
    async with AsyncClient(node_a.api_url, node_a.api_key) as api:
        await api.publish(PublishRequest(channel=channel, data={"via": "a"}))
    assert (await recorder.next_publication())[2] == {"via": "a"}
    await client.disconnect()


# ----------------------------------------------------------------- Temporal
@pytest.mark.temporal
async def test_temporal_dev_server_runs_a_workflow(temporal_env: WorkflowEnvironment, task_queue: str) -> None:
    async with Worker(temporal_env.client, task_queue=task_queue, workflows=[ShoutWorkflow], activities=[shout]):
        handle = await temporal_env.client.start_workflow(
            ShoutWorkflow.run, "hello", id=f"wf-{uuid.uuid4()}", task_queue=task_queue
        )
        assert await handle.result() == "HELLO attempt=1"
        history = await handle.fetch_history()
        assert len(history.events) > 5  # a real server recorded a real history


# ----------------------------------------------------------------- MariaDB
def _outbox_row(i: int) -> dict[str, object]:
    now = datetime.now(UTC).replace(tzinfo=None)
    return {
        "aggregate_type": "TASK",
        "aggregate_id": f"tsk_smoke_{uuid.uuid4().hex}",
        "aggregate_version": i,
        "channel": "task_user:t/u",
        "projection": "USER_SUMMARY",
        "payload": {"i": i},
        "status": "PENDING",
        "available_at": now,
        "created_at": now,
        "publish_key": uuid.uuid4().hex,
    }


@pytest.mark.mariadb
def test_two_connections_claim_disjoint_rows_with_skip_locked(scratch_mariadb_url: str) -> None:
    migrate.upgrade(scratch_mariadb_url)
    # The relay's claim shape: READ COMMITTED, PENDING rows in id order, LIMIT.
    engine = sa.create_engine(scratch_mariadb_url, isolation_level="READ COMMITTED")
    with engine.begin() as conn:
        ids = [
            conn.execute(sa.insert(tables.task_outbox).values(_outbox_row(i))).inserted_primary_key[0] for i in range(4)
        ]
    claim = (
        sa.select(tables.task_outbox.c.id)
        .where(tables.task_outbox.c.status == "PENDING")
        .order_by(tables.task_outbox.c.id)
        .limit(2)
        .with_for_update(skip_locked=True)
    )
    with engine.connect() as first, engine.connect() as second, first.begin():
        claimed_first = set(first.scalars(claim))
        with second.begin():
            claimed_second = set(second.scalars(claim))
    assert len(claimed_first) == 2 and len(claimed_second) == 2
    assert claimed_first.isdisjoint(claimed_second)
    assert claimed_first | claimed_second == set(ids)
    engine.dispose()


# ----------------------------------------------------------------- migrations
def _schema(url: str) -> dict[str, tuple[set[str], set[str]]]:
    """table -> (unique constraint/index names, plain index names), read back from the DB."""
    engine = sa.create_engine(url)
    inspector = sa.inspect(engine)
    result = {}
    for name in inspector.get_table_names():
        uniques = {u["name"] for u in inspector.get_unique_constraints(name)}
        indexes = {i["name"] for i in inspector.get_indexes(name) if not i.get("unique")}
        uniques |= {i["name"] for i in inspector.get_indexes(name) if i.get("unique")}
        result[name] = (uniques, indexes)
    engine.dispose()
    return result


def _expected_schema() -> dict[str, tuple[set[str], set[str]]]:
    expected = {}
    for table in tables.metadata.sorted_tables:
        uniques = {c.name for c in table.constraints if isinstance(c, sa.UniqueConstraint)}
        indexes = {i.name for i in table.indexes}
        expected[table.name] = (uniques, indexes)
    return expected


def _round_trip(url: str) -> None:
    migrate.upgrade(url)
    schema = _schema(url)
    for table, (uniques, indexes) in _expected_schema().items():
        assert table in schema, f"{table} missing after upgrade"
        got_uniques, got_indexes = schema[table]
        assert uniques <= got_uniques, f"{table}: unique keys {uniques - got_uniques} missing"
        # MariaDB names the index backing a foreign key after the constraint; only ours matter.
        assert indexes <= got_indexes | got_uniques, f"{table}: indexes {indexes - got_indexes} missing"
    migrate.downgrade(url)
    assert set(_schema(url)) == {"alembic_version"}
    migrate.upgrade(url)  # and back up again: downgrade left nothing behind
    assert set(_expected_schema()) <= set(_schema(url))


@pytest.mark.mariadb
def test_migration_round_trips_on_mariadb(scratch_mariadb_url: str) -> None:
    _round_trip(scratch_mariadb_url)


def test_migration_round_trips_on_sqlite(tmp_path: pytest.TempPathFactory) -> None:
    _round_trip(f"sqlite:///{tmp_path}/roundtrip.sqlite3")


def test_schema_has_every_table_of_the_spec() -> None:
    spec_tables = {
        "workflow",
        "task",
        "task_step",
        "task_event_log",
        "task_event_dedup",
        "task_outbox",
        "task_acl",
        "task_external_ref",
        "task_status_definition",
        "task_operation_definition",
        "task_execution_handle",
    }
    assert spec_tables <= set(tables.metadata.tables)


_LOOPS: list[asyncio.AbstractEventLoop] = []


async def test_event_loop_is_shared_by_the_session_first() -> None:
    # Session-scoped async fixtures (Temporal) need every test on the same loop.
    _LOOPS.append(asyncio.get_running_loop())


async def test_event_loop_is_shared_by_the_session() -> None:
    assert _LOOPS, "runs after the test above (file order)"
    assert asyncio.get_running_loop() is _LOOPS[0]  # a per-test loop would be another object


@pytest.mark.parametrize("backend", ["mariadb", "sqlite"])
def test_migrations_match_the_table_definitions(backend: str, request: pytest.FixtureRequest, tmp_path: object) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    url = request.getfixturevalue("scratch_mariadb_url") if backend == "mariadb" else f"sqlite:///{tmp_path}/m.sqlite3"
    migrate.upgrade(url)
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), tables.metadata)
    engine.dispose()
    assert diff == [], "tables.py and migrations/ disagree; add a migration"
