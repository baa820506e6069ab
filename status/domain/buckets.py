"""The bucket map (design D14.2): which shard writes each virtual bucket, and how a bucket moves.

A task belongs to its bucket for good (``ids``: the bucket is in its id); a bucket belongs to one
shard at a time. Each bucket's route carries an epoch, raised every time the bucket changes
shards, so a writer holding an older route is recognised and re-resolved instead of writing to
a shard that no longer owns the bucket. The map is small control data: every API process holds
a whole snapshot and replaces it at once (``BucketMap.replaced_by``), never bucket by bucket.

Moving a bucket (design D14.2 and docs/architecture.md, "Shards: the engine") is a transition
table, like the lifecycle's:

    ACTIVE --copy--> COPYING --fence--> CUTOVER --switch--> ACTIVE on the target, epoch + 1
                        |                  |
                        +------abort-------+--> ACTIVE on the source, same epoch

While COPYING the source shard still writes (the target only receives the copy); while in
CUTOVER no shard writes the bucket (its writes are refused, retryably, for the fence's bounded
time); an abort at any step leaves the source the writer, as if the move had not begun.

The trap: a route's epoch is not a version of the map. A writer compares the epoch of *its
bucket* only — a newer map in which other buckets moved does not make its route stale.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from status.domain.ids import BUCKET_COUNT

#: How long a bucket's writes may stay fenced before its move must be aborted.
FENCE_BOUND = timedelta(seconds=5)


class RouteState(StrEnum):
    ACTIVE = "ACTIVE"
    COPYING = "COPYING"
    CUTOVER = "CUTOVER"


class MoveStep(StrEnum):
    COPY = "COPY"
    FENCE = "FENCE"
    SWITCH = "SWITCH"
    ABORT = "ABORT"


#: What each step of a move does to a bucket's route state.
MOVE_TRANSITIONS: dict[MoveStep, dict[RouteState, RouteState]] = {
    MoveStep.COPY: {RouteState.ACTIVE: RouteState.COPYING},
    MoveStep.FENCE: {RouteState.COPYING: RouteState.CUTOVER},
    MoveStep.SWITCH: {RouteState.CUTOVER: RouteState.ACTIVE},
    MoveStep.ABORT: {RouteState.COPYING: RouteState.ACTIVE, RouteState.CUTOVER: RouteState.ACTIVE},
}


@dataclass(frozen=True)
class BucketRoute:
    bucket: int
    epoch: int
    shard: str  # the shard that owns the bucket (during a move: still the source)
    state: RouteState = RouteState.ACTIVE
    target: str | None = None  # the shard it moves to, while it moves
    fenced_at: datetime | None = None  # when its writes were fenced (CUTOVER)


@dataclass(frozen=True)
class MoveRefused:
    reason: str


def move(route: BucketRoute, step: MoveStep, now: datetime, target: str | None = None) -> BucketRoute | MoveRefused:
    """The route after one step of a move, or why the step cannot be taken from where it is."""
    after = MOVE_TRANSITIONS[step].get(route.state)
    if after is None:
        return MoveRefused(f"{step} is not a step from {route.state}")
    if step is MoveStep.COPY:
        if target is None or target == route.shard:
            return MoveRefused("a move needs a target other than the bucket's shard")
        return replace(route, state=after, target=target)
    if step is MoveStep.FENCE:
        return replace(route, state=after, fenced_at=now)
    if step is MoveStep.SWITCH:
        assert route.target is not None
        return BucketRoute(route.bucket, route.epoch + 1, route.target)
    return BucketRoute(route.bucket, route.epoch, route.shard)  # ABORT: the source stays the writer


def fence_overdue(route: BucketRoute, now: datetime) -> bool:
    """A fence held past its bound: the move must be aborted rather than keep the bucket unwritable."""
    return route.state is RouteState.CUTOVER and route.fenced_at is not None and now - route.fenced_at > FENCE_BOUND


@dataclass(frozen=True)
class WriteTo:
    """Write the bucket on ``shard`` under ``epoch`` (the shard's fence checks the same epoch)."""

    shard: str
    epoch: int


@dataclass(frozen=True)
class Fenced:
    """The bucket is between shards: refused, retryably, until the move switches or aborts."""

    retry_after: timedelta


@dataclass(frozen=True)
class StaleRoute:
    """The caller's route for the bucket is older than the map's: re-resolve, then write there."""

    epoch: int


@dataclass(frozen=True)
class MapBehind:
    """The caller saw the bucket at a newer epoch than this process's map: this map is stale for it
    (the bucket moved since it was loaded) and must be refreshed before anything is written."""

    epoch_seen: int


@dataclass(frozen=True)
class BucketMap:
    """A whole snapshot of the routes, one per bucket, in bucket order, under ``version``."""

    version: int
    routes: tuple[BucketRoute, ...]

    @classmethod
    def single(cls, shard: str) -> BucketMap:
        """Every bucket on one shard: a single-database install."""
        return cls(1, tuple(BucketRoute(b, 1, shard) for b in range(BUCKET_COUNT)))

    def problems(self) -> list[str]:
        """Why the snapshot cannot be used (empty: it can): a map with a bucket missing, out of
        order or without a writer would send some task nowhere, or to a guess."""
        found = []
        if len(self.routes) != BUCKET_COUNT:
            found.append(f"{len(self.routes)} routes, not {BUCKET_COUNT}")
        found += [f"route {i} is bucket {r.bucket}" for i, r in enumerate(self.routes) if r.bucket != i][:5]
        found += [f"bucket {r.bucket} has no shard" for r in self.routes if not r.shard][:5]
        moving = [r for r in self.routes if r.state is not RouteState.ACTIVE]
        found += [f"bucket {r.bucket} moves without a target" for r in moving if not r.target][:5]
        return found

    def route(self, bucket: int) -> BucketRoute:
        return self.routes[bucket]

    def writer(self, bucket: int, epoch_seen: int | None = None) -> WriteTo | Fenced | StaleRoute | MapBehind:
        """Where a write of ``bucket`` goes, for a caller that last saw the bucket at ``epoch_seen``
        (None: it has no route of its own, e.g. a new request)."""
        route = self.routes[bucket]
        if epoch_seen is not None and epoch_seen < route.epoch:
            return StaleRoute(route.epoch)
        if epoch_seen is not None and epoch_seen > route.epoch:
            return MapBehind(epoch_seen)
        if route.state is RouteState.CUTOVER:
            return Fenced(FENCE_BOUND)
        return WriteTo(route.shard, route.epoch)

    def replaced_by(self, newer: BucketMap) -> BucketMap:
        """The snapshot to use once ``newer`` arrives: it, whole, when it is newer and usable; this
        one otherwise (a stale or broken snapshot never replaces a good one)."""
        if newer.version <= self.version or newer.problems():
            return self
        return newer

    def shards(self) -> frozenset[str]:
        """Every shard a route names: the writers and the targets of moves."""
        return frozenset(r.shard for r in self.routes) | frozenset(r.target for r in self.routes if r.target)


@dataclass(frozen=True)
class Fence:
    """A shard's own word on one bucket (its ``bucket_write_fence`` row): the epoch it holds the
    bucket at, and whether it may write it now."""

    bucket: int
    epoch: int
    writable: bool


def fence_refusals(fences: Mapping[int, Fence], routed: Mapping[int, int]) -> dict[int, Fenced | StaleRoute]:
    """Which of the buckets a transaction was routed to write (bucket → the route's epoch) this
    shard refuses, read under the fences' shared locks in that transaction; empty: write them all.

    The shard, not the map the writer holds, has the last word: a process whose map is seconds
    old still sends writes of a moved bucket to its old shard, and only that shard knows the
    bucket left. A fence ahead of the route (the bucket moved on: its old shard keeps the new
    epoch, not writable) sends the writer to re-resolve; one at the route's epoch but not
    writable (the move's cut-over), one behind it (the target not yet switched on) or none at
    all (the shard never held the bucket) is retried later, never written.
    """
    refused: dict[int, Fenced | StaleRoute] = {}
    for bucket, epoch in routed.items():
        fence = fences.get(bucket)
        if fence is not None and fence.epoch > epoch:
            refused[bucket] = StaleRoute(fence.epoch)
        elif fence is None or fence.epoch < epoch or not fence.writable:
            refused[bucket] = Fenced(FENCE_BOUND)
    return refused


# A reference claimed for a bucket whose task never held it (its creation failed, or the task was
# purged) is taken over by another bucket only after this long: a claim younger than it may belong
# to a creation still committing on its shard (a request that missed its deadline may still commit).
CLAIM_IN_DOUBT = timedelta(minutes=5)


class RefClaim(StrEnum):
    """What a shard-spanning reference claim decides (``ref_claim``)."""

    CLAIM = "CLAIM"  # no claim yet, or a stale one: the claim becomes this bucket's
    HELD = "HELD"  # the claim is this bucket's: its shard's own key decides between its tasks
    CONFLICT = "CONFLICT"  # another bucket's task holds the reference
    IN_DOUBT = "IN_DOUBT"  # another bucket claimed it moments ago and holds it not yet: retry later


def ref_claim(claimed: tuple[int, datetime] | None, bucket: int, held_there: bool, now: datetime) -> RefClaim:
    """Whether ``bucket`` may attach an external reference whose claim (the bucket and when it was
    claimed) is ``claimed``; ``held_there``: a task of the claiming bucket holds it.

    The trap: a reference is unique per tenant and scope, but each shard's key sees only its own
    tasks — two tasks on two shards could each hold it. So a reference is first claimed for a
    bucket in the control store; the tasks of that bucket settle it on their shard as before."""
    if claimed is None:
        return RefClaim.CLAIM
    owner, since = claimed
    if owner == bucket:
        return RefClaim.HELD
    if held_there:
        return RefClaim.CONFLICT
    return RefClaim.CLAIM if now - since > CLAIM_IN_DOUBT else RefClaim.IN_DOUBT
