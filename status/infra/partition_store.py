"""Storage of the outbox partitions' leases and the live relays (``outbox_partition``, ``outbox_relay``):
every statement a relay's partition round runs. The decisions are ``observer.partitions``'s."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from status.infra import tables as t
from status.infra.outbox_rows import OUTBOX_PARTITIONS

op = t.outbox_partition
rt = t.outbox_relay


class PartitionStore:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def ensure_rows(self) -> None:
        """One row per partition (created by whichever relay comes first)."""
        with self.engine.begin() as conn:
            existing = set(conn.scalars(sa.select(op.c.partition_no)))
        missing = [{"partition_no": n} for n in range(OUTBOX_PARTITIONS) if n not in existing]
        if missing:
            try:
                with self.engine.begin() as conn:
                    conn.execute(sa.insert(op), missing)
            except sa.exc.IntegrityError:
                pass  # another relay created them first

    def round(
        self,
        relay_id: str,
        now: datetime,
        lease_until: datetime,
        wake_address: str | None,
        decide: Any,
        forget_gone: bool,
    ) -> Any:
        """One serialized round: lock the partition rows, announce this relay as alive, read the
        live relays, let ``decide(rows, live)`` choose (an ``Assignment``), and write its choice."""
        with self.engine.begin() as conn:
            # Lock order: the partition rows first (this serializes the relays' rounds).
            rows = conn.execute(
                sa.select(op.c.partition_no, op.c.relay_id, op.c.lease_until)
                .order_by(op.c.partition_no)
                .with_for_update()
            ).all()
            values = {"alive_until": lease_until, "wake_address": wake_address}
            if not conn.execute(sa.update(rt).where(rt.c.relay_id == relay_id).values(**values)).rowcount:
                conn.execute(sa.insert(rt).values(relay_id=relay_id, **values))
            if forget_gone:  # long-gone relays are forgotten now and then
                conn.execute(sa.delete(rt).where(rt.c.alive_until < now - timedelta(hours=1)))
            live = set(conn.scalars(sa.select(rt.c.relay_id).where(rt.c.alive_until > now)))
            decided = decide(rows, live)
            self._write(conn, relay_id, decided.held, decided.released, lease_until)
        return decided

    @staticmethod
    def _write(
        conn: sa.Connection, relay_id: str, held: Sequence[int], released: Sequence[int], lease_until: datetime
    ) -> None:
        if held:
            taken = sa.update(op).where(op.c.partition_no.in_(list(held)))
            conn.execute(taken.values(relay_id=relay_id, lease_until=lease_until))
        if released:
            conn.execute(
                sa.update(op).where(op.c.partition_no.in_(list(released))).values(relay_id=None, lease_until=None)
            )

    def release(self, relay_id: str) -> None:
        """Give every partition of ``relay_id`` up and forget it (shutdown)."""
        with self.engine.begin() as conn:
            conn.execute(sa.update(op).where(op.c.relay_id == relay_id).values(relay_id=None, lease_until=None))
            conn.execute(sa.delete(rt).where(rt.c.relay_id == relay_id))
