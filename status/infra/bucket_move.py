"""Moving a bucket between shards live (design D14.2; docs/architecture.md, "Shards: moving a
bucket"): copy, fence, drain and catch up, switch, and later release — or abort, from any step
before the switch, leaving the source the writer as if nothing had begun.

* **Copy** (the route COPYING): the bucket's rows are copied to the target while the source
  still writes them; the target's fence does not exist yet, so nothing writes there.
* **Fence** (CUTOVER): the source's fence row is taken ``FOR UPDATE`` and made not writable —
  the lock waits for every write of the bucket under way (they hold it ``FOR SHARE``) and every
  later one is refused, retryably, by the shard itself, whatever map its process holds.
* **Switch**: the source's relay and projector drain the bucket (no outbox row of its aggregates
  pending, no workflow change unfolded), so no client sees a version from the target before
  every earlier one left the source; the rows are copied again (what changed since the copy),
  the target's fence is made writable at the next epoch and the map switches to it, in that
  order. A fence held past its bound (``FENCE_BOUND``) is aborted instead.
* **Release**: the bucket's rows are deleted from the old shard once nothing reads them there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.mysql import insert as mysql_insert

from status.domain.buckets import (
    FENCE_BOUND,
    BucketRoute,
    Fence,
    MoveRefused,
    MoveStep,
    RouteState,
    fence_overdue,
    move,
)
from status.domain.clock import utcnow
from status.infra import tables as t
from status.infra.shards import load_map, save_fences, save_routes

# Rows of a bucket that change in place: copied again whole at the switch.
_BY_TASK_MUTABLE = (
    t.task_step,
    t.task_step_temporal,
    t.task_execution_handle,
    t.task_acl,
    t.task_external_ref,
    t.user_notification,
)
# Rows that are only ever added: at the switch only those the target lacks are copied.
_BY_TASK_APPENDED = (t.task_event_log, t.task_event_dedup, t.task_correction)
_LIVE_OUTBOX = ("PENDING", "PROCESSING")
_CHUNK = 500


class MoveFailed(RuntimeError):
    """A step could not be taken (the route is where it was, or the move was aborted)."""


@dataclass(frozen=True)
class MoveReport:
    bucket: int
    source: str
    target: str
    epoch: int
    tasks: int
    fenced_seconds: float  # how long the bucket's writes were refused


@dataclass(frozen=True)
class _Members:
    tasks: list[str]
    workflows: list[str]


def _members(conn: sa.Connection, bucket: int) -> _Members:
    tasks = [str(r) for r in conn.scalars(sa.select(t.task.c.id).where(t.task.c.bucket_id == bucket))]
    workflows: set[str] = set()
    for start in range(0, len(tasks), _CHUNK):
        chunk = tasks[start : start + _CHUNK]
        workflows.update(str(w) for w in conn.scalars(sa.select(t.task.c.workflow_id).where(t.task.c.id.in_(chunk))))
    prefix = f"wf\\_{bucket:03x}\\_%"
    workflows.update(str(w) for w in conn.scalars(sa.select(t.workflow.c.id).where(t.workflow.c.id.like(prefix))))
    return _Members(tasks, sorted(workflows))


def _rows(conn: sa.Connection, table: sa.Table, column: sa.Column[Any], keys: Sequence[str]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for start in range(0, len(keys), _CHUNK):
        chunk = keys[start : start + _CHUNK]
        found += [dict(row._mapping) for row in conn.execute(sa.select(table).where(column.in_(chunk)))]
    return found


def _replace(
    target: sa.Connection, table: sa.Table, column: sa.Column[Any], keys: Sequence[str], rows: list[dict[str, Any]]
) -> None:
    for start in range(0, len(keys), _CHUNK):
        target.execute(sa.delete(table).where(column.in_(keys[start : start + _CHUNK])))
    for start in range(0, len(rows), _CHUNK):
        target.execute(sa.insert(table), rows[start : start + _CHUNK])


def _upsert(target: sa.Connection, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    """Rows written over the target's (parents of foreign keys: replaced in place, never deleted)."""
    for start in range(0, len(rows), _CHUNK):
        statement = mysql_insert(table).values(rows[start : start + _CHUNK])
        columns = {c.name: statement.inserted[c.name] for c in table.columns if not c.primary_key}
        target.execute(statement.on_duplicate_key_update(columns))


def _pk(table: sa.Table, row: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(row[c.name] for c in table.primary_key.columns)


def copy_bucket(source: sa.Connection, target: sa.Connection, bucket: int) -> _Members:
    """The bucket's rows from ``source`` onto ``target`` (each in the caller's transaction): rows
    that change in place replaced whole, appended ones added where missing."""
    members = _members(source, bucket)
    _upsert(target, t.workflow, _rows(source, t.workflow, t.workflow.c.id, members.workflows))
    _upsert(target, t.task, _rows(source, t.task, t.task.c.id, members.tasks))
    for table in _BY_TASK_MUTABLE:
        _replace(target, table, table.c.task_id, members.tasks, _rows(source, table, table.c.task_id, members.tasks))
    for table in _BY_TASK_APPENDED:
        have = {_pk(table, row) for row in _rows(target, table, table.c.task_id, members.tasks)}
        missing = [row for row in _rows(source, table, table.c.task_id, members.tasks) if _pk(table, row) not in have]
        for start in range(0, len(missing), _CHUNK):
            target.execute(sa.insert(table), missing[start : start + _CHUNK])
    return members


def delete_bucket(conn: sa.Connection, bucket: int) -> int:
    """The bucket's rows deleted from a shard that no longer holds it (its outbox's too); how many tasks."""
    members = _members(conn, bucket)
    for table in (*_BY_TASK_MUTABLE, *_BY_TASK_APPENDED, t.workflow_change):
        for start in range(0, len(members.tasks), _CHUNK):
            conn.execute(sa.delete(table).where(table.c.task_id.in_(members.tasks[start : start + _CHUNK])))
    aggregates = [*members.tasks, *members.workflows]
    for start in range(0, len(aggregates), _CHUNK):
        conn.execute(
            sa.delete(t.task_outbox).where(t.task_outbox.c.aggregate_id.in_(aggregates[start : start + _CHUNK]))
        )
    for start in range(0, len(members.tasks), _CHUNK):
        conn.execute(sa.delete(t.task).where(t.task.c.id.in_(members.tasks[start : start + _CHUNK])))
    for start in range(0, len(members.workflows), _CHUNK):
        conn.execute(sa.delete(t.workflow).where(t.workflow.c.id.in_(members.workflows[start : start + _CHUNK])))
    return len(members.tasks)


def _drained(conn: sa.Connection, members: _Members) -> bool:
    """Nothing of the bucket left for the source's relay or projector to publish."""
    aggregates = [*members.tasks, *members.workflows]
    for start in range(0, len(aggregates), _CHUNK):
        chunk = aggregates[start : start + _CHUNK]
        live = conn.scalar(
            sa.select(sa.func.count())
            .select_from(t.task_outbox)
            .where(t.task_outbox.c.aggregate_id.in_(chunk), t.task_outbox.c.status.in_(_LIVE_OUTBOX))
        )
        if live:
            return False
    for start in range(0, len(members.workflows), _CHUNK):
        chunk = members.workflows[start : start + _CHUNK]
        unfolded = conn.scalar(
            sa.select(sa.func.count()).select_from(t.workflow_change).where(t.workflow_change.c.workflow_id.in_(chunk))
        )
        if unfolded:
            return False
    return True


class BucketMover:
    """The steps of moving one bucket, each a transition of ``status.domain.buckets.move``."""

    def __init__(
        self,
        control: sa.Engine,
        shards: Mapping[str, sa.Engine],
        *,
        clock: Callable[[], datetime] = utcnow,
        poll_seconds: float = 0.02,
    ) -> None:
        self._control = control
        self._shards = dict(shards)
        self._clock = clock
        self._poll = poll_seconds

    def route(self, bucket: int) -> BucketRoute:
        with self._control.connect() as conn:
            current = load_map(conn)
        if current is None:
            raise MoveFailed("no bucket map is installed")
        return current.route(bucket)

    def _step(self, route: BucketRoute, step: MoveStep, target: str | None = None) -> BucketRoute:
        after = move(route, step, self._clock(), target)
        if isinstance(after, MoveRefused):
            raise MoveFailed(after.reason)
        with self._control.begin() as conn:
            save_routes(conn, [after], self._clock())
        return after

    def copy(self, bucket: int, target: str) -> BucketRoute:
        """COPYING: the bucket's rows onto the target, the source still writing them."""
        if target not in self._shards:
            raise MoveFailed(f"no shard {target!r}")
        route = self._step(self.route(bucket), MoveStep.COPY, target)
        with self._shards[route.shard].connect() as source, self._shards[target].begin() as into:
            copy_bucket(source, into, bucket)
        return route

    def fence(self, bucket: int) -> BucketRoute:
        """CUTOVER: the source's fence taken exclusively (it waits for the writes under way) and
        made not writable; from then on the shard refuses the bucket's writes."""
        route = self.route(bucket)
        if fence_overdue(route, self._clock()):
            raise MoveFailed("the bucket is fenced past its bound")
        with self._shards[route.shard].begin() as conn:
            conn.execute(
                sa.select(t.bucket_write_fence.c.bucket_id)
                .where(t.bucket_write_fence.c.bucket_id == bucket)
                .with_for_update()
            ).all()
            save_fences(conn, [Fence(bucket, route.epoch, False)], self._clock())
        return self._step(route, MoveStep.FENCE)

    def switch(self, bucket: int) -> BucketRoute:
        """The bucket drained on the source, caught up on the target, then written there under the
        next epoch; the source keeps the new epoch, not writable (an old map is sent on)."""
        route = self.route(bucket)
        assert route.target is not None
        source, target = self._shards[route.shard], self._shards[route.target]
        with source.connect() as conn:
            members = _members(conn, bucket)
        while True:
            with source.connect() as conn:
                if _drained(conn, members):
                    break
            if fence_overdue(route, self._clock()):
                raise MoveFailed("the source did not drain the bucket within the fence's bound")
            time.sleep(self._poll)
        with source.connect() as conn, target.begin() as into:
            copy_bucket(conn, into, bucket)
            save_fences(into, [Fence(bucket, route.epoch + 1, True)], self._clock())
        after = self._step(route, MoveStep.SWITCH)
        with source.begin() as conn:
            save_fences(conn, [Fence(bucket, after.epoch, False)], self._clock())
        return after

    def abort(self, bucket: int) -> BucketRoute:
        """Back to the source at its epoch, writable — first, so a target that is down (the reason
        to abort, often) cannot keep the bucket unwritable; then the target's copy and fence are
        removed, or left for the next move's copy to replace when the target cannot be reached
        (without a fence row there nothing writes them, and no read is routed to them)."""
        route = self.route(bucket)
        if route.target is None:
            raise MoveFailed("the bucket is not moving")
        with self._shards[route.shard].begin() as conn:
            save_fences(conn, [Fence(bucket, route.epoch, True)], self._clock())
        after = self._step(route, MoveStep.ABORT)
        try:
            with self._shards[route.target].begin() as conn:
                delete_bucket(conn, bucket)
                conn.execute(sa.delete(t.bucket_write_fence).where(t.bucket_write_fence.c.bucket_id == bucket))
        except sa.exc.DBAPIError:
            pass  # the target is unreachable: its copy is inert, and the next copy replaces it
        return after

    def release(self, bucket: int, old_shard: str) -> int:
        """The bucket's rows deleted from the shard it left (refused while that shard holds it)."""
        route = self.route(bucket)
        if old_shard in (route.shard, route.target):
            raise MoveFailed(f"{old_shard} still holds bucket {bucket}")
        with self._shards[old_shard].begin() as conn:
            return delete_bucket(conn, bucket)

    def move(self, bucket: int, target: str) -> MoveReport:
        """Copy, fence, switch; aborted (the source stays the writer) when a step fails — a target
        that dies during the copy included."""
        source = self.route(bucket).shard
        fenced = time.perf_counter()
        try:
            self.copy(bucket, target)
            fenced = time.perf_counter()
            self.fence(bucket)
            after = self.switch(bucket)
        except Exception:
            if self.route(bucket).state is not RouteState.ACTIVE:
                self.abort(bucket)
            raise
        fenced_seconds = time.perf_counter() - fenced
        with self._shards[target].connect() as conn:
            tasks = len(_members(conn, bucket).tasks)
        return MoveReport(bucket, source, target, after.epoch, tasks, fenced_seconds)


__all__ = ["FENCE_BOUND", "BucketMover", "MoveFailed", "MoveReport", "copy_bucket", "delete_bucket"]
