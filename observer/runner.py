"""Wiring of the observer process from settings (used by ``task-observer observer``)."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING
from wsgiref.simple_server import WSGIServer

from prometheus_client import start_http_server

from observer import metrics
from observer.activities import ActivityProbe
from observer.database import DatabaseWatch
from observer.loops import LoopConfig, ObserverLoops, Reconciler, Retention
from observer.projector import WorkflowProjector
from observer.relay import OutboxRelay, RelayConfig
from observer.runs import RunFollower
from status import heap
from status.bootstrap import Components
from status.infra import temporal
from status.infra.centrifugo import CentrifugoApi
from status.infra.db import create_engine
from status.infra.probe import RowProbe
from status.infra.wakeup import WakeReceiver
from status.settings import Settings

if TYPE_CHECKING:
    from temporalio.worker import Worker

log = logging.getLogger("observer")


@dataclass
class Observer:
    relay: OutboxRelay
    projector: WorkflowProjector
    reconciler: Reconciler
    retention: Retention
    runs: RunFollower
    config: LoopConfig
    publisher: CentrifugoApi
    wake: WakeReceiver
    advertise_host: str | None = None
    slot: IO[str] | None = None  # holds this host's relay slot (see relay_identity)
    database: DatabaseWatch | None = None
    _housekept: float = 0.0

    async def start(self) -> None:
        """Take wake-ups: in-process, and on UDP (advertised with the relay's partitions)."""
        if self.reconciler.probe is not None:
            self.reconciler.probe.bind(asyncio.get_running_loop())
        address = await self.wake.start()
        if address and self.advertise_host:
            address = f"{self.advertise_host}:{address.rpartition(':')[2]}"
        self.relay.leases.wake_address = address

    async def close(self) -> None:
        if self.reconciler.probe is not None:
            self.reconciler.probe.close()  # a reconciler thread waiting on Temporal lets go
        self.wake.close()
        try:
            await self.relay.flush()
        except Exception:  # the rows stay PENDING and are published again (same keys)
            log.warning("could not record the last published batch; it will be published again")
        await self.publisher.aclose()
        try:
            await asyncio.to_thread(self.relay.release_partitions)
        except Exception:  # the database is gone: the leases simply run out
            log.warning("could not release the outbox partitions; other relays take them when the lease ends")
        self.projector.close()
        if self.slot is not None:
            self.slot.close()

    def passes(self) -> dict[str, Callable[[], Awaitable[object]]]:
        async def relay_pass() -> bool:  # busy only after a full batch (see ObserverLoops._relay_pass)
            if time.monotonic() - self._housekept > self.config.lease_check_interval:
                self._housekept = time.monotonic()
                await asyncio.to_thread(self.housekeeping)
            return (await self.relay.run_once(wait_for_mark=False)).claimed >= self.relay.config.batch_size

        return {
            "relay": relay_pass,
            "projector": lambda: asyncio.to_thread(self._projector_pass),
            "reconciler": lambda: asyncio.to_thread(self.reconciler.run_once),
            "retention": lambda: asyncio.to_thread(lambda: sum(self.retention.run_once().values())),
            "runs": self.runs.run_once,
            "completions": lambda: asyncio.to_thread(self.reconciler.watch_completions),
        }

    def housekeeping(self) -> None:
        """Beside the relay every few seconds (as ``ObserverLoops.relay_loop`` does): rows older relays
        left in flight, the outbox gauges, the database server's counters. A failure is logged and
        waits for the next round; it never stops the relay."""
        steps: list[Callable[[], object]] = [self.relay.take_over_expired_leases, self.relay.update_gauges]
        if self.database is not None:
            steps.append(self.database.run_once)
        for step in steps:
            try:
                step()
            except Exception as exc:
                metrics.LOOP_ERRORS.labels(loop="housekeeping").inc()
                log.warning("observer housekeeping failed (%s); next round in a few seconds", type(exc).__name__)

    def _projector_pass(self) -> bool:
        self.projector.run_once()
        return self.projector.last_claimed >= self.projector.batch_size

    def wake_events(self) -> dict[str, asyncio.Event]:
        """One wake-up event per component that has one (call after ``start``, on the running loop)."""
        return {"relay": self.wake.event(frozenset({"outbox"})), "projector": self.wake.event(frozenset({"feed"}))}

    def loops(self) -> ObserverLoops:
        events = self.wake_events()
        return ObserverLoops(
            self.relay,
            self.projector,
            self.reconciler,
            self.retention,
            self.config,
            relay_wake=events["relay"],
            projector_wake=events["projector"],
            runs=self.runs,
            database=self.database,
        )


def relay_identity(data_dir: Path) -> tuple[str, IO[str] | None]:
    """``<host>-relay<N>``: the lowest slot of this host no live observer holds (an flock in the data dir).

    A restarted observer (kill -9 included) gets its predecessor's id back and so
    re-takes its outbox partitions at once instead of waiting for their leases to end.
    The returned file holds the slot until it is closed (or the process ends).
    """
    host = socket.gethostname()
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        for slot in range(64):
            handle = (data_dir / f"relay-slot-{slot}.lock").open("a")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            return f"{host}-relay{slot}", handle
    except OSError:
        pass
    return f"{host}-{os.getpid()}", None


def observer_config(settings: Settings) -> LoopConfig:
    archive = settings.archive_dir
    if archive is not None and settings.sharded:
        # Each shard's observer archives its own shard's rows: a directory each, or the files of
        # two shards (named by table and date) would take each other's place.
        archive = archive / (settings.observe_shard or settings.shard_name)
    return LoopConfig(
        relay_idle_sleep=settings.relay_idle_ms / 1000,
        projector_idle_sleep=settings.relay_idle_ms / 1000,
        idle_backoff=settings.relay_idle_backoff,
        heartbeat_grace_seconds=settings.heartbeat_grace_seconds,
        retention=settings.retention_policy(),
        archive_dir=archive,
        run_follow_interval=settings.run_follow_interval_ms / 1000,
    )


def build_retention(parts: Components) -> Retention:
    """Retention alone (``task-observer retention``): it publishes nothing."""
    relay = OutboxRelay(parts.engine, None, "retention")  # type: ignore[arg-type]  # purges, never publishes
    return Retention(parts.engine, relay, observer_config(parts.settings))


def serve_metrics(settings: Settings) -> WSGIServer | None:
    """/metrics of the observer (outbox gauges, commit->publish latency, relay errors, reconciler
    transitions) on OBSERVER_METRICS_HOST:OBSERVER_METRICS_PORT, in a thread of its own; None when off."""
    if not settings.observer_metrics_port:
        return None
    server, _ = start_http_server(
        settings.observer_metrics_port, addr=settings.observer_metrics_host, registry=metrics.REGISTRY
    )
    return server


def build_observer(settings: Settings, parts: Components | None = None) -> Observer:
    """The observer over the composition root's parts (``parts``: shared with an API in this process)."""
    serve_metrics(settings)
    parts = parts if parts is not None else Components(settings)
    # The relay, the projector and retention serve one shard's rows (OBSERVE_SHARD); the reconciler
    # and the run follower go through the service, which reads and writes every shard.
    observed = settings.observe_shard or settings.shard_name
    engine, service = parts.shard_engines[observed], parts.service
    publisher = CentrifugoApi(settings.centrifugo_api_url, settings.centrifugo_api_key)
    config = observer_config(settings)
    relay_id, slot = relay_identity(settings.data_dir)
    relay = OutboxRelay(engine, publisher, relay_id, RelayConfig(log_sample=settings.change_log_sample))
    return Observer(
        relay=relay,
        projector=WorkflowProjector(parts.workflow_fold(observed), RowProbe(engine, WorkflowProjector.PROBE)),
        reconciler=Reconciler(service, config, ActivityProbe(lambda namespace: temporal.connect(settings, namespace))),
        retention=Retention(engine, relay, config),
        runs=RunFollower(
            service, lambda namespace: temporal.connect(settings, namespace), settings.followed_namespaces
        ),
        config=config,
        publisher=publisher,
        wake=WakeReceiver(parts.shard_signals[observed], settings.wakeup_host, settings.wakeup_port),
        advertise_host=settings.wakeup_advertise_host,
        slot=slot,
        database=DatabaseWatch(
            engine, create_engine(settings.replica_status_url, pool_size=1) if settings.replica_status_url else None
        ),
    )


async def run_loops(settings: Settings) -> None:
    observer = build_observer(settings)
    await observer.start()
    heap.settle()
    loops = observer.loops()
    _on_signals(loops.stop)
    log.info("observer running as asyncio loops")
    try:
        await loops.run()
    finally:
        await observer.close()


async def run_temporal(settings: Settings, run_seconds: float = 60.0) -> bool:
    """Run the components as activities of a Temporal worker until SIGTERM; False if the worker would not stop."""
    from temporalio.common import WorkflowIDConflictPolicy
    from temporalio.worker import Worker

    from observer.temporal import COMPONENTS, TASK_QUEUE, ObserverActivities, ObserverInput, ObserverWorkflow

    observer = build_observer(settings)
    await observer.start()
    client = await temporal.connect(settings)
    heap.settle()
    activities = ObserverActivities(
        observer.passes(),
        {
            "relay": observer.config.relay_idle_sleep,
            "projector": observer.config.projector_idle_sleep,
            "reconciler": observer.config.reconciler_interval,
            "retention": observer.config.retention_interval,
            "runs": observer.config.run_follow_interval,
            "completions": observer.config.run_follow_interval,
        },
        observer.wake_events(),
    )
    stop = asyncio.Event()
    _on_signals(stop.set)
    worker = Worker(
        client,
        task_queue=TASK_QUEUE,
        workflows=[ObserverWorkflow],
        activities=[activities.run_component],
        max_concurrent_activities=len(COMPONENTS) * 2,
    )
    running = asyncio.create_task(worker.run())
    for component in COMPONENTS:
        await client.start_workflow(
            ObserverWorkflow.run,
            ObserverInput(component, run_seconds),
            id=f"task-observer-{component}",
            task_queue=TASK_QUEUE,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
    log.info("observer running as Temporal activities on task queue %s", TASK_QUEUE)
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    log.info("stopping: cancelling the observer's activities")
    if observer.reconciler.probe is not None:
        observer.reconciler.probe.close()  # before the worker waits for its activities to end
    stopped = await stop_worker(worker, settings.observer_shutdown_seconds)
    log.info("worker stopped; closing the observer" if stopped else "closing the observer")
    await observer.close()
    log.info("observer stopped")
    if running.done() and not running.cancelled() and (failure := running.exception()) is not None:
        raise failure  # a fatal worker error ends the process with it (its supervisor restarts it)
    return stopped


async def stop_worker(worker: Worker, within: float) -> bool:
    """Shut the Temporal worker down, waiting at most ``within`` seconds; False if it did not finish.

    The SDK's shutdown waits for every activity to end and for the server to release the pollers;
    a component that does not take its cancellation, or a server that does not answer, would hold
    the process forever (temporalio/sdk-python#1557). Past the bound the process goes on to exit:
    its components' heartbeats stop, and Temporal hands them to another observer.
    """
    try:
        await asyncio.wait_for(worker.shutdown(), within)
    except TimeoutError:
        log.warning(
            "the Temporal worker did not shut down within %.0f s; exiting without it "
            "(its activities are retried elsewhere once their heartbeats time out)",
            within,
        )
        return False
    return True


def _on_signals(callback: Callable[[], None]) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, callback)
