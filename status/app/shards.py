"""Work routed to the shards that hold its buckets (design D14.2), and the single-database case.

A group of items (events, bindings) may span buckets that different shards write: it runs as one
transaction per shard, each item's outcome where it was, in the caller's order. A shard that
refuses buckets because they moved (``RouteChanged``) has its items split again under the
refreshed map and run where they now belong; an item whose bucket is between shards — the map
says so, or the shard that refused it is still where the map sends it — gets the caller's
retryable refusal, its neighbours run without it, and an item still moving after a few rounds
is refused too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TypeVar

from status.app.ports import Database, Stores, UnitOfWork
from status.app.shard_ports import RouteChanged, ShardGroup, Shards, Split
from status.domain.errors import Unavailable

T = TypeVar("T")

HOME = "home"
MOVING = "the task's bucket is moving between shards; send it again with the same request"
ROUNDS = 3  # splits of a group's items before a bucket still moving is refused for now


class OneShard:
    """Every bucket on one database: a single-database install (nothing routed, nothing fenced)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def split(self, buckets: Sequence[int | None]) -> Split:
        return Split((ShardGroup(HOME, tuple(range(len(buckets))), {}),) if buckets else ())

    def run(self, group: ShardGroup, work: Callable[[UnitOfWork], T], *, unique: bool = False) -> T:
        return self.db.run_unique(work) if unique else self.db.run(work)

    def reading(self, *buckets: int | None) -> AbstractContextManager[Stores]:
        return self.db.reading()

    def readers(self, buckets: Sequence[int | None]) -> Sequence[tuple[int, ...]]:
        return (tuple(range(len(buckets))),) if buckets else ()

    def every(self) -> Sequence[tuple[str, Database]]:
        return ((HOME, self.db),)

    def holds(self, shard: str, bucket: int | None) -> bool:
        return True


def on_shards(
    shards: Shards,
    buckets: Sequence[int | None],
    run: Callable[[ShardGroup], Sequence[T]],
    moving: Callable[[int], T],
) -> list[T]:
    """Each item's outcome: ``run(group)`` gives those of a group's items (its indexes are the
    caller's, in the order given) and runs them with ``shards.run``; ``moving(i)`` is the outcome
    of item ``i`` while its bucket is between shards."""
    outcomes: dict[int, T] = {}
    refused: dict[int, str] = {}  # bucket -> the shard that refused it
    pending = list(range(len(buckets)))
    for _ in range(ROUNDS):
        split = shards.split([buckets[i] for i in pending])
        outcomes.update((pending[j], moving(pending[j])) for j in split.fenced)
        again: list[int] = []
        for group in split.groups:
            indexes = [pending[j] for j in group.indexes]
            held = [i for i in indexes if (b := buckets[i]) is not None and refused.get(b) == group.shard]
            outcomes.update((i, moving(i)) for i in held)
            runnable = tuple(i for i in indexes if i not in held)
            if not runnable:
                continue
            routes = {b: e for b, e in group.routes.items() if refused.get(b) != group.shard}
            mine = ShardGroup(group.shard, runnable, routes)
            try:
                results = run(mine)
            except RouteChanged as change:
                refused.update((b, change.shard) for b in change.buckets)
                again += mine.indexes
                continue
            outcomes.update(zip(mine.indexes, results, strict=True))
        pending = sorted(again)
        if not pending:
            break
    outcomes.update((i, moving(i)) for i in pending)
    return [outcomes[i] for i in range(len(buckets))]


def run_for(shards: Shards, bucket: int | None, work: Callable[[UnitOfWork], T], *, unique: bool = False) -> T:
    """One bucket's ``work`` in one transaction on its shard (``unique``: once more after a
    duplicate key, as ``Database.run_unique``); ``Unavailable`` (retryable) while the bucket is
    between shards."""
    for _ in range(ROUNDS):
        split = shards.split([bucket])
        if split.fenced:
            break
        try:
            return shards.run(split.groups[0], work, unique=unique)
        except RouteChanged:
            continue
    raise Unavailable(MOVING)


def read_each(shards: Shards, buckets: Sequence[int | None], read: Callable[[Stores, tuple[int, ...]], None]) -> None:
    """``read(stores, indexes)`` once for each group of the caller's items that one shard serves,
    grouped again under the re-read map when a shard says a bucket left it; ``Unavailable``
    (retryable) for items whose buckets keep moving."""
    pending = list(range(len(buckets)))
    for _ in range(ROUNDS):
        again: list[int] = []
        for group in shards.readers([buckets[i] for i in pending]):
            indexes = tuple(pending[j] for j in group)
            try:
                with shards.reading(*(buckets[i] for i in indexes)) as stores:
                    read(stores, indexes)
            except RouteChanged:
                again += indexes
        pending = again
        if not pending:
            return
    raise Unavailable(MOVING)
