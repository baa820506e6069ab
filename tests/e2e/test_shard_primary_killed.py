"""A shard's primary killed in the middle of moving a bucket (status/infra/bucket_move.py), each
shard of the move a MariaDB server of its own, killed as a crash kills it (SIGKILL) while a
producer keeps sending: nothing acknowledged is lost or stored twice, no version is reused or
skipped, and the bucket is written by one shard at a time — the source again once the move is
aborted, the target once a later move completes."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from status.domain.auth import Role, ServicePrincipal
from status.domain.buckets import BucketRoute, RouteState
from status.infra import migrate
from status.infra import tables as t
from status.infra.bucket_move import BucketMover
from status.infra.db import create_engine
from status.infra.shards import install_map, read_fences
from tests.conftest import _migrated_mariadb
from tests.support.factories import event, now
from tests.support.processes import CentrifugoNode, free_port, needs_service
from tests.support.relay_pump import RelayPump
from tests.support.shards import (
    Producer,
    Projectors,
    bucket_of_tasks,
    event_log,
    retryable,
    sharded_service,
    wait_for,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "deploy"))
from localdb import LocalServer, grant_service_account  # type: ignore[import-not-found]

USER, PASSWORD, DATABASE = "tso", "tso", "tso_shard"


class Shard:
    """A shard on a MariaDB server of its own, which the test may kill and start again."""

    def __init__(self, name: str, workdir: Path) -> None:
        self.server = LocalServer(name, workdir, free_port())
        self.url = f"mysql+pymysql://{USER}:{PASSWORD}@127.0.0.1:{self.server.port}/{DATABASE}?charset=utf8mb4"

    def start(self) -> None:
        self.server.start()
        self.server.wait()

    def kill(self) -> None:
        self.server.stop(signal.SIGKILL)


@pytest.fixture
def shards() -> Iterator[dict[str, Shard]]:
    """The source and the target of the moves: two servers, each with a migrated database."""
    needs_service("MariaDB", "scripts/services up mariadb")
    # A directory the server's own user can reach (pytest's temporary directories are the runner's alone).
    workdir = Path(tempfile.mkdtemp(prefix="shard-servers-"))
    os.chmod(workdir, 0o755)
    started = {name: Shard(name, workdir) for name in ("source", "target")}
    try:
        for shard in started.values():
            shard.start()
            grant_service_account(shard.server.socket, USER, PASSWORD)
            shard.server.run(f"CREATE DATABASE {DATABASE} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
            migrate.upgrade(shard.url)
        yield started
    finally:
        for shard in started.values():
            shard.kill()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def engines(shards: dict[str, Shard]) -> Iterator[dict[str, sa.Engine]]:
    """The control store (a database of the usual server, holding buckets too) and the two shards."""
    maker = _migrated_mariadb()
    home = next(maker)
    engines = {"home": create_engine(home), **{name: create_engine(shard.url) for name, shard in shards.items()}}
    install_map(engines["home"], engines, now())
    yield engines
    for engine in engines.values():
        engine.dispose()
    next(maker, None)


@pytest.fixture
def coordinator() -> ServicePrincipal:
    return ServicePrincipal("coordinator-1", f"tenant-{uuid.uuid4().hex[:8]}", "content", frozenset({Role.COORDINATOR}))


def _kill_after_fence(mover: BucketMover, shard: Shard) -> None:
    """The move's fence commits, then ``shard``'s server dies before anything else is done."""

    def fence_then_kill(bucket: int) -> BucketRoute:
        route = BucketMover.fence(mover, bucket)
        shard.kill()
        return route

    mover.fence = fence_then_kill  # type: ignore[method-assign]


def _check_log(engine: sa.Engine, producer: Producer, tasks: list[str]) -> None:
    """Every acknowledged event stored once, at the version it was acknowledged with; each task's
    versions contiguous."""
    log = event_log(engine, tasks)
    stored = [event_id for event_id, _, _ in log]
    assert len(stored) == len(set(stored))  # nothing twice
    at = {event_id: (task, version) for event_id, task, version in log}
    assert all(at.get(event_id) == acked for event_id, acked in producer.acked.items())  # nothing lost
    for task_id in tasks:
        versions = sorted(v for _, task, v in log if task == task_id)
        assert versions == list(range(versions[0], versions[0] + len(versions)))  # none reused or skipped


def test_the_targets_primary_killed_mid_move_aborts_it_and_the_source_keeps_every_write(
    shards: dict[str, Shard], engines: dict[str, sa.Engine], coordinator: ServicePrincipal, centrifugo: CentrifugoNode
) -> None:
    service, sharded = sharded_service(engines, control="home")
    bucket, contexts = bucket_of_tasks(service, sharded, coordinator, "source", 3)
    tasks = [ctx.task_id for ctx in contexts]
    mover = BucketMover(engines["home"], engines)
    _kill_after_fence(mover, shards["target"])
    # The source's relay and projector: the move waits for them to drain the bucket before it switches.
    with (
        RelayPump(engines["source"], centrifugo.api_url, centrifugo.api_key),
        Projectors({"source": engines["source"]}),
        Producer(service, coordinator, contexts) as producer,
    ):
        wait_for(lambda: len(producer.acked) >= 30 or producer.failure is not None)
        with pytest.raises(sa.exc.OperationalError):  # the catch-up's write to the dead target
            mover.move(bucket, "target")
        route = mover.route(bucket)
        assert (route.shard, route.state, route.target) == ("source", RouteState.ACTIVE, None)
        aborted_at = len(producer.acked)
        wait_for(lambda: len(producer.acked) >= aborted_at + 30 or producer.failure is not None)
    assert producer.failure is None, producer.failure
    _check_log(engines["source"], producer, tasks)
    reached = producer.seq

    # The target back (its copy of the bucket inert: no fence row lets anything write it there),
    # the next move replaces that copy and completes; the bucket's writes go on there.
    shards["target"].start()
    mover = BucketMover(engines["home"], engines)
    with (
        RelayPump(engines["source"], centrifugo.api_url, centrifugo.api_key),
        Projectors({"source": engines["source"]}),
        Producer(service, coordinator, contexts, after_seq=reached) as producer,
    ):
        wait_for(lambda: len(producer.acked) >= 15 or producer.failure is not None)
        report = mover.move(bucket, "target")
        moved_at = len(producer.acked)
        wait_for(lambda: len(producer.acked) >= moved_at + 15 or producer.failure is not None)
    assert producer.failure is None, producer.failure
    assert mover.route(bucket) == BucketRoute(bucket, report.epoch, "target")
    _check_log(engines["target"], producer, tasks)


def test_the_sources_primary_killed_mid_move_leaves_the_bucket_unwritten_until_it_is_back_and_aborted(
    shards: dict[str, Shard], engines: dict[str, sa.Engine], coordinator: ServicePrincipal
) -> None:
    service, sharded = sharded_service(engines, control="home")
    bucket, contexts = bucket_of_tasks(service, sharded, coordinator, "source", 3)
    tasks = [ctx.task_id for ctx in contexts]
    mover = BucketMover(engines["home"], engines)
    _kill_after_fence(mover, shards["source"])
    with Producer(service, coordinator, contexts) as producer:
        wait_for(lambda: len(producer.acked) >= 30 or producer.failure is not None)
        # The drain check cannot reach the source, nor can the abort restore its fence: the move
        # stays in its cut-over, and no shard takes the bucket's writes — the target holds no fence
        # for it, and the source's says not writable.
        with pytest.raises(sa.exc.OperationalError):
            mover.move(bucket, "target")
        assert mover.route(bucket).state is RouteState.CUTOVER
        with engines["target"].connect() as conn:
            assert read_fences(conn, [bucket], lock=False) == {}
        with pytest.raises(Exception) as refused:
            late = event("STEP_PROGRESS", 10_000, execution_handle=contexts[0].execution_handle)
            service.report_event(coordinator, late)
        assert retryable(refused.value), refused.value  # 503: the producer sends it again later
        down_at = len(producer.acked)

        # The source back with what it had committed; the operator aborts the move (the source's
        # fence writable at its epoch again), and the producer's retries land there.
        shards["source"].start()
        route = mover.abort(bucket)
        assert (route.shard, route.state, route.target) == ("source", RouteState.ACTIVE, None)
        wait_for(lambda: len(producer.acked) >= down_at + 30 or producer.failure is not None)
    assert producer.failure is None, producer.failure
    _check_log(engines["source"], producer, tasks)
    with engines["target"].connect() as conn:  # the abort removed the target's copy
        assert conn.scalar(sa.select(sa.func.count()).select_from(t.task).where(t.task.c.id.in_(tasks))) == 0
