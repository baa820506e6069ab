"""Outbox relay (SPEC R14, seed §5.1–§5.3): committed outbox rows → Centrifugo.

One pass: claim PENDING rows in id order with ``FOR UPDATE SKIP LOCKED`` under
a lease (``locked_by``/``locked_at``), publish them *outside* the database
transaction, then mark each row PUBLISHED, back to PENDING with an
exponential, jittered ``available_at`` (retryable failures), or DEAD with a
redacted ``last_error`` (permanent failures).  Expired leases of crashed
relays are taken over.  Delivery is at least once; every message carries the
full state and its version, so clients converge whatever the duplicates.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from observer import metrics
from observer.centrifugo import CentrifugoPublisher, Publication, PublishResult, TransportError, Unauthorized
from observer.probe import RowProbe
from status import logs
from status.infra import tables as t
from status.infra.repository import now_ms

log = logs.get("observer.relay")
ot = t.task_outbox

# Per-aggregate channels carry one aggregate's versions, so Centrifugo can skip
# stale publications by version; a user's summary channel interleaves many
# tasks with independent versions and must not use it.
VERSIONED_NAMESPACES = ("task_detail:", "workflow_summary:")
COALESCIBLE = ("USER_SUMMARY", "TASK_DETAIL", "PROJECT_BROADCAST")


@dataclass(frozen=True)
class ClaimedRow:
    id: int
    aggregate_type: str
    aggregate_id: str
    aggregate_version: int
    channel: str
    projection: str
    must_deliver: bool
    payload: dict[str, Any]
    attempts: int
    created_at: datetime


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
    coalesce_backlog: int = 1000  # coalesce superseded summaries only when a claim is this full


# Literal SQL valid on MySQL/MariaDB and SQLite; served by the (status, id) index.
_PENDING_PROBE = "SELECT 1 FROM task_outbox WHERE status = 'PENDING' LIMIT 1"


class OutboxRelay:
    def __init__(
        self,
        engine: sa.Engine,
        publisher: CentrifugoPublisher,
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

    def now(self) -> datetime:
        return now_ms(self._clock())

    # ------------------------------------------------------------ claim
    def has_pending(self) -> bool:
        """Any PENDING row? Rows still in back-off count too, which costs an empty claim while they wait."""
        return self._pending()

    def close(self) -> None:
        """Release the probe connection."""
        self._pending.close()

    def claim(self) -> list[ClaimedRow]:
        """Take up to ``batch_size`` due rows in id order; rows other relays hold are skipped."""
        if not self.has_pending():
            return []
        now = self.now()
        with self.engine.begin() as conn:
            ids = list(
                conn.scalars(
                    sa.select(ot.c.id)
                    .where(ot.c.status == "PENDING", ot.c.available_at <= now)
                    .order_by(ot.c.id)
                    .limit(self.config.batch_size)
                    .with_for_update(skip_locked=True)
                )
            )
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
                    ot.c.aggregate_type,
                    ot.c.aggregate_id,
                    ot.c.aggregate_version,
                    ot.c.channel,
                    ot.c.projection,
                    ot.c.must_deliver,
                    ot.c.payload,
                    ot.c.attempts,
                    ot.c.created_at,
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

    async def run_once(self) -> PassResult:
        """One claim → publish → mark pass."""
        result = PassResult()
        # Database work runs in a thread so the publishing event loop never blocks on it.
        rows = await asyncio.to_thread(self.claim)
        result.claimed = len(rows)
        if not rows:
            return result
        skipped = self.superseded(rows) if len(rows) >= self.config.coalesce_backlog else set()
        fanouts = [r for r in rows if r.projection == "USER_FANOUT"]
        to_send = [r for r in rows if r.id not in skipped and r.projection != "USER_FANOUT"]
        publications = [
            Publication(
                channel=r.channel,
                data=r.payload,
                idempotency_key=f"outbox-{r.id}",
                version=r.aggregate_version if r.channel.startswith(VERSIONED_NAMESPACES) else None,
            )
            for r in to_send
        ]
        started = time.perf_counter()
        try:
            outcomes: list[PublishResult] = await self.publisher.publish_batch(publications)
        except TransportError as exc:
            metrics.PUBLISH_ERRORS.labels(kind="transport").inc(len(to_send))
            outcomes = [PublishResult(ok=False, error=f"transport: {exc}")] * len(to_send)
        except Unauthorized:
            metrics.PUBLISH_ERRORS.labels(kind="unauthorized").inc(len(to_send))
            outcomes = [PublishResult(ok=False, error="unauthorized: check the Centrifugo API key")] * len(to_send)
        # One notice to many users: Centrifugo's broadcast, one call per batch row.
        for row in fanouts:
            try:
                replies = await self.publisher.broadcast(
                    row.payload["channels"], row.payload["data"], idempotency_key=f"outbox-{row.id}"
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


def _redact(message: str) -> str:
    """Errors are stored for operators; keep them short and free of payloads or keys."""
    cleaned = message.replace("\n", " ")
    return cleaned[:300]
