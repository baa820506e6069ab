"""Work split by shard (status/app/shards.py): each item runs once, on the shard of its bucket,
its outcome in the caller's order; a shard that says a bucket moved has those items re-split; an
item whose bucket is between shards gets the caller's "moving" outcome."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from status.app.ports import Database, Stores, UnitOfWork
from status.app.shard_ports import RouteChanged, ShardGroup, Split
from status.app.shards import ROUNDS, OneShard, on_shards


class FakeShards:
    """Buckets on shards by a dict that a test may change; a shard refuses groups with a moved bucket."""

    def __init__(self, where: dict[int | None, str], fenced: frozenset[int] = frozenset()) -> None:
        self.where = where  # what the map says
        self.truth = dict(where)  # what the shards say
        self.fenced = fenced
        self.stuck: set[int] = set()  # refused by their shard though the map sends them there
        self.ran: list[tuple[str, tuple[int, ...]]] = []

    def split(self, buckets: Sequence[int | None]) -> Split:
        by: dict[str, list[int]] = {}
        fenced = []
        for i, b in enumerate(buckets):
            if b in self.fenced:
                fenced.append(i)
            else:
                by.setdefault(self.where[b], []).append(i)
        groups = tuple(
            ShardGroup(s, tuple(ix), {b: 1 for b in (buckets[i] for i in ix) if b is not None}) for s, ix in by.items()
        )
        return Split(groups, tuple(fenced))

    def run(self, group: ShardGroup, work: Callable[[UnitOfWork], Any], *, unique: bool = False) -> Any:
        wrong = [b for b in group.routes if self.truth[b] != group.shard or b in self.stuck]
        if wrong:
            self.where = dict(self.truth)  # the refusal refreshes the map
            raise RouteChanged(group.shard, wrong)
        return work(None)  # type: ignore[arg-type]

    def reading(self, *buckets: int | None) -> AbstractContextManager[Stores]:
        raise NotImplementedError

    def readers(self, buckets: Sequence[int | None]) -> Sequence[tuple[int, ...]]:
        raise NotImplementedError

    def every(self) -> Sequence[tuple[str, Database]]:
        return ()

    def holds(self, shard: str, bucket: int | None) -> bool:
        return self.where[bucket] == shard


def _run(shards: FakeShards, buckets: list[int | None]) -> list[str]:
    def run(group: ShardGroup) -> list[str]:
        def work(_: UnitOfWork) -> list[str]:
            shards.ran.append((group.shard, group.indexes))
            return [f"{group.shard}:{i}" for i in group.indexes]

        result: list[str] = shards.run(group, work)
        return result

    return on_shards(shards, buckets, run, lambda i: f"moving:{i}")


def test_each_item_runs_once_on_its_buckets_shard_in_the_callers_order() -> None:
    shards = FakeShards({1: "a", 2: "b", 3: "a", None: "a"})
    assert _run(shards, [1, 2, 3, None, 2]) == ["a:0", "b:1", "a:2", "a:3", "b:4"]
    assert sorted(shards.ran) == [("a", (0, 2, 3)), ("b", (1, 4))]  # one transaction per shard


def test_a_moved_bucket_is_split_again_and_run_where_it_now_is() -> None:
    shards = FakeShards({1: "a", 2: "a"})
    shards.truth[2] = "b"  # moved; this process's map does not know yet
    assert _run(shards, [1, 2]) == ["a:0", "b:1"]
    assert shards.ran == [("a", (0,)), ("b", (1,))]  # the refused group ran nothing


def test_a_fenced_bucket_gets_the_moving_outcome_and_its_neighbours_run() -> None:
    shards = FakeShards({1: "a", 2: "a"}, fenced=frozenset({2}))
    assert _run(shards, [1, 2, 1]) == ["a:0", "moving:1", "a:2"]


def test_a_bucket_that_keeps_moving_is_refused_after_a_few_rounds() -> None:
    shards = FakeShards({1: "a"})

    class Restless(FakeShards):
        def run(self, group: ShardGroup, work: Callable[[UnitOfWork], Any], *, unique: bool = False) -> Any:
            raise RouteChanged(group.shard, group.routes)

    restless = Restless({1: "a"})
    assert _run(restless, [1, 1]) == ["moving:0", "moving:1"]
    assert _run(shards, []) == []
    assert ROUNDS >= 2


def test_one_database_is_one_shard_for_everything() -> None:
    class Db:
        def run(self, work: Callable[[Any], Any], *, attempts: int = 6) -> Any:
            return work("uow")

    one = OneShard(Db())  # type: ignore[arg-type]
    split = one.split([5, None, 4095])
    assert split.fenced == () and len(split.groups) == 1 and split.groups[0].indexes == (0, 1, 2)
    assert split.groups[0].routes == {}  # nothing fenced on a single database
    assert one.run(split.groups[0], lambda uow: str(uow)) == "uow"
    assert one.split([]).groups == ()


def test_a_bucket_its_shard_keeps_refusing_is_refused_alone_and_its_neighbours_run() -> None:
    """The map sends bucket 2 to shard a, which refuses it (its fence says cut-over before the map
    does): its neighbour on a runs in the next round without it, and it gets the moving outcome."""
    shards = FakeShards({1: "a", 2: "a"})
    shards.stuck.add(2)
    assert _run(shards, [1, 2, 1]) == ["a:0", "moving:1", "a:2"]
    assert shards.ran == [("a", (0, 2))]
