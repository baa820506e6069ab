"""A relay that stops renewing loses its outbox partitions to one that renews, and the takeover is
counted (``relay_partition_takeovers_total``: the RelayPartitionsTakenOver alert reads it)."""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa

from observer import metrics
from observer.partitions import PartitionLeases


def _takeovers() -> float:
    return metrics.REGISTRY.get_sample_value("relay_partition_takeovers_total") or 0.0


def test_partitions_of_a_silent_relay_are_taken_over_and_counted(engine: sa.Engine) -> None:
    clock = [datetime.now().replace(microsecond=0)]
    silent = PartitionLeases(engine, "relay-silent", lease_seconds=10, renew_seconds=1, now=lambda: clock[0])
    held = silent.held()
    assert held, "the first relay took no partition"
    before = _takeovers()

    clock[0] += timedelta(seconds=60)  # the silent relay's leases ran out; it never renewed them
    renewing = PartitionLeases(engine, "relay-renewing", lease_seconds=10, renew_seconds=1, now=lambda: clock[0])
    try:
        taken = renewing.held()
        assert set(held) <= set(taken)
        assert _takeovers() - before >= len(held)
    finally:
        renewing.release()  # the partitions are free again for the relays of other tests
