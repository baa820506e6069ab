"""Shards (design D14.2; docs/architecture.md, "Shards: the engine"): the bucket map read from the
control store, each shard's write fence, and ``Shards`` over one database per shard.

Every API process holds the whole map and replaces it whole when the control store's version
moves (checked at most every ``refresh_seconds``, on the request path: one single-row read). A
shard's transaction first reads the fences of the buckets it was routed to write ``FOR SHARE``
— one statement for a group, the locks held to its commit — so a move, which takes a fence
``FOR UPDATE``, waits for the writes under way and refuses every later one, including a
process's whose map is still the old one: that process is told ``RouteChanged``, re-reads the
map and sends the items where they now belong.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TypeVar

import sqlalchemy as sa

from status.app.ports import UnitOfWork
from status.app.shard_ports import RouteChanged, ShardGroup, Split
from status.app.shards import MOVING
from status.domain.buckets import BucketMap, BucketRoute, Fence, RouteState, fence_refusals
from status.domain.errors import Unavailable
from status.domain.ids import BUCKET_COUNT
from status.infra import tables as t
from status.infra.uow import SqlDatabase, SqlStores

T = TypeVar("T")

_ROUTE = t.shard_bucket_route
_FENCE = t.bucket_write_fence


class _Refused(Exception):
    """A shard refused buckets of the transaction (rolled back; the map is re-read)."""

    def __init__(self, buckets: Iterable[int]) -> None:
        super().__init__()
        self.buckets = frozenset(buckets)


def map_version(conn: sa.Connection) -> int | None:
    """The control store's map version; None: no map (a single-database install)."""
    version = conn.scalar(sa.select(t.shard_map.c.version).where(t.shard_map.c.id == 1))
    return None if version is None else int(version)


def load_map(conn: sa.Connection) -> BucketMap | None:
    """The whole map, read in one transaction with its version; None when there is none."""
    version = map_version(conn)
    if version is None:
        return None
    rows = conn.execute(
        sa.select(
            _ROUTE.c.bucket_id,
            _ROUTE.c.route_epoch,
            _ROUTE.c.physical_shard,
            _ROUTE.c.route_state,
            _ROUTE.c.target_shard,
            _ROUTE.c.fenced_at,
        ).order_by(_ROUTE.c.bucket_id)
    ).all()
    routes = tuple(BucketRoute(int(b), int(e), s, RouteState(st), tg, f) for b, e, s, st, tg, f in rows)
    return BucketMap(version, routes)


def save_routes(conn: sa.Connection, routes: Iterable[BucketRoute], now: datetime) -> int:
    """Write routes and raise the map's version in the caller's transaction; the new version."""
    values = [
        {
            "bucket_id": r.bucket,
            "route_epoch": r.epoch,
            "physical_shard": r.shard,
            "route_state": r.state.value,
            "target_shard": r.target,
            "fenced_at": r.fenced_at,
            "updated_at": now,
        }
        for r in routes
    ]
    buckets = [v["bucket_id"] for v in values]
    for start in range(0, len(buckets), 1000):
        conn.execute(sa.delete(_ROUTE).where(_ROUTE.c.bucket_id.in_(buckets[start : start + 1000])))
    if values:
        conn.execute(sa.insert(_ROUTE), values)
    version = (map_version(conn) or 0) + 1
    if version == 1:
        conn.execute(sa.insert(t.shard_map).values(id=1, version=1, updated_at=now))
    else:
        conn.execute(sa.update(t.shard_map).where(t.shard_map.c.id == 1).values(version=version, updated_at=now))
    return version


def save_fences(conn: sa.Connection, fences: Iterable[Fence], now: datetime) -> None:
    """Set a shard's fences for the buckets given, in the caller's transaction: a fence row that
    exists is updated in place (a writer waiting on its lock then reads the new value), the others
    inserted."""
    wanted = {f.bucket: f for f in fences}
    existing: set[int] = set()
    keys = sorted(wanted)
    for start in range(0, len(keys), 1000):
        chunk = keys[start : start + 1000]
        existing.update(
            int(b) for b in conn.scalars(sa.select(_FENCE.c.bucket_id).where(_FENCE.c.bucket_id.in_(chunk)))
        )
    for bucket in sorted(existing):
        fence = wanted[bucket]
        conn.execute(
            sa.update(_FENCE)
            .where(_FENCE.c.bucket_id == bucket)
            .values(route_epoch=fence.epoch, writable=fence.writable, updated_at=now)
        )
    new = [
        {"bucket_id": f.bucket, "route_epoch": f.epoch, "writable": f.writable, "updated_at": now}
        for b, f in sorted(wanted.items())
        if b not in existing
    ]
    if new:
        conn.execute(sa.insert(_FENCE), new)


def read_fences(conn: sa.Connection, buckets: Iterable[int], *, lock: bool = True) -> dict[int, Fence]:
    """The shard's fences of ``buckets``, read ``FOR SHARE`` (held to the transaction's end)."""
    wanted = sorted(set(buckets))
    if not wanted:
        return {}
    query = sa.select(_FENCE.c.bucket_id, _FENCE.c.route_epoch, _FENCE.c.writable).where(_FENCE.c.bucket_id.in_(wanted))
    if lock:
        query = query.with_for_update(read=True)
    return {int(b): Fence(int(b), int(e), bool(w)) for b, e, w in conn.execute(query)}


def initial_routes(shards: Sequence[str]) -> list[BucketRoute]:
    """Every bucket ACTIVE at epoch 1, the shards taking contiguous ranges of nearly equal size."""
    return [BucketRoute(b, 1, shards[b * len(shards) // BUCKET_COUNT]) for b in range(BUCKET_COUNT)]


# How old a process's map may be: it is read again at most this long after it was read (sooner
# when a shard refuses a write or a read by it).
MAP_REFRESH_SECONDS = 5.0


def install_map(control: sa.Engine, shards: Mapping[str, sa.Engine], now: datetime) -> BucketMap:
    """A first map over ``shards`` (in the order given): the routes in the control store and, on
    each shard, its buckets' fences writable at epoch 1. Refused when a map exists: a map changes
    by moving buckets, never by being installed again."""
    names = list(shards)
    routes = initial_routes(names)
    with control.begin() as conn:
        if map_version(conn) is not None:
            raise ValueError("a bucket map is installed already; buckets change shards by moving")
        for name, engine in shards.items():
            with engine.begin() as shard:
                save_fences(shard, [Fence(r.bucket, r.epoch, True) for r in routes if r.shard == name], now)
        version = save_routes(conn, routes, now)
        claim_existing_refs(conn)
    return BucketMap(version, tuple(routes))


def claim_existing_refs(control: sa.Connection) -> int:
    """The external references attached before the map (on the control store's database, the one
    database until then), each claimed for its task's bucket: from now on a reference is unique
    across shards by its claim (``status.app.external_refs.claim_refs``)."""
    ref, claim = t.task_external_ref, t.external_ref_claim
    key = (ref.c.tenant_id, ref.c.authority_scope, ref.c.ref_type, ref.c.ref_hash)
    attached = sa.select(*key, t.task.c.bucket_id, ref.c.created_at).join(t.task, t.task.c.id == ref.c.task_id)
    columns = ["tenant_id", "authority_scope", "ref_type", "ref_hash", "bucket_id", "claimed_at"]
    return int(control.execute(sa.insert(claim).from_select(columns, attached)).rowcount or 0)


class ShardedDatabases:
    """``status.app.ports.Shards`` over one database per shard and the control store's map."""

    def __init__(
        self,
        control: sa.Engine,
        databases: Mapping[str, SqlDatabase],
        home: str,
        *,
        refresh_seconds: float = MAP_REFRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._control = control
        self._databases = dict(databases)
        self._home = home
        self._refresh_seconds = refresh_seconds
        self._clock = clock
        self._lock = threading.Lock()
        with control.connect() as conn:
            loaded = load_map(conn)
        if loaded is None or loaded.problems():
            # Without a trusted map a process cannot know where anything is: it must not guess.
            raise RuntimeError(f"no usable bucket map in the control store: {loaded and loaded.problems()}")
        unknown = loaded.shards() - set(self._databases)
        if unknown or home not in self._databases:
            raise RuntimeError(f"the map names shards this process has no database for: {sorted(unknown)}")
        self._map = loaded
        self._checked = clock()

    @property
    def map(self) -> BucketMap:
        return self._map

    def refresh(self, *, force: bool = False) -> BucketMap:
        """The map, re-read when the control store's version moved (at most every
        ``refresh_seconds`` unless forced); a broken or older snapshot never replaces the one in use,
        and an unreachable control store leaves it in use."""
        now = self._clock()
        if not force and now - self._checked < self._refresh_seconds:
            return self._map
        with self._lock:
            self._checked = now
            try:
                with self._control.connect() as conn:
                    if map_version(conn) == self._map.version:
                        return self._map
                    loaded = load_map(conn)
            except sa.exc.DBAPIError:
                return self._map  # keep serving the last trusted snapshot
            if loaded is not None and not (loaded.shards() - set(self._databases)):
                self._map = self._map.replaced_by(loaded)
            return self._map

    def split(self, buckets: Sequence[int | None]) -> Split:
        """By the shard the map names for each bucket — its source while it moves, even in the cut-over:
        that shard's fence, not a map that may be seconds old, says whether it writes it now."""
        current = self.refresh()
        by_shard: dict[str, tuple[list[int], dict[int, int]]] = {}
        for i, bucket in enumerate(buckets):
            if bucket is None:
                by_shard.setdefault(self._home, ([], {}))[0].append(i)
                continue
            route = current.route(bucket)
            indexes, routes = by_shard.setdefault(route.shard, ([], {}))
            indexes.append(i)
            routes[bucket] = route.epoch
        return Split(tuple(ShardGroup(shard, tuple(ix), routes) for shard, (ix, routes) in by_shard.items()))

    def run(self, group: ShardGroup, work: Callable[[UnitOfWork], T], *, unique: bool = False) -> T:
        database = self._databases[group.shard]

        def fenced(uow: UnitOfWork) -> T:
            if group.routes:
                assert isinstance(uow, SqlStores)
                refused = fence_refusals(read_fences(uow.conn, group.routes), group.routes)
                if refused:
                    raise _Refused(refused)
            return work(uow)

        try:
            return database.run_unique(fenced) if unique else database.run(fenced)
        except _Refused as refusal:
            self.refresh(force=True)
            raise RouteChanged(group.shard, refusal.buckets) from None

    @contextmanager
    def reading(self, *buckets: int | None) -> Iterator[SqlStores]:
        """Reads on the shard the map names, once its fences (read without a lock) say it still
        holds ``buckets``: a bucket whose source's fence has moved to a later epoch was switched
        away, and its rows there are what they were at the switch."""
        wanted = [b for b in buckets if b is not None]
        for attempt in range(2):
            current = self.refresh(force=attempt > 0)
            shards = {current.route(b).shard for b in wanted} or {self._home}
            if None in buckets:
                shards.add(self._home)
            if len(shards) > 1:
                raise RouteChanged(next(iter(shards)), wanted)
            (shard,) = shards
            with self._databases[shard].reading() as stores:
                fences = read_fences(stores.conn, wanted, lock=False)
                if not any(b in fences and fences[b].epoch > current.route(b).epoch for b in wanted):
                    yield stores
                    return
        raise Unavailable(MOVING)  # moved again since the map was re-read: the caller retries

    def readers(self, buckets: Sequence[int | None]) -> Sequence[tuple[int, ...]]:
        current = self.refresh()
        by_shard: dict[str, list[int]] = {}
        for i, bucket in enumerate(buckets):
            by_shard.setdefault(self._home if bucket is None else current.route(bucket).shard, []).append(i)
        return tuple(tuple(indexes) for indexes in by_shard.values())

    def every(self) -> Sequence[tuple[str, SqlDatabase]]:
        """The home database first, then the other shards'."""
        home = (self._home, self._databases[self._home])
        return (home, *((name, db) for name, db in self._databases.items() if name != self._home))

    def holds(self, shard: str, bucket: int | None) -> bool:
        return shard == (self._home if bucket is None else self.refresh().route(bucket).shard)
