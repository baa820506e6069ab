"""Outbox partitions: which relay publishes which channels.

A row's partition is a hash of its channel (``status.infra.repository``).
``outbox_partition`` gives each partition to one live relay at a time under a
lease the relay renews; ``outbox_relay`` lists the live relays (each renews its
row in the same round), so a newcomer counts before it holds anything, and says
where each takes wake-ups.  Every round a relay keeps or takes its fair share
and gives back the rest; a partition whose owner stopped renewing is taken
over once its lease has run out.  Rounds are serialized by locking the
partition rows first.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from status import logs
from status.infra import tables as t
from status.infra.repository import OUTBOX_PARTITIONS

log = logs.get("observer.partitions")
op = t.outbox_partition
rt = t.outbox_relay


@dataclass(frozen=True)
class Assignment:
    held: tuple[int, ...]  # this relay's partitions after the round
    released: tuple[int, ...]  # given back (more than the fair share)
    orphaned: tuple[int, ...]  # taken from a relay whose lease had run out


def assign(rows: Sequence[Any], me: str, live: set[str], now: datetime) -> Assignment:
    """One round's decision from the partition rows (``partition_no, relay_id, lease_until``) and the live relays."""
    share = math.ceil(len(rows) / len(live | {me}))
    mine = [r.partition_no for r in rows if r.relay_id == me]
    keep, released = mine[:share], mine[share:]
    free = [
        r for r in rows if r.relay_id != me and (r.relay_id is None or r.lease_until is None or r.lease_until <= now)
    ]
    take = free[: max(0, share - len(keep))]
    return Assignment(
        held=tuple(sorted([*keep, *(r.partition_no for r in take)])),
        released=tuple(released),
        orphaned=tuple(r.partition_no for r in take if r.relay_id is not None),
    )


class PartitionLeases:
    """One relay's partitions, renewed when due."""

    def __init__(
        self,
        engine: sa.Engine,
        relay_id: str,
        lease_seconds: float,
        renew_seconds: float,
        now: Callable[[], datetime],
    ) -> None:
        self.engine = engine
        self.relay_id = relay_id
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self._now = now
        # Where this relay takes wake-up datagrams (advertised in outbox_relay).
        self.wake_address: str | None = None
        self._held: tuple[int, ...] = ()
        self._held_until = float("-inf")
        self._renew_at = float("-inf")
        self._rounds = 0

    def held(self) -> tuple[int, ...]:
        """The partitions this relay may publish now (renewing its leases when due)."""
        if time.monotonic() >= self._renew_at:
            self._round()
        return self._held if time.monotonic() < self._held_until else ()

    @property
    def current(self) -> tuple[int, ...]:
        """What the last round gave this relay, without a round of its own (no database)."""
        return self._held if time.monotonic() < self._held_until else ()

    def _round(self) -> None:
        started = time.monotonic()
        now = self._now()
        lease_until = now + timedelta(seconds=self.lease_seconds)
        if self._rounds == 0:
            self._ensure_rows()
        with self.engine.begin() as conn:
            # Lock order: the partition rows first (this serializes the relays' rounds).
            rows = conn.execute(
                sa.select(op.c.partition_no, op.c.relay_id, op.c.lease_until)
                .order_by(op.c.partition_no)
                .with_for_update()
            ).all()
            self._announce(conn, now, lease_until)
            live = set(conn.scalars(sa.select(rt.c.relay_id).where(rt.c.alive_until > now)))
            decided = assign(rows, self.relay_id, live, now)
            if decided.held:
                conn.execute(
                    sa.update(op)
                    .where(op.c.partition_no.in_(decided.held))
                    .values(relay_id=self.relay_id, lease_until=lease_until)
                )
            if decided.released:
                conn.execute(
                    sa.update(op).where(op.c.partition_no.in_(decided.released)).values(relay_id=None, lease_until=None)
                )
        if decided.orphaned:
            log.warning("took over outbox partitions of a relay that stopped renewing", status=str(decided.orphaned))
        self._held = decided.held
        # Stop publishing a partition before anyone else may take it (margin: one renewal).
        self._held_until = started + self.lease_seconds - self.renew_seconds
        self._renew_at = started + self.renew_seconds

    def _announce(self, conn: sa.Connection, now: datetime, alive_until: datetime) -> None:
        """This relay is alive (and where it takes wake-ups); long-gone relays are forgotten now and then."""
        values = {"alive_until": alive_until, "wake_address": self.wake_address}
        if not conn.execute(sa.update(rt).where(rt.c.relay_id == self.relay_id).values(**values)).rowcount:
            conn.execute(sa.insert(rt).values(relay_id=self.relay_id, **values))
        if self._rounds % 100 == 0:
            conn.execute(sa.delete(rt).where(rt.c.alive_until < now - timedelta(hours=1)))
        self._rounds += 1

    def _ensure_rows(self) -> None:
        with self.engine.begin() as conn:
            existing = set(conn.scalars(sa.select(op.c.partition_no)))
        missing = [{"partition_no": n} for n in range(OUTBOX_PARTITIONS) if n not in existing]
        if missing:
            try:
                with self.engine.begin() as conn:
                    conn.execute(sa.insert(op), missing)
            except sa.exc.IntegrityError:
                pass  # another relay created them first

    def release(self) -> None:
        """Give everything up (shutdown): other relays take the partitions at once instead of after the lease."""
        with self.engine.begin() as conn:
            conn.execute(sa.update(op).where(op.c.relay_id == self.relay_id).values(relay_id=None, lease_until=None))
            conn.execute(sa.delete(rt).where(rt.c.relay_id == self.relay_id))
        self._held, self._held_until, self._renew_at = (), float("-inf"), float("-inf")
