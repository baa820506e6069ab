"""What the application needs to reach the shard that holds each virtual bucket (design D14.2):
the ``Shards`` port, beside ``status.app.ports``'s ``Database`` (one database, a single shard, is
``status.app.shards.OneShard``; a bucket map over several is ``status.infra.shards``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol, TypeVar

from status.app.ports import Database, Stores, UnitOfWork

T = TypeVar("T")


class RouteChanged(Exception):
    """A shard refused buckets of the transaction (rolled back): they moved since the map was read,
    or are moving (the map is refreshed); split the items again and run them where they belong."""

    def __init__(self, shard: str, buckets: Iterable[int]) -> None:
        super().__init__(f"{shard} refused buckets {sorted(buckets)}")
        self.shard = shard
        self.buckets = frozenset(buckets)


@dataclass(frozen=True)
class ShardGroup:
    """Items whose buckets one shard writes (design D14.2): their indexes in the caller's sequence
    and, per bucket, the route epoch the map gave (empty on a single database: nothing fenced)."""

    shard: str
    indexes: tuple[int, ...]
    routes: Mapping[int, int]


@dataclass(frozen=True)
class Split:
    """A sequence of items by shard, and the items whose bucket is fenced now (between shards)."""

    groups: tuple[ShardGroup, ...]
    fenced: tuple[int, ...] = ()


class Shards(Protocol):
    """Which database holds each virtual bucket's tasks: every read and write of a task goes to its
    bucket's shard, in one local transaction (None: no bucket, the home database's)."""

    def split(self, buckets: Sequence[int | None]) -> Split:
        """The caller's items (by their buckets) grouped by the shard that writes them now."""
        ...

    def run(self, group: ShardGroup, work: Callable[[UnitOfWork], T], *, unique: bool = False) -> T:
        """``work`` in one transaction on the group's shard that first checks, under shared locks held
        to its commit, that the shard still writes the group's buckets; ``RouteChanged`` when not
        (``unique``: run once more after a ``DuplicateKey``, as ``Database.run_unique``)."""
        ...

    def reading(self, *buckets: int | None) -> AbstractContextManager[Stores]:
        """Stores for reads on the shard that holds ``buckets`` (one shard: as ``readers`` groups
        them). That shard is asked first whether it still holds them, so a read never answers from
        a shard a bucket has left; ``RouteChanged`` when they are no longer on one shard."""
        ...

    def readers(self, buckets: Sequence[int | None]) -> Sequence[tuple[int, ...]]:
        """The caller's items (by their buckets) grouped by the shard that serves their reads (a
        bucket that is moving still reads where it was); read each group with ``reading`` of its
        buckets."""
        ...

    def every(self) -> Sequence[tuple[str, Database]]:
        """Each shard's name and database, the home database first (reads across shards, sweeps)."""
        ...

    def holds(self, shard: str, bucket: int | None) -> bool:
        """Whether ``shard`` holds ``bucket`` for reads now. A bucket being copied, or moved and not
        yet released, has rows on two shards: a read across shards keeps each row only from the
        shard that holds its bucket."""
        ...
