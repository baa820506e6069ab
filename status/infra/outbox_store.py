"""The outbox as the relay sees it: claim due rows of some partitions, record how publishing went,
purge what is old, count what waits. Every statement the relay runs on ``task_outbox`` is here."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa

from status.infra import tables as t
from status.infra.outbox_rows import OUTBOX_PARTITIONS, StoredMessage, stored_columns, unpack
from status.infra.uow import is_retryable

T = TypeVar("T")
ot = t.task_outbox


@dataclass(frozen=True)
class ClaimedRow:
    id: int
    publish_key: str
    aggregate_type: str
    aggregate_id: str
    aggregate_version: int
    channel: str  # its home channel (``status.domain.messages.Aggregate``)
    must_deliver: bool
    messages: tuple[StoredMessage, ...]
    attempts: int
    created_at: datetime
    event_id: str | None = None  # the change it publishes (correlates the relay's log with the API's)


@dataclass(frozen=True)
class Marks:
    """How a published batch went, to record in one transaction."""

    published: Sequence[int]
    counted: Sequence[int]  # held rows whose attempt still counts
    dead: Sequence[tuple[int, int, str]]  # id, attempts, reason


_CLAIMED_COLUMNS = (
    ot.c.id,
    ot.c.publish_key,
    ot.c.aggregate_type,
    ot.c.aggregate_id,
    ot.c.aggregate_version,
    ot.c.must_deliver,
    *stored_columns(ot),  # projection, channel, the payload as stored: not decoded here
    ot.c.attempts,
    ot.c.created_at,
    ot.c.event_id,
)


def _claimed(row: Any) -> ClaimedRow:
    """A claim's row, unpacked by position (a mapping per row costs more than the rest of the claim)."""
    row_id, key, aggregate_type, aggregate_id, version, must, projection, channel, payload, packed = row[:10]
    attempts, created, event = row[10:]
    # attempts counts this publication too
    return ClaimedRow(
        row_id,
        key,
        aggregate_type,
        aggregate_id,
        version,
        channel,
        must,
        unpack(projection, channel, payload, packed),
        attempts + 1,
        created,
        event,
    )


# The marks' statements, built once (a relay runs them every pass).
_PENDING_IDS = (ot.c.id.in_(sa.bindparam("_ids", expanding=True)), ot.c.status == "PENDING")
_PENDING_ID = (ot.c.id == sa.bindparam("_id"), ot.c.status == "PENDING")
_MARK_PUBLISHED = (
    sa.update(ot)
    .where(*_PENDING_IDS)
    .values(status="PUBLISHED", published_at=sa.bindparam("_now"), attempts=ot.c.attempts + 1, last_error=None)
)
_MARK_COUNTED = sa.update(ot).where(*_PENDING_IDS).values(attempts=ot.c.attempts + 1)
_MARK_DEAD = (
    sa.update(ot)
    .where(*_PENDING_ID)
    .values(status="DEAD", attempts=sa.bindparam("_attempts"), last_error=sa.bindparam("_reason"))
)


class OutboxStore:
    def __init__(self, engine: sa.Engine, batch_size: int) -> None:
        self.engine = engine
        self.batch_size = batch_size
        self._claim_statements: dict[tuple[int, ...], Any] = {}

    def claim(
        self,
        partitions: tuple[int, ...],
        now: datetime,
        in_flight: Sequence[int],
        marks_first: list[tuple[Marks, datetime]] | None = None,
    ) -> list[ClaimedRow]:
        """Up to ``batch_size`` due rows of ``partitions`` in id order (``in_flight`` ids left out).

        A plain read, no row locks and no status change: the partition lease already makes
        these rows this relay's alone, and nothing a crash could leave half-claimed. No relay
        skips a row because another relay's scan happens to hold a lock on it.
        ``marks_first``: the previous batch's outcomes, committed on the same connection just
        before the read (so its rows are not read again), one checkout for both; taken out of the
        list once committed, so a read that is retried does not write them again."""
        with self.engine.connect() as conn:
            if marks_first:
                with conn.begin():
                    self._write_marks(conn, *marks_first[0])
                marks_first.clear()
            rows = conn.execute(self._candidates(partitions), {"_now": now, "_in_flight": list(in_flight)}).all()
        return [_claimed(r) for r in sorted(rows, key=lambda r: int(r[0]))]

    def _candidates(self, partitions: tuple[int, ...]) -> Any:
        """The claim's read for a set of partitions (built once per set: the set rarely changes)."""
        statement = self._claim_statements.get(partitions)
        if statement is None:
            due = (
                ot.c.status == "PENDING",
                ot.c.available_at <= sa.bindparam("_now"),
                # The previous batch, published while its mark is still being written.
                ot.c.id.not_in(sa.bindparam("_in_flight", expanding=True)),
            )
            batch = self.batch_size
            if len(partitions) >= OUTBOX_PARTITIONS:  # all of them: the (status, id) index in one range
                statement = sa.select(*_CLAIMED_COLUMNS).where(*due).order_by(ot.c.id).limit(batch)
            else:  # each partition's own (status, partition_no, id) range, in id order
                per = max(1, math.ceil(batch / len(partitions)))
                branches = [
                    sa.select(*_CLAIMED_COLUMNS)
                    .where(*due, ot.c.partition_no == p)
                    .order_by(ot.c.id)
                    .limit(per)
                    .subquery()
                    for p in partitions
                ]
                statement = sa.union_all(*(sa.select(branch) for branch in branches))
            self._claim_statements = {partitions: statement}
        return statement

    def release_processing(self, cutoff: datetime, limit: int) -> int:
        """Rows left PROCESSING (by relays of an earlier version) before ``cutoff`` go back to PENDING."""
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
        return len(ids)

    def mark(self, marks: Marks, now: datetime) -> None:
        """Record a batch's outcomes. Guarded by PENDING: a row another relay already marked (a lease
        handover mid-pass) keeps what it got."""
        with self.engine.begin() as conn:
            self._write_marks(conn, marks, now)

    @staticmethod
    def _write_marks(conn: sa.Connection, marks: Marks, now: datetime) -> None:
        if marks.published:
            conn.execute(_MARK_PUBLISHED, {"_ids": list(marks.published), "_now": now})
        if marks.counted:
            conn.execute(_MARK_COUNTED, {"_ids": list(marks.counted)})
        if marks.dead:
            conn.execute(
                _MARK_DEAD,
                [{"_id": row_id, "_attempts": attempts, "_reason": reason} for row_id, attempts, reason in marks.dead],
            )

    def purge_published(self, cutoff: datetime, batch: int) -> int:
        """Delete PUBLISHED rows published before ``cutoff``, at most ``batch`` of them."""
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
        return len(ids)

    def waiting(self) -> tuple[dict[str, int], datetime | None, datetime | None]:
        """Rows by status (PENDING, PROCESSING, DEAD), and the commit time of the oldest PENDING row
        and of the oldest PENDING must-deliver row (terminal states, notices: what users must see)."""
        with self.engine.connect() as conn:
            counts: dict[str, int] = dict(
                conn.execute(
                    sa.select(ot.c.status, sa.func.count())
                    .where(ot.c.status.in_(["PENDING", "PROCESSING", "DEAD"]))
                    .group_by(ot.c.status)
                ).all()
            )
            oldest = conn.execute(sa.select(sa.func.min(ot.c.created_at)).where(ot.c.status == "PENDING")).scalar()
            oldest_must = conn.execute(
                sa.select(sa.func.min(ot.c.created_at)).where(
                    ot.c.status == "PENDING", ot.c.must_deliver.is_(sa.true())
                )
            ).scalar()
        return counts, oldest, oldest_must


def retrying(work: Callable[[], T]) -> T:
    """Run a short transaction again after a deadlock or lock wait timeout."""
    for attempt in range(5):
        try:
            return work()
        except sa.exc.DBAPIError as exc:
            if attempt == 4 or not is_retryable(exc):
                raise
            time.sleep(0.005 * (2**attempt) * random.uniform(0.5, 1.5))
    raise AssertionError("unreachable")


def is_database_error(exc: BaseException) -> bool:
    """Whether ``exc`` came from the database (the observer backs off and grants a grace period)."""
    return isinstance(exc, sa.exc.DBAPIError)
