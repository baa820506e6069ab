"""Fair shares of outbox partitions among live relays (observer.partitions.assign, pure)."""

from __future__ import annotations

from datetime import datetime, timedelta
from types import SimpleNamespace

from observer.partitions import assign

NOW = datetime(2026, 11, 30, 12, 0, 0)
LIVE = NOW + timedelta(seconds=5)
EXPIRED = NOW - timedelta(seconds=1)


def rows(owners: list[tuple[str | None, datetime | None]]) -> list[SimpleNamespace]:
    return [SimpleNamespace(partition_no=i, relay_id=o, lease_until=u) for i, (o, u) in enumerate(owners)]


def test_the_first_relay_takes_every_partition() -> None:
    decided = assign(rows([(None, None)] * 16), "a", set(), NOW)
    assert decided.held == tuple(range(16)) and not decided.released and not decided.orphaned


def test_a_relay_with_more_than_its_share_gives_the_rest_back_to_a_newcomer() -> None:
    table = rows([("a", LIVE)] * 16)
    decided = assign(table, "a", {"a", "b"}, NOW)  # b is alive but holds nothing yet
    assert decided.held == tuple(range(8)) and decided.released == tuple(range(8, 16))
    newcomer = assign(table, "b", {"a", "b"}, NOW)  # before a's round: nothing free for b yet
    assert newcomer.held == ()


def test_live_leases_are_never_taken_and_expired_ones_are_taken_over() -> None:
    table = rows([("a", LIVE)] * 8 + [("dead", EXPIRED)] * 8)
    decided = assign(table, "b", {"a", "b"}, NOW)
    assert decided.held == tuple(range(8, 16)) and decided.orphaned == tuple(range(8, 16))
    assert not set(decided.held) & {r.partition_no for r in table if r.relay_id == "a"}


def test_three_relays_split_sixteen_partitions_without_overlap() -> None:
    table = rows([(None, None)] * 16)
    live = {"a", "b", "c"}
    held: dict[str, tuple[int, ...]] = {}
    for relay in ("a", "b", "c"):
        decided = assign(table, relay, live, NOW)
        held[relay] = decided.held
        table = [
            SimpleNamespace(partition_no=r.partition_no, relay_id=relay, lease_until=LIVE)
            if r.partition_no in decided.held
            else r
            for r in table
        ]
    assert sorted(p for h in held.values() for p in h) == list(range(16))
    assert all(len(h) <= 6 for h in held.values())
