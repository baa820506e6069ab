"""Tasks routed to the shard of their bucket (status/infra/shards.py), on three MariaDB
databases: each workflow, task and event lands on its bucket's shard only; a group of events or
bindings spanning shards commits on each; a shard's fence refuses writes of a bucket it does not
hold writable, even from a process whose map is old, and that process finds the new shard."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from unittest.mock import ANY

import pytest
import sqlalchemy as sa

from status.app import commands as c
from status.app.routing import bucket_of
from status.app.service import StatusService
from status.domain import ids
from status.domain.auth import Role, ServicePrincipal, UserPrincipal
from status.domain.buckets import CLAIM_IN_DOUBT, BucketRoute, Fence
from status.domain.errors import DomainError, ErrorCode, Unavailable
from status.infra import tables as t
from status.infra.db import create_engine
from status.infra.schemas import JsonSchemaValidator
from status.infra.shards import ShardedDatabases, install_map, load_map, save_fences, save_routes
from status.infra.stores.external_refs import SqlExternalRefStore
from status.infra.tokens import ExecutionTokens
from status.infra.uow import SqlDatabase
from tests.conftest import _migrated_mariadb
from tests.support.factories import event, now
from tests.support.processes import FAST_LANE
from tests.support.shards import NOW, SHARDS, create, owner_on, sharded_service, three_shards, where

pytestmark = pytest.mark.skipif(FAST_LANE, reason="shards are MariaDB databases")


@pytest.fixture(scope="module")
def engines() -> Iterator[dict[str, sa.Engine]]:
    with three_shards() as engines:
        yield engines


@pytest.fixture(scope="module")
def sharded(engines: dict[str, sa.Engine]) -> tuple[StatusService, ShardedDatabases]:
    return sharded_service(engines)


@pytest.fixture
def coordinator() -> ServicePrincipal:
    return ServicePrincipal("coordinator-1", f"tenant-{uuid.uuid4().hex[:8]}", "content", frozenset({Role.COORDINATOR}))


def test_a_workflow_its_tasks_and_their_events_live_on_their_buckets_shard_only(
    engines: dict[str, sa.Engine], sharded: tuple[StatusService, ShardedDatabases], coordinator: ServicePrincipal
) -> None:
    service, shards = sharded
    tasks = {shard: create(service, coordinator, owner_on(shards, coordinator.tenant_id, shard)) for shard in SHARDS}
    for shard, task_id in tasks.items():
        assert where(engines, t.task, t.task.c.id, task_id) == [shard]
        assert where(engines, t.task_outbox, t.task_outbox.c.aggregate_id, task_id) == [shard]
        with engines[shard].connect() as conn:
            workflow_id = conn.scalar(sa.select(t.task.c.workflow_id).where(t.task.c.id == task_id))
        assert where(engines, t.workflow, t.workflow.c.id, str(workflow_id)) == [shard]


def test_a_group_of_bindings_and_of_events_across_shards_commits_each_on_its_shard(
    engines: dict[str, sa.Engine], sharded: tuple[StatusService, ShardedDatabases], coordinator: ServicePrincipal
) -> None:
    service, shards = sharded
    order = ["c", "a", "b", "a"]
    tasks = [create(service, coordinator, owner_on(shards, coordinator.tenant_id, shard)) for shard in order]
    contexts = service.bind_executions(
        [(coordinator, c.ActivateStep(task_id, "s1", 1, "coordinator-1")) for task_id in tasks]
    )
    assert [ctx.task_id for ctx in contexts] == tasks  # type: ignore[union-attr]
    handles = [ctx.execution_handle for ctx in contexts]  # type: ignore[union-attr]
    events = [event("STEP_STARTED", 1, execution_handle=handle) for handle in handles]
    results = service.report_events(coordinator, events)
    assert [r["taskId"] for r in results] == tasks and all(r["accepted"] for r in results)
    for shard, task_id, sent in zip(order, tasks, events, strict=True):
        assert where(engines, t.task_event_log, t.task_event_log.c.event_id, sent.event_id) == [shard]
        assert where(engines, t.task_step, t.task_step.c.task_id, task_id) == [shard]


def test_a_shard_refuses_a_bucket_it_does_not_hold_writable_and_only_that_item(
    engines: dict[str, sa.Engine], sharded: tuple[StatusService, ShardedDatabases], coordinator: ServicePrincipal
) -> None:
    service, shards = sharded
    fenced_owner = owner_on(shards, coordinator.tenant_id, "b")
    fenced_task, other_task = create(service, coordinator, fenced_owner), create(service, coordinator, "other")
    bucket = bucket_of(coordinator.tenant_id, fenced_owner)
    epoch = shards.map.route(bucket).epoch
    with engines["b"].begin() as conn:
        save_fences(conn, [Fence(bucket, epoch, False)], NOW)  # as a move's cut-over leaves it
    try:
        results = service.bind_executions(
            [(coordinator, c.ActivateStep(task_id, "s1", 1, "coordinator-1")) for task_id in (fenced_task, other_task)]
        )
        assert isinstance(results[0], Unavailable) and results[0].retryable
        assert results[0].code is ErrorCode.UNAVAILABLE
        assert results[1].task_id == other_task  # type: ignore[union-attr]
        with engines["b"].connect() as conn:
            bound = conn.scalar(
                sa.select(sa.func.count())
                .select_from(t.task_step)
                .where(t.task_step.c.task_id == fenced_task, t.task_step.c.execution_id.is_not(None))
            )
        assert bound == 0  # nothing of the refused binding was written
    finally:
        with engines["b"].begin() as conn:
            save_fences(conn, [Fence(bucket, epoch, True)], NOW)


def test_a_process_with_an_old_map_is_sent_to_the_buckets_new_shard(
    engines: dict[str, sa.Engine], coordinator: ServicePrincipal
) -> None:
    service, shards = sharded_service(engines)  # its map is read now and not re-read by itself for an hour
    owner = owner_on(shards, coordinator.tenant_id, "a")
    bucket = bucket_of(coordinator.tenant_id, owner)
    old = shards.map.route(bucket)
    # The bucket moves to c (empty for it) behind this process's back: the control store's map
    # and both shards' fences say so.
    with engines["a"].begin() as conn:
        save_routes(conn, [BucketRoute(bucket, old.epoch + 1, "c")], NOW)
    with engines["a"].begin() as conn:
        save_fences(conn, [Fence(bucket, old.epoch + 1, False)], NOW)
    with engines["c"].begin() as conn:
        save_fences(conn, [Fence(bucket, old.epoch + 1, True)], NOW)
    try:
        assert shards.map.route(bucket).shard == "a"
        task_id = create(service, coordinator, owner)
        assert where(engines, t.task, t.task.c.id, task_id) == ["c"]
        assert shards.map.route(bucket) == BucketRoute(bucket, old.epoch + 1, "c")
    finally:
        with engines["a"].begin() as conn:
            save_routes(conn, [old], NOW)
            save_fences(conn, [Fence(bucket, old.epoch, True)], NOW)
        with engines["c"].begin() as conn:
            conn.execute(sa.delete(t.bucket_write_fence).where(t.bucket_write_fence.c.bucket_id == bucket))


def test_a_map_is_installed_once_and_loaded_whole(engines: dict[str, sa.Engine]) -> None:
    with engines["a"].connect() as conn:
        loaded = load_map(conn)
    assert loaded is not None and not loaded.problems() and loaded.shards() == frozenset(SHARDS)
    with pytest.raises(ValueError, match="installed already"):
        install_map(engines["a"], engines, NOW)
    with engines["b"].connect() as conn:
        assert load_map(conn) is None  # only the control store holds a map


def test_a_users_list_merges_every_shard_in_order_and_pages_through_each_task_once(
    engines: dict[str, sa.Engine], sharded: tuple[StatusService, ShardedDatabases], coordinator: ServicePrincipal
) -> None:
    service, shards = sharded
    viewer = UserPrincipal(coordinator.tenant_id, "viewer")
    made = [
        create(service, coordinator, owner_on(shards, coordinator.tenant_id, shard), "viewer")
        for shard in ("b", "a", "c", "b", "c")
    ]
    assert {shard for task_id in made for shard in where(engines, t.task, t.task.c.id, task_id)} == set(SHARDS)
    listed, cursor = [], None
    while True:
        page = service.my_tasks(viewer, cursor, 2)
        listed += [summary["taskId"] for summary in page["tasks"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert listed == list(reversed(made))  # newest first, each once, across pages and shards
    found = service.batch_get(viewer, [*made, "tsk_v1_000_01JZZZZZZZZZZZZZZZZZZZZZZZ"], {made[0]: 1})
    assert found["unchanged"] == [made[0]] and [s["taskId"] for s in found["tasks"]] == made[1:]
    assert found["notFound"] == ["tsk_v1_000_01JZZZZZZZZZZZZZZZZZZZZZZZ"]
    assert service.get_task(viewer, made[2])["taskId"] == made[2]


def test_heartbeats_of_executions_on_every_shard_land_on_each_ones_shard(
    engines: dict[str, sa.Engine], sharded: tuple[StatusService, ShardedDatabases], coordinator: ServicePrincipal
) -> None:
    service, shards = sharded
    tasks = [create(service, coordinator, owner_on(shards, coordinator.tenant_id, shard)) for shard in SHARDS]
    contexts = service.bind_executions(
        [
            (
                coordinator,
                c.ActivateStep(task_id, "s1", 1, "coordinator-1", started=c.StartedEvent(f"{task_id}/s", now(), 1)),
            )
            for task_id in tasks
        ]
    )
    worker = ServicePrincipal("coordinator-1", coordinator.tenant_id, "content", frozenset({Role.WORKER}))
    beats = [c.Heartbeat(7, execution_handle=ctx.execution_handle) for ctx in contexts]  # type: ignore[union-attr]
    answer = service.record_heartbeats(worker, beats)
    assert [r["accepted"] for r in answer["results"]] == [True, True, True], answer
    for shard, task_id in zip(SHARDS, tasks, strict=True):
        for name, engine in engines.items():
            with engine.connect() as conn:
                seq = conn.scalar(
                    sa.select(t.task_step.c.last_heartbeat_seq).where(
                        t.task_step.c.task_id == task_id, t.task_step.c.execution_id.is_not(None)
                    )
                )
            assert seq == (7 if name == shard else None)


def test_an_external_reference_names_one_task_across_shards(
    engines: dict[str, sa.Engine], sharded: tuple[StatusService, ShardedDatabases], coordinator: ServicePrincipal
) -> None:
    """Each shard's key sees its own tasks only: the reference's claim in the control store keeps
    it to one task of the tenant and scope, whichever shards their owners' buckets are on."""
    service, shards = sharded
    ref = ("ORDER_ID", f"SO-{uuid.uuid4().hex[:6]}")
    first = create(service, coordinator, owner_on(shards, coordinator.tenant_id, "a"), refs=(ref,))
    elsewhere = owner_on(shards, coordinator.tenant_id, "b")
    with pytest.raises(DomainError) as refused:
        create(service, coordinator, elsewhere, refs=(ref,))
    assert refused.value.code is ErrorCode.EXTERNAL_REF_CONFLICT
    other = create(service, coordinator, elsewhere)
    with pytest.raises(DomainError) as refused:
        service.attach_external_refs(coordinator, other, [ref])
    assert refused.value.code is ErrorCode.EXTERNAL_REF_CONFLICT
    assert service.lookup_external_ref(coordinator, *ref)["taskId"] == first
    # Attached to its own task again: no conflict, nothing new.
    same_bucket = create(service, coordinator, owner_on(shards, coordinator.tenant_id, "a"))
    assert service.attach_external_refs(coordinator, first, [ref])["externalRefs"][0]["created"] is False
    with pytest.raises(DomainError) as refused:  # another task of the same bucket: its shard's key says so
        service.attach_external_refs(coordinator, same_bucket, [ref])
    assert refused.value.code is ErrorCode.EXTERNAL_REF_CONFLICT


def test_a_claim_no_task_holds_is_in_doubt_for_a_while_then_taken_over(
    engines: dict[str, sa.Engine], sharded: tuple[StatusService, ShardedDatabases], coordinator: ServicePrincipal
) -> None:
    """A creation that claimed a reference and then failed leaves a claim no task holds: another
    bucket is told to retry while the creation may still be committing, and takes it over after."""
    service, shards = sharded
    ref = ("TICKET", f"INC-{uuid.uuid4().hex[:6]}")
    owner = owner_on(shards, coordinator.tenant_id, "c")
    claimer = owner_on(shards, coordinator.tenant_id, "b")
    args = (coordinator.tenant_id, coordinator.authority_scope, *ref)
    with engines["a"].begin() as conn:  # the control store: claimed for another bucket, just now
        SqlExternalRefStore(conn).save_claim(*args, bucket_of(coordinator.tenant_id, claimer), now(), new=True)
    task_id = create(service, coordinator, owner)
    with pytest.raises(Unavailable):
        service.attach_external_refs(coordinator, task_id, [ref])
    with engines["a"].begin() as conn:  # the claim grown old, its task never committed
        SqlExternalRefStore(conn).save_claim(
            *args, bucket_of(coordinator.tenant_id, claimer), now() - CLAIM_IN_DOUBT * 2, new=False
        )
    assert service.attach_external_refs(coordinator, task_id, [ref])["externalRefs"][0]["created"] is True
    with engines["a"].connect() as conn:
        assert SqlExternalRefStore(conn).lock_claim(*args) == (bucket_of(coordinator.tenant_id, owner), ANY)


def test_references_attached_before_the_map_are_claimed_for_their_tasks_buckets(
    coordinator: ServicePrincipal,
) -> None:
    makers = [_migrated_mariadb() for _ in range(2)]
    engines = {name: create_engine(next(maker)) for name, maker in zip(("one", "two"), makers, strict=True)}
    try:
        single = StatusService(
            SqlDatabase(engines["one"]),
            execution_tokens=ExecutionTokens(secrets.token_hex(32)),
            validator=JsonSchemaValidator(),
        )
        single.install_default_definitions()
        ref = ("ORDER_ID", "SO-before-shards")
        task_id = create(single, coordinator, "user-1", refs=(ref,))
        install_map(engines["one"], engines, NOW)
        with engines["one"].connect() as conn:
            claimed = SqlExternalRefStore(conn).lock_claim(coordinator.tenant_id, coordinator.authority_scope, *ref)
        assert claimed == (ids.bucket_hint(task_id), ANY)
    finally:
        for engine in engines.values():
            engine.dispose()
        for maker in makers:
            next(maker, None)
