"""The heartbeat light path and the reconciler's reads (design D8.6, D8.7): step rows' heartbeat columns only."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from status.domain.auth import StoredHandle
from status.domain.lifecycle import Health, Lifecycle
from status.infra import tables as t
from status.infra.stores.tasks import handles_by_hash

ts, st = t.task_step, t.task_step_temporal


# A step attempt as the reconciler and the completion watch read it: which attempt, whose, and the
# Temporal activity behind it (None when it ran outside Temporal).
_ATTEMPT_WITH_ACTIVITY = (
    ts.c.task_id,
    ts.c.step_id,
    ts.c.attempt,
    ts.c.execution_id,
    t.task.c.tenant_id,
    t.task.c.authority_scope,
    st.c.namespace,
    st.c.workflow_id,
    st.c.run_id,
    st.c.activity_id,
)


def _completes_elsewhere() -> Any:
    """The step attempt's activity completes elsewhere (its worker let go of it)."""
    return (
        sa.select(st.c.execution_id)
        .where(st.c.execution_id == ts.c.execution_id, st.c.completes_elsewhere_at.is_not(None))
        .exists()
    )


# A batch's beats in one statement (the API takes at most 2,000 per request).
BEATS_PER_STATEMENT = 2000

# Why the deadline moves lazily. ``heartbeat_deadline_at`` is indexed (the reconciler finds
# overdue attempts by it), and every deadline a beat writes is "now + timeout": the newest
# entries of one index page. Writing it on every beat moved an index entry per beat, all on that
# page, and concurrent batches queued on its latch — bare UPDATEs of 1,000 rows topped out at
# ~50,000 rows/s here with the index, ~93,000 without it, whatever the number of connections.
# So a beat always writes its seq and time, but the indexed deadline only when the stored one is
# unset or behind the true one (last beat + timeout) by more than a quarter of the timeout;
# unchanged, InnoDB leaves the index entry alone. The stored deadline is thereby never later than
# the true one and at most a quarter timeout earlier: a lower bound the index can range over, and
# every overdue check adds the exact condition on the last beat (``_overdue``). An attempt that
# beats at its interval (shorter than three quarters of its timeout) is never even a candidate.
_LAZY_DEADLINE_MYSQL = (
    "CASE WHEN task_step.heartbeat_deadline_at IS NULL OR task_step.heartbeat_deadline_at <"
    " TIMESTAMPADD(SECOND, task_step.heartbeat_timeout_seconds - task_step.heartbeat_timeout_seconds DIV 4, %s)"
    " THEN TIMESTAMPADD(SECOND, task_step.heartbeat_timeout_seconds, %s) ELSE task_step.heartbeat_deadline_at END"
)


def beats_statement(count: int, *, guarded: bool) -> str:
    """MySQL/MariaDB: ``count`` beats (execution, seq each, then now three times) written in one
    UPDATE joined to them by execution (a unique key: two values a beat to send, not five);
    ``guarded``: only where the attempt is RUNNING, HEALTHY, not superseded and the seq newer
    (bench/ingest.py times it bare as the heartbeats' ceiling)."""
    guard = (
        " WHERE task_step.lifecycle_status = 'RUNNING' AND task_step.health = 'HEALTHY'"
        " AND task_step.superseded = 0 AND task_step.last_heartbeat_seq < beat.q"
        if guarded
        else ""
    )
    rows = " UNION ALL ".join(["SELECT %s AS e, %s AS q"] * count)
    return (
        "UPDATE task_step JOIN (" + rows + ") AS beat ON task_step.execution_id = beat.e"
        " SET task_step.last_heartbeat_seq = beat.q, task_step.last_heartbeat_at = %s,"
        " task_step.heartbeat_deadline_at = " + _LAZY_DEADLINE_MYSQL + guard
    )


class SqlHeartbeatStore:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def handles(self, hashes: Iterable[str]) -> dict[str, StoredHandle]:
        """Execution handles by hash (task, step, attempt, execution, producer, expiry)."""
        return handles_by_hash(self._conn, hashes)

    def tasks_of(self, task_ids: list[str], tenant_id: str, scope: str) -> set[str]:
        """Which of these tasks belong to a tenant's scope (chunks of 500 ids)."""
        mine: set[str] = set()
        for chunk in range(0, len(task_ids), 500):
            mine |= set(
                self._conn.scalars(
                    sa.select(t.task.c.id).where(
                        t.task.c.id.in_(task_ids[chunk : chunk + 500]),
                        t.task.c.tenant_id == tenant_id,
                        t.task.c.authority_scope == scope,
                    )
                )
            )
        return mine

    def beat_rows(self, keys: list[tuple[str, str, int]], *, lock: bool) -> dict[tuple[str, str, int], Any]:
        """The heartbeat columns of these step attempts; ``lock``: locked, in key order (so batches
        never deadlock).

        Only step rows are locked, never task rows: the event path locks a
        task and then its step, so taking a task lock here could close a cycle.
        """
        rows: dict[tuple[str, str, int], Any] = {}
        # Chunks of 100 keys: MariaDB turns longer row-value IN lists into a derived
        # table and may then scan (and lock-read) the whole table instead of the key range.
        for chunk in range(0, len(keys), 100):
            query = (
                sa.select(
                    ts.c.task_id,
                    ts.c.step_id,
                    ts.c.attempt,
                    ts.c.execution_id,
                    ts.c.lifecycle_status,
                    ts.c.health,
                    ts.c.superseded,
                    ts.c.last_heartbeat_seq,
                )
                .where(sa.tuple_(ts.c.task_id, ts.c.step_id, ts.c.attempt).in_(keys[chunk : chunk + 100]))
                .order_by(ts.c.task_id, ts.c.step_id, ts.c.attempt)
            )
            for row in self._conn.execute(query.with_for_update() if lock else query):
                rows[(row.task_id, row.step_id, row.attempt)] = row
        return rows

    def write_beats(self, beats: list[tuple[str, str, int, str, int]], now: datetime, *, guarded: bool) -> int:
        """Write heartbeats (task, step, attempt, execution, seq); returns how many rows took one.

        ``guarded``: only where the execution is current, RUNNING, HEALTHY and
        the seq newer (the fast path, no prior read); otherwise the rows were
        locked and decided already.  MySQL/MariaDB: one UPDATE joined to the
        beats of a whole batch (up to 2,000) by execution — one round trip instead of one per beat;
        the beats are sent in key order and the rows visited so, so concurrent batches never
        deadlock-loop.
        SQLite (dev): one statement executed per beat.

        The indexed deadline moves lazily (``_LAZY_DEADLINE_MYSQL`` says why).
        """
        beats = sorted(beats)
        if not beats:
            return 0
        conn = self._conn
        if conn.dialect.name != "mysql":
            stmt = self._beat(now, guarded)
            return sum(
                conn.execute(
                    stmt, {"_task_id": t_, "_step_id": s_, "_attempt": a_, "_execution_id": e_, "_seq": q_}
                ).rowcount
                for t_, s_, a_, e_, q_ in beats
            )
        written = 0
        for chunk in range(0, len(beats), BEATS_PER_STATEMENT):
            part = beats[chunk : chunk + BEATS_PER_STATEMENT]
            written += conn.exec_driver_sql(
                beats_statement(len(part), guarded=guarded),
                (*[value for beat in part for value in beat[3:]], now, now, now),
            ).rowcount
        return written

    def _beat(self, now: datetime, guarded: bool) -> Any:
        where = [
            ts.c.task_id == sa.bindparam("_task_id"),
            ts.c.step_id == sa.bindparam("_step_id"),
            ts.c.attempt == sa.bindparam("_attempt"),
        ]
        if guarded:
            where += [
                ts.c.execution_id == sa.bindparam("_execution_id"),
                ts.c.lifecycle_status == Lifecycle.RUNNING.value,
                ts.c.health == Health.HEALTHY.value,
                ts.c.superseded.is_(sa.false()),
                ts.c.last_heartbeat_seq < sa.bindparam("_seq"),
            ]
        return (
            sa.update(ts)
            .where(*where)
            .values(
                last_heartbeat_seq=sa.bindparam("_seq"),
                last_heartbeat_at=now,
                heartbeat_deadline_at=self._lazy_deadline(now),
            )
        )

    def _lazy_deadline(self, now: datetime) -> Any:
        """The deadline a beat at ``now`` leaves: the exact one when the stored one is unset or
        behind it by more than a quarter of the timeout, else the stored one (as the MySQL form)."""
        slack = ts.c.heartbeat_timeout_seconds // 4
        return sa.case(
            (
                sa.or_(
                    ts.c.heartbeat_deadline_at.is_(None),
                    ts.c.heartbeat_deadline_at < self._deadline_expr(now, ts.c.heartbeat_timeout_seconds - slack),
                ),
                self._deadline_expr(now),
            ),
            else_=ts.c.heartbeat_deadline_at,
        )

    def _deadline_expr(self, now: Any, seconds: Any = None) -> Any:
        """``now`` (an instant or a column) plus ``seconds`` (default: the step's timeout)."""
        seconds = ts.c.heartbeat_timeout_seconds if seconds is None else seconds
        if self._conn.dialect.name == "sqlite":
            start = now.isoformat(sep=" ") if isinstance(now, datetime) else now
            return sa.func.strftime("%Y-%m-%d %H:%M:%f", start, "+" + sa.cast(seconds, sa.String) + " seconds")
        return sa.func.timestampadd(sa.literal_column("SECOND"), seconds, now)

    def _overdue(self, now: datetime) -> tuple[Any, ...]:
        """Past the heartbeat deadline: the indexed, lazily moved deadline says which rows may be
        (it is never later than the true one), the last beat says which are."""
        return (
            ts.c.heartbeat_deadline_at <= now,
            sa.or_(ts.c.last_heartbeat_at.is_(None), self._deadline_expr(ts.c.last_heartbeat_at) <= now),
        )

    def extend_handles(self, hashes: Sequence[str], expires_at: datetime) -> None:
        h = t.task_execution_handle
        for chunk in range(0, len(hashes), 500):
            self._conn.execute(
                sa.update(h)
                .where(h.c.handle_hash.in_(sorted(hashes[chunk : chunk + 500])), h.c.expires_at < expires_at)
                .values(expires_at=expires_at)
            )

    def write_recovered_beats(self, beats: Sequence[tuple[str, str, int, int]], now: datetime) -> None:
        """The heartbeats (task, step, attempt, seq) that recovered STALE executions, once their
        recovery events committed."""
        if not beats:
            return
        self._conn.execute(
            sa.update(ts)
            .where(
                ts.c.task_id == sa.bindparam("_task_id"),
                ts.c.step_id == sa.bindparam("_step_id"),
                ts.c.attempt == sa.bindparam("_attempt"),
                ts.c.last_heartbeat_seq < sa.bindparam("_seq"),
            )
            .values(
                last_heartbeat_seq=sa.bindparam("_seq"),
                last_heartbeat_at=now,
                heartbeat_deadline_at=self._lazy_deadline(now),
            ),
            [{"_task_id": t_, "_step_id": s_, "_attempt": a_, "_seq": q_} for t_, s_, a_, q_ in sorted(beats)],
        )

    def census(self) -> tuple[int, int, datetime | None, int | None]:
        """(running executions with a deadline, their producers, newest heartbeat, shortest interval)."""
        running, producers, newest, shortest = self._conn.execute(
            sa.select(
                sa.func.count(),
                sa.func.count(sa.distinct(ts.c.producer_id)),
                sa.func.max(ts.c.last_heartbeat_at),
                sa.func.min(ts.c.heartbeat_interval_seconds),
            ).where(
                ts.c.lifecycle_status == Lifecycle.RUNNING.value,
                ts.c.superseded.is_(sa.false()),
                ts.c.heartbeat_deadline_at.is_not(None),
                ~_completes_elsewhere(),
            )
        ).one()
        return int(running), int(producers), newest, shortest

    def freshness(self, now: datetime, ages: Sequence[int]) -> tuple[int, int, list[int], float]:
        """(running executions that heartbeat, those past their timeout, per age in ``ages`` how
        many were heard within it, and the sum of the heard ones' ages in seconds), in one
        aggregate over the rows ``census`` reads."""
        overdue = sa.and_(*self._overdue(now))
        heard = [
            sa.func.sum(sa.case((ts.c.last_heartbeat_at >= now - timedelta(seconds=age), 1), else_=0)) for age in ages
        ]
        if self._conn.dialect.name == "sqlite":
            age = (sa.func.julianday(now.isoformat(sep=" ")) - sa.func.julianday(ts.c.last_heartbeat_at)) * 86400
        else:
            age = sa.func.timestampdiff(sa.literal_column("MICROSECOND"), ts.c.last_heartbeat_at, now) / 1e6
        row = self._conn.execute(
            sa.select(sa.func.count(), sa.func.sum(sa.case((overdue, 1), else_=0)), sa.func.sum(age), *heard).where(
                ts.c.lifecycle_status == Lifecycle.RUNNING.value,
                ts.c.superseded.is_(sa.false()),
                ts.c.heartbeat_deadline_at.is_not(None),
                ~_completes_elsewhere(),
            )
        ).one()
        return int(row[0]), int(row[1] or 0), [int(n or 0) for n in row[3:]], float(row[2] or 0.0)

    def overdue_executions(self, now: datetime, limit: int, tenant_scope: tuple[str, str] | None = None) -> list[Any]:
        """RUNNING + HEALTHY attempts past their heartbeat deadline (unlocked), oldest deadline first,
        with their tenant, scope and Temporal activity (when known); of one tenant's scope when given."""
        scoped = (
            (t.task.c.tenant_id == tenant_scope[0], t.task.c.authority_scope == tenant_scope[1])
            if tenant_scope is not None
            else ()
        )
        return list(
            self._conn.execute(
                sa.select(*_ATTEMPT_WITH_ACTIVITY)
                .join(t.task, t.task.c.id == ts.c.task_id)
                .outerjoin(st, st.c.execution_id == ts.c.execution_id)
                .where(
                    ts.c.lifecycle_status == Lifecycle.RUNNING.value,
                    ts.c.health == Health.HEALTHY.value,
                    *self._overdue(now),
                    ts.c.superseded.is_(sa.false()),
                    st.c.completes_elsewhere_at.is_(None),  # watched in Temporal instead (no beats due)
                    *scoped,
                )
                .order_by(ts.c.heartbeat_deadline_at)
                .limit(limit)
            ).all()
        )

    def try_lock_task(self, task_id: str) -> bool:
        """Lock a task unless someone else holds it (SKIP LOCKED)."""
        query = sa.select(t.task.c.id).where(t.task.c.id == task_id).with_for_update(skip_locked=True)
        return self._conn.execute(query).first() is not None

    def still_overdue(self, task_id: str, step_id: str, attempt: int, now: datetime) -> bool:
        return (
            self._conn.execute(
                sa.select(ts.c.task_id).where(
                    ts.c.task_id == task_id,
                    ts.c.step_id == step_id,
                    ts.c.attempt == attempt,
                    ts.c.lifecycle_status == Lifecycle.RUNNING.value,
                    ts.c.health == Health.HEALTHY.value,
                    *self._overdue(now),
                    ~_completes_elsewhere(),
                )
            ).first()
            is not None
        )

    def mark_completes_elsewhere(self, execution_ids: list[str], now: datetime) -> None:
        """Their workers said these activities complete elsewhere: watch them from now on."""
        if execution_ids:
            self._conn.execute(
                st.update()
                .where(st.c.execution_id.in_(execution_ids), st.c.completes_elsewhere_at.is_(None))
                .values(completes_elsewhere_at=now, next_check_at=now)
            )

    def awaited_executions(self, now: datetime, limit: int) -> list[Any]:
        """Attempts completing elsewhere whose check is due (unlocked), earliest first, as
        ``overdue_executions`` gives them, with when their worker let go of them."""
        return list(
            self._conn.execute(
                sa.select(
                    *_ATTEMPT_WITH_ACTIVITY,
                    st.c.completes_elsewhere_at,
                    ts.c.lifecycle_status,
                )
                .select_from(st)
                .join(ts, ts.c.execution_id == st.c.execution_id)
                .join(t.task, t.task.c.id == ts.c.task_id)
                .where(st.c.next_check_at <= now)
                .order_by(st.c.next_check_at)
                .limit(limit)
            ).all()
        )

    def next_check(self, checks: dict[str, datetime | None]) -> None:
        """When to ask Temporal again about each awaited attempt (None: never, it has ended)."""
        for execution_id, at in checks.items():
            self._conn.execute(st.update().where(st.c.execution_id == execution_id).values(next_check_at=at))
