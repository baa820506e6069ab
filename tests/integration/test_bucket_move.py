"""A bucket moved between shards live (status/infra/bucket_move.py), on three MariaDB databases
with each shard's outbox relayed to a real Centrifugo: under a producer's steady events nothing
acknowledged is lost, nothing is stored twice, no version is reused or skipped, the target's
first publication comes after the source's last; the fence's duration is measured; an abort at
each step leaves the source the writer, and a source that does not drain in time aborts."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy import create_engine

from status.app import commands as c
from status.app.routing import bucket_of
from status.domain.auth import Role, ServicePrincipal, UserPrincipal
from status.domain.buckets import FENCE_BOUND, BucketRoute, RouteState
from status.domain.clock import utcnow
from status.domain.errors import Unavailable
from status.infra import tables as t
from status.infra.bucket_move import BucketMover, MoveFailed
from status.infra.shards import read_fences
from tests.support.factories import event
from tests.support.processes import FAST_LANE, CentrifugoNode
from tests.support.relay_pump import RelayPump
from tests.support.shards import (
    Producer,
    Projectors,
    bucket_of_tasks,
    create,
    event_log,
    owner_on,
    sharded_service,
    three_shards,
    wait_for,
    where,
)

pytestmark = pytest.mark.skipif(FAST_LANE, reason="shards are MariaDB databases")


@pytest.fixture
def engines() -> Iterator[dict[str, sa.Engine]]:
    with three_shards() as engines:
        yield engines


@pytest.fixture
def coordinator() -> ServicePrincipal:
    return ServicePrincipal("coordinator-1", f"tenant-{uuid.uuid4().hex[:8]}", "content", frozenset({Role.COORDINATOR}))


def _published_versions(engine: sa.Engine, task_id: str) -> list[int]:
    with engine.connect() as conn:
        return sorted(
            int(v)
            for v in conn.scalars(
                sa.select(t.task_outbox.c.aggregate_version).where(t.task_outbox.c.aggregate_id == task_id)
            )
        )


def test_a_bucket_moved_under_steady_events_loses_nothing_and_never_goes_back(
    engines: dict[str, sa.Engine], coordinator: ServicePrincipal, centrifugo: CentrifugoNode
) -> None:
    service, shards = sharded_service(engines)
    bucket, contexts = bucket_of_tasks(service, shards, coordinator, "a", 4)
    owner = UserPrincipal(coordinator.tenant_id, owner_on(shards, coordinator.tenant_id, "a"))  # theirs
    tasks = [ctx.task_id for ctx in contexts]
    mover = BucketMover(engines["a"], engines)
    relays = [RelayPump(engine, centrifugo.api_url, centrifugo.api_key) for engine in engines.values()]
    for relay in relays:
        relay.__enter__()
    try:
        with Projectors(engines), Producer(service, coordinator, contexts) as producer:
            wait_for(lambda: len(producer.acked) >= 40 or producer.failure is not None)
            report = mover.move(bucket, "b")
            moved_at = len(producer.acked)
            wait_for(lambda: len(producer.acked) >= moved_at + 40 or producer.failure is not None)
        assert producer.failure is None, producer.failure
    finally:
        for relay in relays:
            relay.__exit__()
    assert report.fenced_seconds < FENCE_BOUND.total_seconds() and report.tasks == len(tasks)
    print(f"bucket {bucket} moved a -> b: fenced {1000 * report.fenced_seconds:.0f} ms, {producer.refused} refusals")
    assert shards.map.route(bucket) == BucketRoute(bucket, report.epoch, "b")  # the process followed
    log = event_log(engines["b"], tasks)
    stored = [event_id for event_id, _, _ in log]
    assert len(stored) == len(set(stored))  # nothing twice
    assert set(producer.acked) <= set(stored)  # nothing acknowledged lost
    for task_id in tasks:
        versions = sorted(v for _, task, v in log if task == task_id)
        assert versions == list(range(versions[0], versions[0] + len(versions)))  # none reused or skipped
        acked = {v for task, v in producer.acked.values() if task == task_id}
        assert acked <= set(versions)
        # The source published everything it committed before the target published anything.
        before, after = _published_versions(engines["a"], task_id), _published_versions(engines["b"], task_id)
        assert before and after and max(before) < min(after)
    with engines["a"].connect() as conn:
        pending = conn.scalar(
            sa.select(sa.func.count())
            .select_from(t.task_outbox)
            .where(t.task_outbox.c.aggregate_id.in_(tasks), t.task_outbox.c.status != "PUBLISHED")
        )
    assert pending == 0
    listed = [summary["taskId"] for summary in service.my_tasks(owner, None, 10)["tasks"]]
    assert sorted(listed) == sorted(tasks)  # each once, though still on the shard it left
    assert mover.release(bucket, "a") == len(tasks)
    assert all(where(engines, t.task, t.task.c.id, task_id) == ["b"] for task_id in tasks)
    assert not event_log(engines["a"], tasks)
    with pytest.raises(MoveFailed):
        mover.release(bucket, "b")  # the shard that holds it


@pytest.mark.parametrize("steps", [("copy",), ("copy", "fence")])
def test_an_abort_at_any_step_leaves_the_source_the_writer(
    engines: dict[str, sa.Engine], coordinator: ServicePrincipal, steps: tuple[str, ...]
) -> None:
    service, shards = sharded_service(engines)
    bucket, contexts = bucket_of_tasks(service, shards, coordinator, "a", 2)
    before = BucketMover(engines["a"], engines).route(bucket)
    mover = BucketMover(engines["a"], engines)
    mover.copy(bucket, "c")
    assert all(where(engines, t.task, t.task.c.id, ctx.task_id) == ["a", "c"] for ctx in contexts)
    owner = UserPrincipal(coordinator.tenant_id, owner_on(shards, coordinator.tenant_id, "a"))
    listed = [summary["taskId"] for summary in service.my_tasks(owner, None, 10)["tasks"]]
    assert sorted(listed) == sorted(ctx.task_id for ctx in contexts)  # each once, though on two shards
    if "fence" in steps:
        mover.fence(bucket)
        with pytest.raises(Unavailable):
            service.report_event(coordinator, event("STEP_PROGRESS", 2, execution_handle=contexts[0].execution_handle))
    after = mover.abort(bucket)
    assert after == before and after.state is RouteState.ACTIVE
    assert all(where(engines, t.task, t.task.c.id, ctx.task_id) == ["a"] for ctx in contexts)
    with engines["c"].connect() as conn:
        assert read_fences(conn, [bucket], lock=False) == {}
    sent = event("STEP_PROGRESS", 3, execution_handle=contexts[0].execution_handle)
    assert service.report_event(coordinator, sent)["accepted"]
    assert where(engines, t.task_event_log, t.task_event_log.c.event_id, sent.event_id) == ["a"]


def test_a_source_that_does_not_drain_within_the_fences_bound_aborts_the_move(
    engines: dict[str, sa.Engine], coordinator: ServicePrincipal
) -> None:
    service, shards = sharded_service(engines)
    bucket, contexts = bucket_of_tasks(service, shards, coordinator, "a", 1)
    late = [timedelta(0)]
    mover = BucketMover(engines["a"], engines, clock=lambda: utcnow() + late[0])

    def fence_then_age(bucket: int) -> BucketRoute:
        route = BucketMover.fence(mover, bucket)
        late[0] = FENCE_BOUND + timedelta(seconds=1)  # no relay runs: the outbox never drains
        return route

    mover.fence = fence_then_age  # type: ignore[method-assign]
    with pytest.raises(MoveFailed, match="drain"):
        mover.move(bucket, "b")
    route = mover.route(bucket)
    assert route.shard == "a" and route.state is RouteState.ACTIVE
    sent = event("STEP_PROGRESS", 2, execution_handle=contexts[0].execution_handle)
    assert service.report_event(coordinator, sent)["accepted"]
    assert where(engines, t.task, t.task.c.id, contexts[0].task_id) == ["a"]


def test_a_target_that_is_down_aborts_the_move_and_the_source_keeps_writing(
    engines: dict[str, sa.Engine], coordinator: ServicePrincipal
) -> None:
    service, shards = sharded_service(engines)
    bucket, contexts = bucket_of_tasks(service, shards, coordinator, "a", 1)
    down = create_engine("mysql+pymysql://tso:tso@127.0.0.1:1/gone", pool_pre_ping=False)  # nothing listens
    mover = BucketMover(engines["a"], {**engines, "c": down})
    with pytest.raises(sa.exc.OperationalError):
        mover.move(bucket, "c")
    route = mover.route(bucket)
    assert route.shard == "a" and route.state is RouteState.ACTIVE and route.target is None
    sent = event("STEP_PROGRESS", 2, execution_handle=contexts[0].execution_handle)
    assert service.report_event(coordinator, sent)["accepted"]
    assert where(engines, t.task_event_log, t.task_event_log.c.event_id, sent.event_id) == ["a"]


def test_a_bucket_on_two_shards_counts_its_unread_notifications_once(
    engines: dict[str, sa.Engine], coordinator: ServicePrincipal
) -> None:
    """While a bucket is copied (and after a move, until the old shard is released) its rows are on
    two shards: the user's unread count is the one they had, not twice it."""
    service, shards = sharded_service(engines)
    owner_id = owner_on(shards, coordinator.tenant_id, "a")
    owner = UserPrincipal(coordinator.tenant_id, owner_id)
    error = c.StepError(category="BUSINESS", code="DOC.BROKEN", user_message="The document is broken", retryable=False)
    for _ in range(2):
        task_id = create(service, coordinator, owner_id)
        failed = event("TASK_FAILED", 1, task_id=task_id, task_attempt=1, error=error)
        assert service.report_event(coordinator, failed)["accepted"]
    bucket = bucket_of(coordinator.tenant_id, owner_id)

    def unread() -> int:
        return int(service.my_notifications(owner, unread_only=True, cursor=None, limit=10)["unreadCount"])

    assert unread() == 2
    mover = BucketMover(engines["a"], engines)
    mover.copy(bucket, "b")
    with engines["b"].connect() as conn:  # the copy holds them too
        assert (
            conn.scalar(
                sa.select(sa.func.count())
                .select_from(t.user_notification)
                .where(t.user_notification.c.user_id == owner_id)
            )
            == 2
        )
    assert unread() == 2
    listed = service.my_notifications(owner, unread_only=True, cursor=None, limit=10)["notifications"]
    assert len(listed) == 2  # each once
    assert service.notifications.mark_read(owner, None) == {"marked": 2, "unreadCount": 0}
    mover.abort(bucket)
    assert unread() == 0
