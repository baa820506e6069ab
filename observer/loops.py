"""The observer's passes and the plain-asyncio way of running them (``--mode loops``).

Each component exposes one bounded pass; ``ObserverLoops`` runs them
forever with short sleeps when idle, a grace period for the reconciler after
start and after database errors (R7: no false STALE burst after an outage),
and bounded retention batches (R16).  The same passes back the Temporal
activities of ``observer.temporal``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta

import sqlalchemy as sa

from observer import metrics
from observer.projector import WorkflowProjector
from observer.relay import OutboxRelay
from status.app.service import StatusService
from status.infra import tables as t

log = logging.getLogger("observer")


@dataclass
class LoopConfig:
    relay_idle_sleep: float = 0.02
    projector_idle_sleep: float = 0.1
    reconciler_interval: float = 2.0
    reconciler_batch: int = 200
    heartbeat_grace_seconds: float = 30.0
    retention_interval: float = 60.0
    lease_check_interval: float = 5.0
    outbox_retention: timedelta = timedelta(hours=24)
    dedup_retention: timedelta = timedelta(days=7)
    event_retention: timedelta = timedelta(days=30)
    retention_batch: int = 5000


class Retention:
    """Bounded purges of dedup results and old events (R16); published outbox rows via the relay."""

    def __init__(self, engine: sa.Engine, relay: OutboxRelay, config: LoopConfig) -> None:
        self.engine = engine
        self.relay = relay
        self.config = config

    def run_once(self) -> dict[str, int]:
        now = self.relay.now()
        purged = {"task_outbox": self.relay.purge_published(self.config.outbox_retention, self.config.retention_batch)}
        for table, column, window in (
            (t.task_event_dedup, t.task_event_dedup.c.created_at, self.config.dedup_retention),
            (t.task_event_log, t.task_event_log.c.committed_at, self.config.event_retention),
        ):
            key = next(iter(table.primary_key.columns))
            with self.engine.begin() as conn:
                ids = list(conn.scalars(sa.select(key).where(column < now - window).limit(self.config.retention_batch)))
                if ids:
                    conn.execute(sa.delete(table).where(key.in_(ids)))
            purged[table.name] = len(ids)
            metrics.PURGED.labels(table=table.name).inc(len(ids))
        with self.engine.begin() as conn:
            conn.execute(sa.delete(t.realtime_grant).where(t.realtime_grant.c.expires_at < now))
        return purged


class Reconciler:
    """R7: overdue executions become STALE through the event transaction, with a grace period."""

    def __init__(self, service: StatusService, config: LoopConfig) -> None:
        self.service = service
        self.config = config
        self.quiet_until = time.monotonic() + config.heartbeat_grace_seconds

    def database_failed(self) -> None:
        """After a database error, heartbeats could not land: wait a grace period again."""
        self.quiet_until = time.monotonic() + self.config.heartbeat_grace_seconds

    def run_once(self) -> int:
        if time.monotonic() < self.quiet_until:
            return 0
        changed = self.service.mark_stale(limit=self.config.reconciler_batch)
        metrics.RECONCILER_TRANSITIONS.labels(to="STALE").inc(len(changed))
        return len(changed)


class ObserverLoops:
    """Relay, projector, reconciler and retention as asyncio tasks in one process."""

    def __init__(
        self,
        relay: OutboxRelay,
        projector: WorkflowProjector,
        reconciler: Reconciler,
        retention: Retention,
        config: LoopConfig,
    ) -> None:
        self.relay = relay
        self.projector = projector
        self.reconciler = reconciler
        self.retention = retention
        self.config = config
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)

    async def _guard(self, name: str, run_pass: Callable[[], Awaitable[object]]) -> bool:
        """Run one pass; errors are logged, counted and backed off, never fatal to the loop."""
        try:
            return bool(await run_pass())
        except sa.exc.DBAPIError:
            metrics.LOOP_ERRORS.labels(loop=name).inc()
            log.exception("%s pass failed on the database; backing off", name)
            self.reconciler.database_failed()
            await self._sleep(1.0)
        except Exception:
            metrics.LOOP_ERRORS.labels(loop=name).inc()
            log.exception("%s pass failed; backing off", name)
            await self._sleep(1.0)
        return False

    async def relay_loop(self) -> None:
        last_lease_check = 0.0
        while not self._stop.is_set():
            if time.monotonic() - last_lease_check > self.config.lease_check_interval:
                await self._guard("lease", lambda: asyncio.to_thread(self.relay.take_over_expired_leases))
                await self._guard("gauges", lambda: asyncio.to_thread(self.relay.update_gauges))
                last_lease_check = time.monotonic()
            busy = await self._guard("relay", self._relay_pass)
            if not busy:
                await self._sleep(self.config.relay_idle_sleep)

    async def _relay_pass(self) -> bool:
        result = await self.relay.run_once()
        return result.claimed > 0

    async def projector_loop(self) -> None:
        while not self._stop.is_set():
            busy = await self._guard("projector", lambda: asyncio.to_thread(self.projector.run_once))
            if not busy:
                await self._sleep(self.config.projector_idle_sleep)

    async def reconciler_loop(self) -> None:
        while not self._stop.is_set():
            await self._guard("reconciler", lambda: asyncio.to_thread(self.reconciler.run_once))
            await self._sleep(self.config.reconciler_interval)

    async def retention_loop(self) -> None:
        while not self._stop.is_set():
            await self._guard("retention", lambda: asyncio.to_thread(self.retention.run_once))
            await self._sleep(self.config.retention_interval)

    async def run(self) -> None:
        await asyncio.gather(self.relay_loop(), self.projector_loop(), self.reconciler_loop(), self.retention_loop())
