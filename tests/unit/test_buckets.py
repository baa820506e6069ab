"""The bucket map's rules (status/domain/buckets.py): where a bucket's writes go, what a stale
route or a fenced bucket gets, how a move steps, and which snapshot replaces which."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from status.domain.buckets import (
    CLAIM_IN_DOUBT,
    FENCE_BOUND,
    MOVE_TRANSITIONS,
    BucketMap,
    BucketRoute,
    Fence,
    Fenced,
    MapBehind,
    MoveRefused,
    MoveStep,
    RefClaim,
    RouteState,
    StaleRoute,
    WriteTo,
    fence_overdue,
    fence_refusals,
    move,
    ref_claim,
)
from status.domain.ids import BUCKET_COUNT

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def moved(route: BucketRoute, *steps: MoveStep, target: str = "b") -> BucketRoute:
    for step in steps:
        after = move(route, step, NOW, target)
        assert isinstance(after, BucketRoute), after
        route = after
    return route


def test_a_single_database_install_is_one_shard_for_every_bucket() -> None:
    single = BucketMap.single("main")
    assert single.problems() == []
    assert single.shards() == {"main"}
    assert {single.writer(b) for b in (0, 1, BUCKET_COUNT - 1)} == {WriteTo("main", 1)}


def test_a_move_copies_fences_and_switches_to_the_target_under_a_new_epoch() -> None:
    route = BucketRoute(7, 3, "a")
    copying = moved(route, MoveStep.COPY)
    assert (copying.state, copying.shard, copying.target, copying.epoch) == (RouteState.COPYING, "a", "b", 3)
    fenced = moved(copying, MoveStep.FENCE)
    assert (fenced.state, fenced.fenced_at) == (RouteState.CUTOVER, NOW)
    assert moved(fenced, MoveStep.SWITCH) == BucketRoute(7, 4, "b")


@pytest.mark.parametrize("steps", [(MoveStep.COPY,), (MoveStep.COPY, MoveStep.FENCE)])
def test_an_abort_at_any_step_leaves_the_source_the_writer_at_the_same_epoch(steps: tuple[MoveStep, ...]) -> None:
    route = BucketRoute(7, 3, "a")
    assert moved(moved(route, *steps), MoveStep.ABORT) == route


def test_a_step_not_in_the_table_is_refused() -> None:
    route = BucketRoute(7, 3, "a")
    for step in MoveStep:
        for state in RouteState:
            if state in MOVE_TRANSITIONS[step]:
                continue
            at = replace(route, state=state, target="b" if state is not RouteState.ACTIVE else None)
            assert isinstance(move(at, step, NOW, "b"), MoveRefused), (step, state)


def test_a_move_needs_a_target_other_than_its_shard() -> None:
    route = BucketRoute(7, 3, "a")
    assert isinstance(move(route, MoveStep.COPY, NOW, None), MoveRefused)
    assert isinstance(move(route, MoveStep.COPY, NOW, "a"), MoveRefused)


def _map_with(route: BucketRoute, version: int = 2) -> BucketMap:
    routes = list(BucketMap.single("a").routes)
    routes[route.bucket] = route
    return BucketMap(version, tuple(routes))


def test_while_copying_the_source_still_writes_and_in_cutover_nobody_does() -> None:
    route = BucketRoute(7, 3, "a")
    assert _map_with(moved(route, MoveStep.COPY)).writer(7) == WriteTo("a", 3)
    assert _map_with(moved(route, MoveStep.COPY, MoveStep.FENCE)).writer(7) == Fenced(FENCE_BOUND)


def test_a_writer_behind_the_buckets_epoch_is_sent_to_re_resolve_and_one_ahead_stops_this_map() -> None:
    after = _map_with(BucketRoute(7, 4, "b"))
    assert after.writer(7, epoch_seen=3) == StaleRoute(4)
    assert after.writer(7, epoch_seen=4) == WriteTo("b", 4)
    assert after.writer(7, epoch_seen=5) == MapBehind(5)


def test_other_buckets_moving_never_makes_a_route_stale() -> None:
    after = _map_with(BucketRoute(7, 9, "b"), version=50)
    assert after.writer(8, epoch_seen=1) == WriteTo("a", 1)


def test_a_fence_past_its_bound_is_overdue() -> None:
    fenced = moved(BucketRoute(7, 3, "a"), MoveStep.COPY, MoveStep.FENCE)
    assert not fence_overdue(fenced, NOW + FENCE_BOUND)
    assert fence_overdue(fenced, NOW + FENCE_BOUND + timedelta(milliseconds=1))
    assert not fence_overdue(BucketRoute(7, 3, "a"), NOW + timedelta(days=1))


def test_only_a_newer_usable_snapshot_replaces_the_one_in_use() -> None:
    current = BucketMap.single("a")
    newer = _map_with(BucketRoute(7, 2, "b"), version=2)
    assert current.replaced_by(newer) is newer
    assert newer.replaced_by(current) is newer  # older
    assert current.replaced_by(BucketMap(2, current.routes[:-1])) is current  # a bucket missing
    shuffled = BucketMap(3, (current.routes[1], current.routes[0], *current.routes[2:]))
    assert shuffled.problems() and current.replaced_by(shuffled) is current
    no_target = _map_with(replace(BucketRoute(7, 2, "a"), state=RouteState.COPYING), version=4)
    assert no_target.problems() == ["bucket 7 moves without a target"]
    assert newer.shards() == {"a", "b"}


def test_a_shard_writes_only_the_buckets_it_holds_writable_at_the_routes_epoch() -> None:
    fences = {
        1: Fence(1, 3, True),  # held here at the route's epoch
        2: Fence(2, 4, False),  # moved on: this shard keeps the new epoch, not writable
        3: Fence(3, 3, False),  # the move's cut-over
        4: Fence(4, 2, True),  # behind the route: the target not switched on yet
    }
    refused = fence_refusals(fences, {1: 3, 2: 3, 3: 3, 4: 3, 5: 3})
    assert set(refused) == {2, 3, 4, 5}
    assert refused[2] == StaleRoute(4)
    assert refused[3] == refused[4] == refused[5] == Fenced(FENCE_BOUND)  # 5: never held here
    assert fence_refusals(fences, {1: 3}) == {}


def test_a_reference_claim_is_decided_by_its_bucket_its_holder_and_its_age() -> None:
    now = datetime(2026, 12, 6, 15, 0)
    assert ref_claim(None, 7, False, now) is RefClaim.CLAIM  # nobody claimed it
    assert ref_claim((7, now), 7, False, now) is RefClaim.HELD  # this bucket's: its shard decides
    assert ref_claim((9, now - timedelta(days=1)), 7, True, now) is RefClaim.CONFLICT  # held there, however old
    assert ref_claim((9, now), 7, False, now) is RefClaim.IN_DOUBT  # its creation may still commit
    assert ref_claim((9, now - CLAIM_IN_DOUBT), 7, False, now) is RefClaim.IN_DOUBT
    assert ref_claim((9, now - CLAIM_IN_DOUBT - timedelta(seconds=1)), 7, False, now) is RefClaim.CLAIM  # stale
