"""Outbox partitions: which relay publishes which channels.

A row's partition is a hash of its channel (``status.infra.stores.sql``).
``outbox_partition`` gives each partition to one live relay at a time under a
lease the relay renews; ``outbox_relay`` lists the live relays (each renews its
row in the same round), so a newcomer counts before it holds anything, and says
where each takes wake-ups.  Every round a relay keeps or takes its fair share
and gives back the rest; a partition whose owner stopped renewing is taken
over once its lease has run out.  Rounds are serialized by locking the
partition rows first. The decision is ``assign`` (pure); the statements are
``status.infra.partition_store``'s.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from observer import metrics
from status import logs
from status.infra.partition_store import PartitionStore

if TYPE_CHECKING:
    import sqlalchemy as sa

log = logs.get("observer.partitions")


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
        self.store = PartitionStore(engine)
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
            self.store.ensure_rows()
        decided = self.store.round(
            self.relay_id,
            now,
            lease_until,
            self.wake_address,
            lambda rows, live: assign(rows, self.relay_id, live, now),
            forget_gone=self._rounds % 100 == 0,
        )
        self._rounds += 1
        if decided.orphaned:
            metrics.PARTITION_TAKEOVERS.inc(len(decided.orphaned))
            log.warning("took over outbox partitions of a relay that stopped renewing", status=str(decided.orphaned))
        self._held = decided.held
        # Stop publishing a partition before anyone else may take it (margin: one renewal).
        self._held_until = started + self.lease_seconds - self.renew_seconds
        self._renew_at = started + self.renew_seconds

    def release(self) -> None:
        """Give everything up (shutdown): other relays take the partitions at once instead of after the lease."""
        self.store.release(self.relay_id)
        self._held, self._held_until, self._renew_at = (), float("-inf"), float("-inf")
