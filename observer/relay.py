"""Outbox relay (SPEC R14, seed §5.1–§5.3): committed outbox rows → Centrifugo.

One pass: claim PENDING rows in id order with ``FOR UPDATE SKIP LOCKED`` under
a lease (``locked_by``/``locked_at``), publish them *outside* the database
transaction, then mark each row PUBLISHED, back to PENDING with an
exponential, jittered ``available_at`` (retryable failures), or DEAD with a
redacted ``last_error`` (permanent failures).  Expired leases of crashed
relays are taken over.  Delivery is at least once; every message carries the
full state and its version, so clients converge whatever the duplicates.

Several relays share the work by **partition** (like Centrifugo's own
PostgreSQL outbox consumer): a row's partition is a hash of its channel, and
``outbox_partition`` gives each partition to one live relay at a time under a
renewed lease, each relay holding its fair share of the relays alive in
``outbox_relay`` (a newcomer is seen before it holds anything).  A relay publishes only its
partitions, in id order and sequentially, so every channel's messages leave in
commit order however many relays run.  A relay that takes a partition whose
owner's lease ran out puts that partition's in-flight rows back to PENDING.

Every publication carries the row's random ``publish_key`` as Centrifugo's
idempotency key: a retry of the same row is dropped by Centrifugo, a new row is
never mistaken for an old one (restores, failovers and re-created databases
reuse auto-increment ids, never random keys).
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

import sqlalchemy as sa

from observer import metrics
from observer.probe import RowProbe
from status import logs
from status.infra import tables as t
from status.infra.centrifugo import CentrifugoApi, Publication, PublishResult, TransportError, Unauthorized
from status.infra.repository import OUTBOX_PARTITIONS, now_ms
from status.infra.uow import is_retryable

T = TypeVar("T")

log = logs.get("observer.relay")
ot = t.task_outbox
op = t.outbox_partition
rt = t.outbox_relay

# Per-aggregate channels carry one aggregate's versions, so Centrifugo can skip
# stale publications by version; a user's summary channel interleaves many
# tasks with independent versions and must not use it.
VERSIONED_NAMESPACES = ("task_detail:", "workflow_summary:")
COALESCIBLE = ("USER_SUMMARY", "TASK_DETAIL", "PROJECT_BROADCAST")


@dataclass(frozen=True)
class ClaimedRow:
    id: int
    publish_key: str
    aggregate_type: str
    aggregate_id: str
    aggregate_version: int
    channel: str
    projection: str
    must_deliver: bool
    payload: dict[str, Any]
    attempts: int
    created_at: datetime
    payload_bytes: int = 0


@dataclass
class PassResult:
    claimed: int = 0
    published: int = 0
    coalesced: int = 0
    retried: int = 0
    dead: int = 0
    lag_seconds: list[float] = field(default_factory=list)


@dataclass
class RelayConfig:
    batch_size: int = 500
    lease_seconds: float = 30.0
    max_attempts: int = 20
    backoff_base_seconds: float = 0.5
    backoff_max_seconds: float = 60.0
    # Coalesce superseded summaries only when a claim holds this many rows (there is a
    # backlog); None: when the claim came back full, i.e. more rows wait behind it.
    coalesce_backlog: int | None = None
    # Partition leases: renewed every partition_renew_seconds, given up by others after
    # partition_lease_seconds without renewal (a crashed relay's partitions move on then).
    partition_lease_seconds: float = 10.0
    partition_renew_seconds: float = 2.0


# Literal SQL valid on MySQL/MariaDB and SQLite; served by the (status, id) index.
_PENDING_PROBE = "SELECT 1 FROM task_outbox WHERE status = 'PENDING' LIMIT 1"
# Both served by the (status, partition_no, id) index.
_PENDING_PARTITIONS = sa.select(ot.c.partition_no).where(ot.c.status == "PENDING").distinct()
_CLAIM_PARTITION = (
    sa.select(ot.c.id)
    .where(
        ot.c.status == "PENDING",
        ot.c.partition_no == sa.bindparam("_partition"),
        ot.c.available_at <= sa.bindparam("_now"),
    )
    .order_by(ot.c.id)
    .limit(sa.bindparam("_limit"))
    .with_for_update()
)


class OutboxRelay:
    def __init__(
        self,
        engine: sa.Engine,
        publisher: CentrifugoApi,
        relay_id: str,
        config: RelayConfig | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.engine = engine
        self.publisher = publisher
        self.relay_id = relay_id
        self.config = config or RelayConfig()
        self._clock = clock or (lambda: datetime.utcnow())
        self._pending = RowProbe(engine, _PENDING_PROBE)
        # Where this relay takes wake-up datagrams (advertised with its partitions).
        self.wake_address: str | None = None
        self._held: tuple[int, ...] = ()
        self._held_until = float("-inf")
        self._renew_at = float("-inf")
        self._problems = logs.ProblemLog(log)
        self._rotation = 0

    def now(self) -> datetime:
        return now_ms(self._clock())

    # ------------------------------------------------------------ partitions
    def partitions(self) -> tuple[int, ...]:
        """The partitions this relay may publish now (renewing its leases when due)."""
        if time.monotonic() >= self._renew_at:
            self._lease_partitions()
        return self._held if time.monotonic() < self._held_until else ()

    def _lease_partitions(self) -> None:
        config = self.config
        started = time.monotonic()
        now = self.now()
        lease_until = now + timedelta(seconds=config.partition_lease_seconds)
        first = self._renew_at == float("-inf")
        self._ensure_partition_rows()
        with self.engine.begin() as conn:
            # Lock order: the partition rows first (this serializes the relays' lease rounds).
            rows = conn.execute(
                sa.select(op.c.partition_no, op.c.relay_id, op.c.lease_until)
                .order_by(op.c.partition_no)
                .with_for_update()
            ).all()
            self._announce(conn, now, lease_until)
            if first:
                # A relay id outlives a crash (observer.runner keeps it per host slot): rows a
                # previous incarnation left in flight are nobody's now.
                _requeue(conn, ot.c.locked_by == self.relay_id)
            live = set(conn.scalars(sa.select(rt.c.relay_id).where(rt.c.alive_until > now))) | {self.relay_id}
            share = math.ceil(len(rows) / len(live))
            mine = [r.partition_no for r in rows if r.relay_id == self.relay_id]
            keep, release = mine[:share], mine[share:]
            free = [
                r
                for r in rows
                if r.relay_id != self.relay_id and (r.relay_id is None or r.lease_until is None or r.lease_until <= now)
            ]
            take = free[: max(0, share - len(keep))]
            held = sorted([*keep, *(r.partition_no for r in take)])
            # A partition whose owner stopped renewing: that relay is presumed dead, and
            # its in-flight rows would otherwise wait for their own lease to run out
            # while later rows of the same channels overtake them.
            orphaned = [r.partition_no for r in take if r.relay_id is not None]
            if held:
                conn.execute(
                    sa.update(op)
                    .where(op.c.partition_no.in_(held))
                    .values(relay_id=self.relay_id, lease_until=lease_until)
                )
            if release:
                conn.execute(
                    sa.update(op).where(op.c.partition_no.in_(release)).values(relay_id=None, lease_until=None)
                )
            if orphaned:
                _requeue(conn, ot.c.partition_no.in_(orphaned))
        if orphaned:
            log.warning("took over outbox partitions of a relay that stopped renewing", status=str(orphaned))
        self._held = tuple(held)
        # Stop publishing a partition before anyone else may take it (margin: one renewal).
        self._held_until = started + config.partition_lease_seconds - config.partition_renew_seconds
        self._renew_at = started + config.partition_renew_seconds

    def _announce(self, conn: sa.Connection, now: datetime, alive_until: datetime) -> None:
        """This relay is alive (and where it takes wake-ups); long-gone relays are forgotten."""
        values = {"alive_until": alive_until, "wake_address": self.wake_address}
        if not conn.execute(sa.update(rt).where(rt.c.relay_id == self.relay_id).values(**values)).rowcount:
            conn.execute(sa.insert(rt).values(relay_id=self.relay_id, **values))
        conn.execute(sa.delete(rt).where(rt.c.alive_until < now - timedelta(hours=1)))

    def _ensure_partition_rows(self) -> None:
        if self._renew_at != float("-inf"):
            return  # done on this relay's first lease
        with self.engine.begin() as conn:
            existing = set(conn.scalars(sa.select(op.c.partition_no)))
        missing = [{"partition_no": n} for n in range(OUTBOX_PARTITIONS) if n not in existing]
        if missing:
            try:
                with self.engine.begin() as conn:
                    conn.execute(sa.insert(op), missing)
            except sa.exc.IntegrityError:
                pass  # another relay created them first

    def release_partitions(self) -> None:
        """Give the partitions up at shutdown, so other relays take them at once instead of after the lease."""
        with self.engine.begin() as conn:
            conn.execute(sa.update(op).where(op.c.relay_id == self.relay_id).values(relay_id=None, lease_until=None))
            conn.execute(sa.delete(rt).where(rt.c.relay_id == self.relay_id))
        self._held, self._held_until, self._renew_at = (), float("-inf"), float("-inf")

    # ------------------------------------------------------------ claim
    def has_pending(self) -> bool:
        """Any PENDING row? Rows still in back-off count too, which costs an empty claim while they wait."""
        return self._pending()

    def close(self) -> None:
        """Release the probe connection."""
        self._pending.close()

    def claim(self) -> list[ClaimedRow]:
        """Take up to ``batch_size`` due rows of this relay's partitions in id order."""
        partitions = self.partitions()
        if not partitions or not self.has_pending():
            return []
        return _retrying(lambda: self._claim(partitions))

    def _claim(self, partitions: tuple[int, ...]) -> list[ClaimedRow]:
        now = self.now()
        with self.engine.begin() as conn:
            pending = set(conn.scalars(_PENDING_PARTITIONS)).intersection(partitions)
            # Rotate the starting partition so a busy one cannot starve the others.
            order = sorted(pending, key=lambda p: (p - self._rotation) % OUTBOX_PARTITIONS)
            self._rotation = (self._rotation + 1) % OUTBOX_PARTITIONS
            ids: list[int] = []
            for partition in order:
                # Each partition's own index range, in id order, and no SKIP LOCKED: a
                # lower row still locked (its producer not yet committed, or another
                # relay's claim in a handover) is waited for, never overtaken.
                ids += conn.scalars(
                    _CLAIM_PARTITION,
                    {"_partition": partition, "_now": now, "_limit": self.config.batch_size - len(ids)},
                )
                if len(ids) >= self.config.batch_size:
                    break
            if not ids:
                return []
            conn.execute(
                sa.update(ot)
                .where(ot.c.id.in_(ids))
                .values(status="PROCESSING", locked_by=self.relay_id, locked_at=now, attempts=ot.c.attempts + 1)
            )
            rows = conn.execute(
                sa.select(
                    ot.c.id,
                    ot.c.publish_key,
                    ot.c.aggregate_type,
                    ot.c.aggregate_id,
                    ot.c.aggregate_version,
                    ot.c.channel,
                    ot.c.projection,
                    ot.c.must_deliver,
                    ot.c.payload,
                    ot.c.attempts,
                    ot.c.created_at,
                    sa.func.length(ot.c.payload).label("payload_bytes"),
                )
                .where(ot.c.id.in_(ids))
                .order_by(ot.c.id)
            ).all()
        return [ClaimedRow(**r._mapping) for r in rows]

    def take_over_expired_leases(self, limit: int = 1000) -> int:
        """Rows a crashed relay left PROCESSING past the lease go back to PENDING."""
        cutoff = self.now() - timedelta(seconds=self.config.lease_seconds)
        with self.engine.begin() as conn:
            ids = list(
                conn.scalars(
                    sa.select(ot.c.id)
                    .where(ot.c.status == "PROCESSING", ot.c.locked_at < cutoff)
                    .order_by(ot.c.id)
                    .limit(limit)
                    .with_for_update(skip_locked=True)
                )
            )
            if ids:
                conn.execute(
                    sa.update(ot)
                    .where(ot.c.id.in_(ids), ot.c.status == "PROCESSING")
                    .values(status="PENDING", locked_by=None, locked_at=None)
                )
        if ids:
            log.warning("took over outbox rows with expired leases", status=f"{len(ids)} rows")
        return len(ids)

    # ------------------------------------------------------------ publish
    @staticmethod
    def superseded(rows: Sequence[ClaimedRow]) -> set[int]:
        """Rows a later row of the same aggregate and channel makes redundant (R14).

        Never a must-deliver row (terminal, new task, new attempt, removal, notice).
        """
        latest: dict[tuple[str, str, str], int] = {}
        for row in rows:
            key = (row.channel, row.aggregate_type, row.aggregate_id)
            if row.projection in COALESCIBLE and row.aggregate_version > latest.get(key, -1):
                latest[key] = row.aggregate_version
        return {
            row.id
            for row in rows
            if row.projection in COALESCIBLE
            and not row.must_deliver
            and row.aggregate_version < latest[(row.channel, row.aggregate_type, row.aggregate_id)]
        }

    @staticmethod
    def publications(rows: Sequence[ClaimedRow]) -> list[Publication]:
        """What the relay sends for ``rows`` (the row's publish key is Centrifugo's idempotency key)."""
        publications = []
        for r in rows:
            versioned = r.channel.startswith(VERSIONED_NAMESPACES)
            publications.append(
                Publication(
                    channel=r.channel,
                    data=r.payload,
                    idempotency_key=r.publish_key,
                    version=r.aggregate_version if versioned else None,
                    # One aggregate per channel: consecutive states differ little, so
                    # subscribers that negotiated fossil deltas get only the difference.
                    delta=versioned,
                    size_hint=r.payload_bytes or 0,
                )
            )
        return publications

    async def run_once(self) -> PassResult:
        """One claim → publish → mark pass."""
        result = PassResult()
        # Database work runs in a thread so the publishing event loop never blocks on it.
        rows = await asyncio.to_thread(self.claim)
        result.claimed = len(rows)
        if not rows:
            return result
        backlog = self.config.coalesce_backlog or self.config.batch_size
        skipped = self.superseded(rows) if len(rows) >= backlog else set()
        fanouts = [r for r in rows if r.projection == "USER_FANOUT"]
        to_send = [r for r in rows if r.id not in skipped and r.projection != "USER_FANOUT"]
        publications = self.publications(to_send)
        started = time.perf_counter()
        try:
            outcomes: list[PublishResult] = await self.publisher.publish_batch(publications)
            self._problems.cleared("publish", "publishing to Centrifugo works again")
        except TransportError as exc:
            metrics.PUBLISH_ERRORS.labels(kind="transport").inc(len(to_send))
            self._problems.failed("publish", "cannot reach Centrifugo; rows wait and are retried", code=str(exc))
            outcomes = [PublishResult(ok=False, error=f"transport: {exc}")] * len(to_send)
        except Unauthorized:
            metrics.PUBLISH_ERRORS.labels(kind="unauthorized").inc(len(to_send))
            self._problems.failed("publish", "Centrifugo refused the API key; rows wait", code="unauthorized")
            outcomes = [PublishResult(ok=False, error="unauthorized: check the Centrifugo API key")] * len(to_send)
        # One notice to many users: Centrifugo's broadcast, one call per batch row.
        for row in fanouts:
            try:
                replies = await self.publisher.broadcast(
                    row.payload["channels"], row.payload["data"], idempotency_key=row.publish_key
                )
                failed = [r for r in replies if not r.ok]
                outcome = PublishResult(ok=not failed, error=failed[0].error if failed else None)
            except TransportError as exc:
                outcome = PublishResult(ok=False, error=f"transport: {exc}")
            to_send.append(row)
            outcomes = [*outcomes, outcome]
        metrics.PUBLISH_SECONDS.observe(time.perf_counter() - started)
        await asyncio.to_thread(self._mark, rows, to_send, outcomes, skipped, result)
        return result

    def _mark(
        self,
        rows: Sequence[ClaimedRow],
        sent: Sequence[ClaimedRow],
        outcomes: Sequence[PublishResult],
        skipped: set[int],
        result: PassResult,
    ) -> None:
        now = self.now()
        published = [r.id for r, o in zip(sent, outcomes, strict=True) if o.ok] + sorted(skipped)
        retry: list[tuple[ClaimedRow, str]] = []
        dead: list[tuple[ClaimedRow, str]] = []
        for row, outcome in zip(sent, outcomes, strict=True):
            if outcome.ok:
                continue
            reason = _redact(outcome.error or "unknown error")
            if outcome.permanent or row.attempts >= self.config.max_attempts:
                dead.append((row, reason))
            else:
                retry.append((row, reason))

        def write() -> None:
            with self.engine.begin() as conn:
                mine = (ot.c.locked_by == self.relay_id, ot.c.status == "PROCESSING")
                if published:
                    conn.execute(
                        sa.update(ot)
                        .where(ot.c.id.in_(published), *mine)
                        .values(status="PUBLISHED", published_at=now, locked_by=None, locked_at=None, last_error=None)
                    )
                for row, reason in retry:
                    conn.execute(
                        sa.update(ot)
                        .where(ot.c.id == row.id, *mine)
                        .values(
                            status="PENDING",
                            available_at=now + timedelta(seconds=self.backoff(row.attempts)),
                            locked_by=None,
                            locked_at=None,
                            last_error=reason,
                        )
                    )
                for row, reason in dead:
                    conn.execute(
                        sa.update(ot)
                        .where(ot.c.id == row.id, *mine)
                        .values(status="DEAD", locked_by=None, locked_at=None, last_error=reason)
                    )

        _retrying(write)
        for row in rows:
            if row.id in skipped:
                result.coalesced += 1
        for row, outcome in zip(sent, outcomes, strict=True):
            if outcome.ok:
                lag = (now - row.created_at).total_seconds()
                result.lag_seconds.append(lag)
                metrics.COMMIT_TO_PUBLISH.observe(max(0.0, lag))
        result.published = len(published) - len(skipped)
        result.retried = len(retry)
        result.dead = len(dead)
        metrics.PUBLISHED.inc(result.published)
        metrics.COALESCED.inc(result.coalesced)
        if dead:
            metrics.DEAD.inc(len(dead))
            for row, reason in dead:
                log.error(
                    "outbox row went DEAD",
                    outboxId=row.id,
                    channel=row.channel,
                    taskVersion=row.aggregate_version,
                    code=reason,
                )

    def backoff(self, attempts: int) -> float:
        """Exponential backoff with full jitter, capped."""
        ceiling = min(self.config.backoff_max_seconds, self.config.backoff_base_seconds * (2 ** max(0, attempts - 1)))
        return random.uniform(ceiling / 2, ceiling)

    # ------------------------------------------------------------ retention and gauges
    def purge_published(self, older_than: timedelta, batch: int = 5000) -> int:
        """Delete PUBLISHED rows past the retention window, in bounded batches (R16)."""
        cutoff = self.now() - older_than
        with self.engine.begin() as conn:
            ids = list(
                conn.scalars(
                    sa.select(ot.c.id)
                    .where(ot.c.status == "PUBLISHED", ot.c.published_at < cutoff)
                    .order_by(ot.c.id)
                    .limit(batch)
                )
            )
            if ids:
                conn.execute(sa.delete(ot).where(ot.c.id.in_(ids)))
        metrics.PURGED.labels(table="task_outbox").inc(len(ids))
        return len(ids)

    def update_gauges(self) -> dict[str, float]:
        now = self.now()
        with self.engine.connect() as conn:
            counts: dict[str, int] = dict(
                conn.execute(
                    sa.select(ot.c.status, sa.func.count())
                    .where(ot.c.status.in_(["PENDING", "PROCESSING", "DEAD"]))
                    .group_by(ot.c.status)
                ).all()
            )
            oldest = conn.execute(sa.select(sa.func.min(ot.c.created_at)).where(ot.c.status == "PENDING")).scalar()
        age = (now - oldest).total_seconds() if oldest is not None else 0.0
        for status in ("PENDING", "PROCESSING", "DEAD"):
            metrics.OUTBOX_ROWS.labels(status=status.lower()).set(counts.get(status, 0))
        metrics.OLDEST_PENDING_AGE.set(max(0.0, age))
        return {
            "pending": counts.get("PENDING", 0),
            "processing": counts.get("PROCESSING", 0),
            "dead": counts.get("DEAD", 0),
            "oldest_pending_age_seconds": age,
        }


def _requeue(conn: sa.Connection, which: sa.ColumnElement[bool]) -> None:
    """PROCESSING rows matching ``which`` back to PENDING.

    Found by a plain read, then updated by primary key: a locking scan of the status
    index would lock other relays' in-flight rows in index order and deadlock with
    their marks, which lock by primary key.
    """
    ids = list(conn.scalars(sa.select(ot.c.id).where(ot.c.status == "PROCESSING", which)))
    if ids:
        conn.execute(
            sa.update(ot)
            .where(ot.c.id.in_(ids), ot.c.status == "PROCESSING")
            .values(status="PENDING", locked_by=None, locked_at=None)
        )


def _retrying(work: Callable[[], T]) -> T:
    """Run a short relay transaction again after a deadlock or lock wait timeout."""
    for attempt in range(5):
        try:
            return work()
        except sa.exc.DBAPIError as exc:
            if attempt == 4 or not is_retryable(exc):
                raise
            time.sleep(0.005 * (2**attempt) * random.uniform(0.5, 1.5))
    raise AssertionError("unreachable")


def _redact(message: str) -> str:
    """Errors are stored for operators; keep them short and free of payloads or keys."""
    cleaned = message.replace("\n", " ")
    return cleaned[:300]
