"""The observer's passes and the plain-asyncio way of running them (``--mode loops``).

Each component exposes one bounded pass; ``ObserverLoops`` runs them
forever.  The relay and the projector sleep until woken (a commit that wrote
outbox or projector-feed rows, see ``status.infra.wakeup``) or until a slow
safety poll, so an idle observer costs next to nothing and a lost wake-up only
delays.  The reconciler gets a grace period after start and after database
errors (design D8.7: no false STALE burst after an outage); retention purges in
bounded batches (design D8.16).  The same passes back the Temporal activities of
``observer.temporal``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from observer import metrics
from observer.activities import ActivityProbe
from observer.database import DatabaseWatch
from observer.projector import WorkflowProjector
from observer.relay import OutboxRelay
from observer.runs import RunFollower
from status import logs
from status.app.service import StatusService
from status.domain.retention import RetentionPolicy, cutoff
from status.domain.silence import ingest_silent, stale_cutoff
from status.infra import retention
from status.infra.archive import ArchiveError, ArchiveWriter
from status.infra.outbox_store import is_database_error

if TYPE_CHECKING:
    import sqlalchemy as sa

log = logs.get("observer")
T = TypeVar("T")
OVERDUE_GAUGE_LIMIT = 10_000  # the gauge counts at most this many (an alert needs no more)


@dataclass
class IdleBackoff:
    """How long an idle consumer waits for a wake-up before it looks anyway (its safety poll).

    ``base`` after a look that found work, then doubling with each look that found nothing, up to
    ``limit``. A commit's wake-up ends any wait at once, so this only decides how late a lost
    wake-up is noticed — ``base`` while there is work about, ``limit`` at most on a system that
    has been idle a while — and lets an idle observer pay next to nothing per second (fixed
    costs follow the load).
    """

    base: float
    limit: float
    _wait: float = 0.0

    def after(self, found: bool) -> float:
        """The wait after a look (``found``: it had work)."""
        self._wait = self.base if found or not self._wait else min(self.limit, self._wait * 2)
        return self._wait


@dataclass
class LoopConfig:
    # Without a wake-up, an idle relay/projector looks again after this long (the safety poll),
    # doubling while looks find nothing, up to ``idle_backoff`` times as long (IdleBackoff).
    relay_idle_sleep: float = 1.0
    projector_idle_sleep: float = 1.0
    idle_backoff: float = 8.0
    reconciler_interval: float = 5.0  # STALE is decided after a heartbeat timeout of tens of seconds
    reconciler_batch: int = 200
    heartbeat_grace_seconds: float = 30.0
    # An ingest outage suspends STALE for at most this long (then a silent fleet is silent).
    stale_suspension_limit_seconds: float = 300.0
    overdue_interval: float = 60.0  # how often the overdue_tasks gauge is counted
    retention_interval: float = 60.0
    run_follow_interval: float = 1.0  # how often Temporal's closed runs are read (observer/runs.py)
    lease_check_interval: float = 10.0  # outbox gauges, and rows older relays left in flight
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    # Event-log and correction rows are archived here before they are deleted (None: never deleted).
    archive_dir: Path | None = None
    retention_batch: int = 5000
    # A pass stops after this many batches per kind of data (the next pass goes on from the watermark).
    retention_batches_per_pass: int = 20


class Retention:
    """design D8.16, D14.1: each kind of data purged past its own window, in bounded batches
    that walk a watermark; the event log and corrections are archived (``status.infra.archive``),
    read back and checked, and only then deleted.  Published outbox rows go through the relay."""

    def __init__(self, engine: sa.Engine, relay: OutboxRelay, config: LoopConfig) -> None:
        self.engine = engine
        self.relay = relay
        self.config = config
        self.archive = ArchiveWriter(config.archive_dir) if config.archive_dir is not None else None
        self._warned = False

    def run_once(self) -> dict[str, int]:
        now = self.relay.now()
        policy, batch, engine = self.config.retention, self.config.retention_batch, self.engine
        purges: dict[str, tuple[timedelta | None, Callable[[datetime], int]]] = {
            "task_outbox": (policy.outbox, partial(self.relay.purge_published, batch=batch)),
            "task_event_dedup": (
                policy.dedup,
                partial(retention.purge_older, engine, "task_event_dedup", batch=batch, now=now),
            ),
            "user_notification": (
                policy.notifications,
                partial(retention.purge_older, engine, "user_notification", batch=batch, now=now),
            ),
            "task_event_log": (policy.events, partial(self._archive_then_delete, "task_event_log", now=now)),
            "task_correction": (policy.corrections, partial(self._archive_then_delete, "task_correction", now=now)),
            "task": (policy.terminal_tasks, partial(retention.purge_terminal_tasks, engine, batch=batch, now=now)),
            "workflow": (policy.terminal_tasks, partial(retention.purge_finished_workflows, engine, batch=batch)),
        }
        purged: dict[str, int] = {}
        for name, (window, purge) in purges.items():
            bound = cutoff(now, window)
            purged[name] = 0 if bound is None else self._batches(purge, bound)
            if name != "task_outbox":  # the relay counts its own
                metrics.PURGED.labels(table=name).inc(purged[name])
        retention.purge_expired_grants(engine, now)
        for name, position in retention.watermarks(engine).items():
            metrics.RETENTION_WATERMARK.labels(purge=name).set(position.replace(tzinfo=UTC).timestamp())
        self._gauge_what_is_left(now)
        return purged

    def _gauge_what_is_left(self, now: datetime) -> None:
        """How far each purge is behind its window, and how large the tables are: a purge that
        cannot keep up shows as a lag that grows, long before the disk fills."""
        windows = {
            "task_event_dedup": self.config.retention.dedup,
            "user_notification": self.config.retention.notifications,
            # Kept forever without an archive to move them to (their purge is off).
            "task_event_log": self.config.retention.events if self.archive is not None else None,
            "task_correction": self.config.retention.corrections if self.archive is not None else None,
        }
        for name, window in windows.items():
            bound = cutoff(now, window)
            oldest = None if bound is None else retention.oldest_kept(self.engine, name, bound)
            lag = 0.0 if bound is None or oldest is None else (bound - oldest).total_seconds()
            metrics.RETENTION_LAG.labels(table=name).set(max(0.0, lag))
        for name, (rows, size) in retention.table_sizes(self.engine).items():
            metrics.TABLE_ROWS.labels(table=name).set(rows)
            metrics.TABLE_BYTES.labels(table=name).set(size)

    def _batches(self, one: Callable[[datetime], int], bound: datetime) -> int:
        """Run ``one`` batch after another while they come back full, at most the configured number."""
        total = 0
        for _ in range(self.config.retention_batches_per_pass):
            done = one(bound)
            total += done
            if done < self.config.retention_batch:
                break
        return total

    def _archive_then_delete(self, name: str, bound: datetime, *, now: datetime) -> int:
        if self.archive is None:
            if not self._warned:
                self._warned = True
                log.warning("no archive directory: event-log and correction rows are kept past their retention")
            return 0
        rows = retention.oldest_rows(self.engine, name, bound, self.config.retention_batch)
        if not rows:
            return 0
        aged = retention.AGED[name]
        try:
            archived = self.archive.write(name, rows, aged.key, aged.dated_by, now)
        except (ArchiveError, OSError) as exc:
            metrics.ARCHIVE_FAILURES.labels(table=name).inc()
            log.error("archive failed; nothing was deleted", table=name, reason=str(exc)[:300])
            return 0
        metrics.ARCHIVED.labels(table=name).inc(archived.rows)
        # Fewer than archived when another observer's pass deleted them first: the batch stops here.
        return retention.delete_rows(self.engine, name, rows, bound, now)


class Reconciler:
    """design D8.7: overdue executions become STALE through the event transaction, with a grace period.

    In a fleet, a step goes STALE only when others were heard after its deadline
    (``status.domain.silence.stale_cutoff``): at the start of an ingest outage nobody is, and
    the steps that beat a little before the newest beat wait instead of expiring first.
    The grace covers the reconciler's own start and database errors it sees, and an ingest outage
    it infers: when no running executor anywhere has been heard for several heartbeat intervals
    (``status.domain.silence``), the silence is the reporting path's, not the workers' — STALE
    waits until heartbeats arrive again and a grace period has passed (at most
    ``stale_suspension_limit_seconds``: a fleet that died together does go STALE).
    """

    def __init__(self, service: StatusService, config: LoopConfig, probe: ActivityProbe | None = None) -> None:
        self.service = service
        self.config = config
        # Asks Temporal about a silent attempt's activity before it goes STALE (observer/activities.py).
        self.probe = probe
        self.quiet_until = service.now() + timedelta(seconds=config.heartbeat_grace_seconds)
        self.silent_since: datetime | None = None
        self._overdue_counted_at: datetime | None = None

    def database_failed(self) -> None:
        """After a database error, heartbeats could not land: wait a grace period again."""
        self.quiet_until = self.service.now() + timedelta(seconds=self.config.heartbeat_grace_seconds)

    def run_once(self) -> int:
        now = self.service.now()
        self._count_overdue(now)
        if now < self.quiet_until:
            return 0
        census = self.service.heartbeat_census()
        # A step goes STALE when others were heard after its deadline (its silence is its own).
        due_by = stale_cutoff(census, now)
        if ingest_silent(census, now):
            if self.silent_since is None:
                self.silent_since = now
                log.warning("no executor has been heard for several heartbeat intervals; STALE is suspended")
            metrics.STALE_SUSPENDED.set(1)
            if (now - self.silent_since).total_seconds() < self.config.stale_suspension_limit_seconds:
                return 0
            due_by = now  # silent past the limit: the fleet died together, every overdue step is STALE
        elif self.silent_since is not None:
            self.silent_since = None
            metrics.STALE_SUSPENDED.set(0)
            self.quiet_until = now + timedelta(seconds=self.config.heartbeat_grace_seconds)
            log.info("heartbeats arrive again; STALE resumes after the grace period")
            return 0
        ask = self.probe.ask if self.probe is not None else None
        changed = self.service.mark_stale(limit=self.config.reconciler_batch, ask=ask, due_by=due_by)
        metrics.RECONCILER_TRANSITIONS.labels(to="STALE").inc(len(changed))
        return len(changed)

    def watch_completions(self) -> int:
        """Attempts whose activity completes elsewhere end as Temporal recorded them."""
        if self.probe is None:
            return 0
        return len(self.service.watch_completions(self.probe.ask, limit=self.config.reconciler_batch))

    def _count_overdue(self, now: datetime) -> None:
        """The overdue_tasks gauge and the heartbeats' freshness, refreshed every ``overdue_interval``
        (reads, never a write)."""
        last = self._overdue_counted_at
        if last is not None and (now - last).total_seconds() < self.config.overdue_interval:
            return
        self._overdue_counted_at = now
        metrics.OVERDUE_TASKS.set(len(self.service.overdue(None, limit=OVERDUE_GAUGE_LIMIT)))
        fresh = self.service.heartbeat_freshness(metrics.HEARTBEAT_AGE_BUCKETS)
        metrics.RUNNING_HEARTBEATS.set(fresh.running)
        metrics.RUNNING_HEARTBEATS_OVERDUE.set(fresh.overdue)
        metrics.HEARTBEAT_AGES.set(fresh.running, fresh.heard_within, fresh.age_sum_seconds)


class ObserverLoops:
    """Relay, projector, reconciler and retention as asyncio tasks in one process."""

    def __init__(
        self,
        relay: OutboxRelay,
        projector: WorkflowProjector,
        reconciler: Reconciler,
        retention: Retention,
        config: LoopConfig,
        relay_wake: asyncio.Event | None = None,
        projector_wake: asyncio.Event | None = None,
        runs: RunFollower | None = None,
        database: DatabaseWatch | None = None,
    ) -> None:
        self.runs = runs
        self.database = database
        self.relay = relay
        self.projector = projector
        self.reconciler = reconciler
        self.retention = retention
        self.config = config
        self._stop = asyncio.Event()
        self._relay_wake = relay_wake or asyncio.Event()
        self._projector_wake = projector_wake or asyncio.Event()
        self._problems = logs.ProblemLog(log)

    def stop(self) -> None:
        self._stop.set()
        self._relay_wake.set()
        self._projector_wake.set()

    async def _sleep(self, seconds: float, wake: asyncio.Event | None = None) -> None:
        """Until ``seconds`` pass, the loops stop, or ``wake`` is set."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for((wake or self._stop).wait(), seconds)

    async def _guard(self, name: str, run_pass: Callable[[], Awaitable[T]]) -> T | None:
        """Run one pass; errors are counted and backed off (logged once per outage), never fatal to
        the loop. What the pass returned; None after an error."""
        try:
            result = await run_pass()
        except Exception as exc:
            metrics.LOOP_ERRORS.labels(loop=name).inc()
            if is_database_error(exc):
                problem = "observer pass failed on the database; backing off"
                self._problems.failed(name, problem, code=type(exc).__name__)
                self.reconciler.database_failed()
            else:
                self._problems.failed(name, "observer pass failed; backing off", code=type(exc).__name__)
            await self._sleep(1.0)
            return None
        self._problems.cleared(name, "observer pass works again")
        return result

    async def relay_loop(self) -> None:
        last_lease_check = 0.0
        idle = IdleBackoff(self.config.relay_idle_sleep, self.config.relay_idle_sleep * self.config.idle_backoff)
        while not self._stop.is_set():
            if time.monotonic() - last_lease_check > self.config.lease_check_interval:
                await self._guard("lease", lambda: asyncio.to_thread(self.relay.take_over_expired_leases))
                await self._guard("gauges", lambda: asyncio.to_thread(self.relay.update_gauges))
                if self.database is not None:
                    await self._guard("database", lambda: asyncio.to_thread(self.database.run_once))  # type: ignore[union-attr]
                last_lease_check = time.monotonic()
            # Cleared before the pass: a commit during the pass wakes the next one.
            self._relay_wake.clear()
            claimed = await self._guard("relay", self._relay_pass) or 0
            # Another pass at once only after a full batch: a partial one took all there was, and
            # rows committed since have woken the loop already (it clears its event before a pass).
            if claimed < self.relay.config.batch_size:
                await self._sleep(idle.after(claimed > 0), self._relay_wake)

    async def _relay_pass(self) -> int:
        result = await self.relay.run_once(wait_for_mark=False)
        return result.claimed

    def _projector_pass(self) -> int:
        self.projector.run_once()
        return self.projector.last_claimed

    async def projector_loop(self) -> None:
        base = self.config.projector_idle_sleep
        idle = IdleBackoff(base, base * self.config.idle_backoff)
        while not self._stop.is_set():
            self._projector_wake.clear()
            claimed = await self._guard("projector", lambda: asyncio.to_thread(self._projector_pass)) or 0
            if claimed < self.projector.batch_size:
                await self._sleep(idle.after(claimed > 0), self._projector_wake)

    async def reconciler_loop(self) -> None:
        while not self._stop.is_set():
            await self._guard("reconciler", lambda: asyncio.to_thread(self.reconciler.run_once))
            await self._sleep(self.config.reconciler_interval)

    async def retention_loop(self) -> None:
        while not self._stop.is_set():
            await self._guard("retention", lambda: asyncio.to_thread(self.retention.run_once))
            await self._sleep(self.config.retention_interval)

    async def runs_loop(self) -> None:
        """Temporal's verdict: tasks whose run closed without their workflow code ending them."""
        runs = self.runs
        if runs is None:
            return
        await self._every(self.config.run_follow_interval, "runs", runs.run_once)

    async def completions_loop(self) -> None:
        """Activities completed through their task token: asked of Temporal as often as closed runs."""
        if self.reconciler.probe is None:
            return
        await self._every(
            self.config.run_follow_interval, "completions", lambda: asyncio.to_thread(self.reconciler.watch_completions)
        )

    async def _every(self, interval: float, name: str, run_pass: Callable[[], Awaitable[object]]) -> None:
        """A pass every ``interval`` seconds from the start of the last (not ``interval`` after its
        end): how soon Temporal's record shows is the interval plus visibility's own lag, not plus
        the pass's Temporal calls too."""
        while not self._stop.is_set():
            started = time.monotonic()
            await self._guard(name, run_pass)
            await self._sleep(max(0.0, interval - (time.monotonic() - started)))

    async def run(self) -> None:
        await asyncio.gather(
            self.relay_loop(),
            self.projector_loop(),
            self.reconciler_loop(),
            self.retention_loop(),
            self.runs_loop(),
            self.completions_loop(),
        )
        await self._guard("relay", self.relay.flush)  # the last batch's mark, before the process ends
