"""Wiring of the observer process from settings (used by ``task-observer observer``)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta

from prometheus_client import start_http_server

from observer import metrics
from observer.centrifugo import CentrifugoPublisher
from observer.loops import LoopConfig, ObserverLoops, Reconciler, Retention
from observer.projector import WorkflowProjector
from observer.relay import OutboxRelay
from status.bootstrap import build_service
from status.infra.db import create_engine
from status.settings import Settings

log = logging.getLogger("observer")


@dataclass
class Observer:
    relay: OutboxRelay
    projector: WorkflowProjector
    reconciler: Reconciler
    retention: Retention
    config: LoopConfig
    publisher: CentrifugoPublisher

    def passes(self) -> dict[str, Callable[[], Awaitable[object]]]:
        async def relay_pass() -> bool:
            return (await self.relay.run_once()).claimed > 0

        return {
            "relay": relay_pass,
            "projector": lambda: asyncio.to_thread(self.projector.run_once),
            "reconciler": lambda: asyncio.to_thread(self.reconciler.run_once),
            "retention": lambda: asyncio.to_thread(lambda: sum(self.retention.run_once().values())),
        }

    def loops(self) -> ObserverLoops:
        return ObserverLoops(self.relay, self.projector, self.reconciler, self.retention, self.config)


def build_observer(settings: Settings) -> Observer:
    if settings.observer_metrics_port:
        # /metrics of the observer: outbox gauges, commit->publish latency, relay errors, reconciler transitions.
        start_http_server(settings.observer_metrics_port, addr="127.0.0.1", registry=metrics.REGISTRY)
    engine = create_engine(settings.database_url)
    service = build_service(settings, engine)
    publisher = CentrifugoPublisher(settings.centrifugo_api_url, settings.centrifugo_api_key)
    config = LoopConfig(
        relay_idle_sleep=settings.relay_idle_ms / 1000,
        heartbeat_grace_seconds=settings.heartbeat_grace_seconds,
        outbox_retention=timedelta(seconds=settings.outbox_retention_seconds),
        dedup_retention=timedelta(seconds=settings.dedup_retention_seconds),
        event_retention=timedelta(seconds=settings.event_retention_seconds),
    )
    relay = OutboxRelay(engine, publisher, f"{socket.gethostname()}-{os.getpid()}")
    return Observer(
        relay=relay,
        projector=WorkflowProjector(engine),
        reconciler=Reconciler(service, config),
        retention=Retention(engine, relay, config),
        config=config,
        publisher=publisher,
    )


async def run_loops(settings: Settings) -> None:
    observer = build_observer(settings)
    loops = observer.loops()
    _on_signals(loops.stop)
    log.info("observer running as asyncio loops")
    try:
        await loops.run()
    finally:
        await observer.publisher.aclose()
        observer.relay.close()
        observer.projector.close()


async def run_temporal(settings: Settings, run_seconds: float = 60.0) -> None:
    from temporalio.client import Client
    from temporalio.common import WorkflowIDConflictPolicy
    from temporalio.worker import Worker

    from observer.temporal import COMPONENTS, TASK_QUEUE, ObserverActivities, ObserverInput, ObserverWorkflow

    observer = build_observer(settings)
    client = await Client.connect(settings.temporal_address, namespace=settings.temporal_namespace)
    activities = ObserverActivities(
        observer.passes(),
        {
            "relay": observer.config.relay_idle_sleep,
            "projector": observer.config.projector_idle_sleep,
            "reconciler": observer.config.reconciler_interval,
            "retention": observer.config.retention_interval,
        },
    )
    stop = asyncio.Event()
    _on_signals(stop.set)
    async with Worker(
        client,
        task_queue=TASK_QUEUE,
        workflows=[ObserverWorkflow],
        activities=[activities.run_component],
        max_concurrent_activities=len(COMPONENTS) * 2,
    ):
        for component in COMPONENTS:
            await client.start_workflow(
                ObserverWorkflow.run,
                ObserverInput(component, run_seconds),
                id=f"task-observer-{component}",
                task_queue=TASK_QUEUE,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            )
        log.info("observer running as Temporal activities on task queue %s", TASK_QUEUE)
        await stop.wait()
    await observer.publisher.aclose()
    observer.relay.close()
    observer.projector.close()


def _on_signals(callback: Callable[[], None]) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, callback)
