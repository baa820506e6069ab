"""Heartbeats and health (SPEC R6, R7; seed §3.5.1, §5.2).

Plain heartbeats take a light path: they touch only ``last_heartbeat_*`` and
the deadline of their step row, creating no version, event or message.  A
STALE execution that heartbeats again, and an execution whose deadline
passed, change health through the full event transaction exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from status import logs
from status.app import commands as c
from status.app.context import HEALTH_PRODUCER, RUN_PRODUCER, AppContext, require
from status.app.events import EventCommands, Group
from status.domain import ids
from status.domain.auth import Role, ServicePrincipal
from status.domain.errors import DomainError, ErrorCode
from status.domain.lifecycle import EventType, Health, Lifecycle
from status.domain.model import StepError
from status.domain.projections import iso
from status.domain.silence import HeartbeatCensus
from status.domain.verdicts import ActivityOutcome, ActivityRef, ActivityState, step_ending_for
from status.infra import tables as t
from status.infra.uow import UnitOfWork, run_in_transaction

# Asks Temporal about silent executions' activities: execution id -> what Temporal knows of it.
AskTemporal = Callable[[Mapping[str, ActivityRef]], Mapping[str, ActivityOutcome]]
log = logs.get("status.health")


class HealthCommands:
    def __init__(self, ctx: AppContext, events: EventCommands) -> None:
        self.ctx = ctx
        self.events = events

    def record_heartbeats(self, caller: ServicePrincipal, items: Sequence[c.Heartbeat]) -> dict[str, Any]:
        """R6: plain heartbeats touch only last_heartbeat_*; no version, event or message."""
        require(caller, Role.WORKER)
        now = self.ctx.now()
        results: list[dict[str, Any] | None] = [None] * len(items)
        recover: list[tuple[int, str, str, int, str]] = []

        # Credentials and tenants are immutable: read once, before the writes (retried like any unit of work).
        resolved = run_in_transaction(
            self.ctx.engine, lambda uow: self._resolve_heartbeats(uow.conn, caller, items, now, results)
        )
        beats = [(*resolved[i], items[i].heartbeat_seq) for i in sorted(resolved)]

        def fast(uow: UnitOfWork) -> bool:
            # The usual batch: one beat per execution, every one RUNNING, HEALTHY and newer.
            if self._write_beats(uow.conn, beats, now, guarded=True) != len(beats):
                return False  # not committed: rolled back, decided one by one below
            uow.commit()
            return True

        def work(uow: UnitOfWork) -> None:
            conn = uow.conn
            recover.clear()  # a retried transaction decides again from the start
            rows = self._lock_steps(conn, sorted({key[:3] for key in resolved.values()}))
            seq_now: dict[tuple[str, str, int], int] = {}  # last heartbeatSeq per step, as this batch moves it
            for index in sorted(resolved):  # the order the worker sent them in
                task_id, step_id, attempt, execution_id = resolved[index]
                key, hb = (task_id, step_id, attempt), items[index]
                row = rows.get(key)
                last_seq = seq_now.get(key, row.last_heartbeat_seq) if row is not None else 0
                verdict = results[index] = self._heartbeat_verdict(execution_id, hb, row, last_seq)
                if verdict is None:
                    recover.append((index, task_id, step_id, attempt, execution_id))
                elif verdict["accepted"] and verdict["reason"] is None:
                    seq_now[key] = hb.heartbeat_seq
            self._write_beats(conn, [(*k, "", v) for k, v in seq_now.items()], now, guarded=False)
            uow.commit()

        single = len({b[:3] for b in beats}) == len(beats)
        if beats and single and run_in_transaction(self.ctx.engine, fast):
            for index, key in resolved.items():
                results[index] = _accepted(key[3])
        elif beats:
            run_in_transaction(self.ctx.engine, work)
        # STALE -> HEALTHY goes through the full event transaction, exactly once (R6).
        for index, task_id, step_id, attempt, execution_id in recover:
            results[index] = self._recover_health(task_id, step_id, attempt, execution_id, items[index], caller)
        return {"results": results, "receivedAt": iso(now)}

    def _lock_steps(self, conn: sa.Connection, keys: list[tuple[str, str, int]]) -> dict[tuple[str, str, int], Any]:
        """The heartbeat columns of these step attempts, locked in key order (so batches never deadlock).

        Only step rows are locked, never task rows: the event path locks a
        task and then its step, so taking a task lock here could close a cycle.
        """
        ts = t.task_step
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
                .with_for_update()
            )
            for row in conn.execute(query):
                rows[(row.task_id, row.step_id, row.attempt)] = row
        return rows

    def _write_beats(
        self, conn: sa.Connection, beats: list[tuple[str, str, int, str, int]], now: datetime, *, guarded: bool
    ) -> int:
        """Write heartbeats (task, step, attempt, execution, seq); returns how many rows took one.

        ``guarded``: only where the execution is current, RUNNING, HEALTHY and
        the seq newer (the fast path, no prior read); otherwise the rows were
        locked and decided already.  MySQL/MariaDB: one UPDATE joined to the
        beats per 500 — one round trip instead of one per beat; rows are
        visited in key order, so concurrent batches never deadlock-loop.
        SQLite (dev): one statement executed per beat.
        """
        beats = sorted(beats)
        if not beats:
            return 0
        if conn.dialect.name != "mysql":
            stmt = self._beat(now, guarded)
            return sum(
                conn.execute(
                    stmt, {"_task_id": t_, "_step_id": s_, "_attempt": a_, "_execution_id": e_, "_seq": q_}
                ).rowcount
                for t_, s_, a_, e_, q_ in beats
            )
        guard = (
            " WHERE task_step.execution_id = beat.e AND task_step.lifecycle_status = 'RUNNING'"
            " AND task_step.health = 'HEALTHY' AND task_step.superseded = 0 AND task_step.last_heartbeat_seq < beat.q"
            if guarded
            else ""
        )
        written = 0
        for chunk in range(0, len(beats), 500):
            part = beats[chunk : chunk + 500]
            rows = " UNION ALL ".join(["SELECT %s AS t, %s AS s, %s AS a, %s AS e, %s AS q"] * len(part))
            written += conn.exec_driver_sql(
                "UPDATE task_step JOIN (" + rows + ") AS beat"
                " ON task_step.task_id = beat.t AND task_step.step_id = beat.s AND task_step.attempt = beat.a"
                " SET task_step.last_heartbeat_seq = beat.q, task_step.last_heartbeat_at = %s,"
                " task_step.heartbeat_deadline_at = TIMESTAMPADD(SECOND, task_step.heartbeat_timeout_seconds, %s)"
                + guard,
                (*[value for beat in part for value in beat], now, now),
            ).rowcount
        return written

    def _beat(self, now: datetime, guarded: bool) -> Any:
        ts = t.task_step
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
                heartbeat_deadline_at=self._deadline_expr(now),
            )
        )

    def _deadline_expr(self, now: datetime) -> Any:
        ts = t.task_step
        if self.ctx.engine.dialect.name == "sqlite":
            return sa.func.strftime(
                "%Y-%m-%d %H:%M:%f",
                now.isoformat(sep=" "),
                "+" + sa.cast(ts.c.heartbeat_timeout_seconds, sa.String) + " seconds",
            )
        return sa.func.timestampadd(sa.literal_column("SECOND"), ts.c.heartbeat_timeout_seconds, now)

    def _resolve_heartbeats(
        self,
        conn: sa.Connection,
        caller: ServicePrincipal,
        items: Sequence[c.Heartbeat],
        now: datetime,
        results: list[dict[str, Any] | None],
    ) -> dict[int, tuple[str, str, int, str]]:
        resolved: dict[int, tuple[str, str, int, str]] = {}
        hashes = {ids.handle_hash(h.execution_handle) for h in items if h.execution_handle}
        handles = {}
        if hashes:
            h = t.task_execution_handle
            for row in conn.execute(
                sa.select(
                    h.c.handle_hash,
                    h.c.task_id,
                    h.c.step_id,
                    h.c.step_attempt,
                    h.c.execution_id,
                    h.c.producer_id,
                    h.c.expires_at,
                ).where(h.c.handle_hash.in_(sorted(hashes)))
            ):
                handles[row.handle_hash] = row
        for index, hb in enumerate(items):

            def reject(code: ErrorCode, execution_id: str | None = hb.execution_id, _i: int = index) -> None:
                results[_i] = {"executionId": execution_id, "accepted": False, "health": None, "reason": code.value}

            if hb.heartbeat_seq < 1:
                reject(ErrorCode.VALIDATION_FAILED)
                continue
            if hb.execution_handle:
                handle = handles.get(ids.handle_hash(hb.execution_handle))
                if handle is None:
                    reject(ErrorCode.TOKEN_REVOKED)
                    continue
                if handle.producer_id != caller.producer_id:
                    reject(ErrorCode.PRODUCER_MISMATCH, handle.execution_id)
                    continue
                if handle.expires_at <= now:
                    reject(ErrorCode.TOKEN_EXPIRED, handle.execution_id)
                    continue
                key = (handle.task_id, handle.step_id, handle.step_attempt, handle.execution_id)
            elif hb.execution_token:
                try:
                    claims = self.ctx.tokens.verify(hb.execution_token, now)
                except DomainError as err:
                    reject(err.code)
                    continue
                if claims.producer_id != caller.producer_id:
                    reject(ErrorCode.PRODUCER_MISMATCH, claims.execution_id)
                    continue
                if (claims.tenant_id, claims.authority_scope) != (caller.tenant_id, caller.authority_scope):
                    reject(ErrorCode.UNKNOWN_TASK, claims.execution_id)
                    continue
                key = (claims.task_id, claims.step_id, claims.step_attempt, claims.execution_id)
            else:
                reject(ErrorCode.UNAUTHENTICATED)
                continue
            if hb.execution_id is not None and hb.execution_id != key[3]:
                reject(ErrorCode.STALE_EXECUTION, hb.execution_id)
                continue
            resolved[index] = key
        # Only the caller's tenant and scope: any other task does not exist for it.
        task_ids = sorted({key[0] for key in resolved.values()})
        mine = set()
        for chunk in range(0, len(task_ids), 500):
            mine |= set(
                conn.scalars(
                    sa.select(t.task.c.id).where(
                        t.task.c.id.in_(task_ids[chunk : chunk + 500]),
                        t.task.c.tenant_id == caller.tenant_id,
                        t.task.c.authority_scope == caller.authority_scope,
                    )
                )
            )
        for index, key in list(resolved.items()):
            if key[0] not in mine:
                results[index] = {"executionId": key[3], "accepted": False, "health": None, "reason": "UNKNOWN_TASK"}
                del resolved[index]
        return resolved

    @staticmethod
    def _heartbeat_verdict(execution_id: str, hb: c.Heartbeat, row: Any, last_seq: int) -> dict[str, Any] | None:
        """One heartbeat against its locked step row (and the batch's last seq for it so far).

        None means STALE: recover through an event."""

        def no(code: ErrorCode, health: str | None = None) -> dict[str, Any]:
            return {"executionId": execution_id, "accepted": False, "health": health, "reason": code.value}

        if row is None:
            return no(ErrorCode.UNKNOWN_STEP)
        if row.execution_id != execution_id:
            return no(ErrorCode.STALE_EXECUTION)
        if row.superseded:
            return no(ErrorCode.STALE_ATTEMPT)
        if Lifecycle(row.lifecycle_status).terminal:
            return no(ErrorCode.TERMINAL_STATE)
        if row.lifecycle_status != Lifecycle.RUNNING.value:
            return no(ErrorCode.INVALID_TRANSITION)
        if hb.heartbeat_seq == last_seq:
            # A duplicate seq is an idempotent success (R6).
            return {"executionId": execution_id, "accepted": True, "health": row.health, "reason": "DUPLICATE"}
        if hb.heartbeat_seq < last_seq:
            return no(ErrorCode.SOURCE_SEQ_REGRESSION, row.health)
        if row.health == Health.STALE.value:
            return None
        return _accepted(execution_id)

    def _recover_health(
        self, task_id: str, step_id: str, attempt: int, execution_id: str, hb: c.Heartbeat, caller: ServicePrincipal
    ) -> dict[str, Any]:
        cmd = c.ReportEvent(
            event_id=f"health:{execution_id}:hb:{hb.heartbeat_seq}",
            event_type=EventType.STEP_HEALTH_CHANGED.value,
            source_seq=0,
            occurred_at=self.ctx.now(),
            task_id=task_id,
            step_id=step_id,
            step_attempt=attempt,
            execution_id=execution_id,
            health=Health.HEALTHY.value,
            reason="HEARTBEAT_RESUMED",
        )
        health_caller = ServicePrincipal(
            HEALTH_PRODUCER, caller.tenant_id, caller.authority_scope, frozenset({Role.HEALTH})
        )
        try:
            self.events.report_event(health_caller, cmd)
        except DomainError as err:
            if err.code is not ErrorCode.INVALID_TRANSITION:  # someone else recovered it first
                return {"executionId": execution_id, "accepted": False, "health": None, "reason": err.code.value}
        # The heartbeat itself now lands on the light path.
        ts = t.task_step

        def work(uow: UnitOfWork) -> None:
            uow.conn.execute(
                sa.update(ts)
                .where(
                    ts.c.task_id == task_id,
                    ts.c.step_id == step_id,
                    ts.c.attempt == attempt,
                    ts.c.last_heartbeat_seq < hb.heartbeat_seq,
                )
                .values(
                    last_heartbeat_seq=hb.heartbeat_seq,
                    last_heartbeat_at=self.ctx.now(),
                    heartbeat_deadline_at=self._deadline_expr(self.ctx.now()),
                )
            )
            uow.commit()

        run_in_transaction(self.ctx.engine, work)
        return {"executionId": execution_id, "accepted": True, "health": "HEALTHY", "reason": "RECOVERED"}

    def _end_from_temporal(
        self,
        tenant: str,
        scope: str,
        task_id: str,
        step_id: str,
        attempt: int,
        execution_id: str,
        event_type: EventType,
        error: StepError | None,
    ) -> dict[str, Any] | None:
        """An attempt Temporal says has ended, as it ended (its own report was lost)."""
        caller = ServicePrincipal(RUN_PRODUCER, tenant, scope, frozenset({Role.RECONCILER}))
        cmd = c.ReportEvent(
            event_id=f"temporal-activity:{execution_id}:{event_type.value}",
            event_type=event_type.value,
            source_seq=1,  # replaced by the attempt's next sequence (Temporal's record is not its stream)
            occurred_at=self.ctx.now(),
            task_id=task_id,
            step_id=step_id,
            step_attempt=attempt,
            execution_id=execution_id,
            error=error,
            reason="TEMPORAL_RECORD",
        )
        try:
            return self.events.report_event(caller, cmd)
        except DomainError as err:  # it reported meanwhile, or a newer attempt exists: nothing to repair
            log.info("Temporal's record of an attempt was not applied", executionId=execution_id, code=err.code.value)
            return None

    def heartbeat_census(self) -> HeartbeatCensus:
        """What the reconciler needs to tell a dead worker from an ingest outage (one aggregate read)."""
        ts = t.task_step
        with self.ctx.engine.connect() as conn:
            running, producers, newest, shortest = conn.execute(
                sa.select(
                    sa.func.count(),
                    sa.func.count(sa.distinct(ts.c.producer_id)),
                    sa.func.max(ts.c.last_heartbeat_at),
                    sa.func.min(ts.c.heartbeat_interval_seconds),
                ).where(
                    ts.c.lifecycle_status == Lifecycle.RUNNING.value,
                    ts.c.superseded.is_(sa.false()),
                    ts.c.heartbeat_deadline_at.is_not(None),
                )
            ).one()
        return HeartbeatCensus(int(running), int(producers), newest, shortest)

    def mark_stale(
        self,
        *,
        tenant_scope: tuple[str, str] | None = None,
        limit: int = 100,
        ask: AskTemporal | None = None,
    ) -> list[dict[str, Any]]:
        """R7: overdue RUNNING+HEALTHY executions become STALE through the event transaction.

        Candidates are read without locks; each is re-checked under the task
        lock taken with SKIP LOCKED, so several reconcilers never collide and a
        reporter holding the task wins. With ``ask``, Temporal is asked first about the
        candidates whose activity it knows: one it no longer has pending, with an outcome in
        its run's history, ends that way instead (its report was lost); the others go STALE.
        """
        now = self.ctx.now()
        ts, st = t.task_step, t.task_step_temporal
        with self.ctx.engine.connect() as conn:
            candidates = conn.execute(
                sa.select(
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
                .join(t.task, t.task.c.id == ts.c.task_id)
                .outerjoin(st, st.c.execution_id == ts.c.execution_id)
                .where(
                    ts.c.lifecycle_status == Lifecycle.RUNNING.value,
                    ts.c.health == Health.HEALTHY.value,
                    ts.c.heartbeat_deadline_at <= now,
                    ts.c.superseded.is_(sa.false()),
                )
                .order_by(ts.c.heartbeat_deadline_at)
                .limit(limit)
            ).all()
        candidates = [
            row for row in candidates if tenant_scope is None or (row.tenant_id, row.authority_scope) == tenant_scope
        ]
        outcomes: Mapping[str, ActivityOutcome] = {}
        refs = {
            row.execution_id: ActivityRef(row.namespace, row.workflow_id, row.run_id, row.activity_id)
            for row in candidates
            if row.activity_id is not None
        }
        if ask is not None and refs:
            try:
                outcomes = ask(refs)
            except Exception:  # Temporal unreachable: say what we know (the executor is silent)
                log.warning("could not ask Temporal about silent activities; they go STALE")
        results = []
        for task_id, step_id, attempt, execution_id, tenant, scope, *_ in candidates:
            ending = step_ending_for(outcomes.get(execution_id, ActivityOutcome(ActivityState.UNKNOWN)))
            if ending is not None:
                result = self._end_from_temporal(tenant, scope, task_id, step_id, attempt, execution_id, *ending)
                if result is not None:
                    results.append(result)
                continue
            caller = ServicePrincipal(HEALTH_PRODUCER, tenant, scope, frozenset({Role.HEALTH}))
            deadline = self.ctx.now()
            cmd = c.ReportEvent(
                event_id=f"health:{execution_id}:stale:{deadline.isoformat()}",
                event_type=EventType.STEP_HEALTH_CHANGED.value,
                source_seq=0,
                occurred_at=deadline,
                task_id=task_id,
                step_id=step_id,
                step_attempt=attempt,
                execution_id=execution_id,
                health=Health.STALE.value,
                reason="HEARTBEAT_TIMEOUT",
            )

            def work(
                uow: UnitOfWork,
                cmd: c.ReportEvent = cmd,
                caller: ServicePrincipal = caller,
                task_id: str = task_id,
                step_id: str = step_id,
                attempt: int = attempt,
            ) -> tuple[dict[str, Any], Group] | None:
                locked = uow.conn.execute(
                    sa.select(t.task.c.id).where(t.task.c.id == task_id).with_for_update(skip_locked=True)
                ).first()
                if locked is None:
                    return None  # another reconciler or a reporter has it; next pass re-checks
                still_overdue = uow.conn.execute(
                    sa.select(ts.c.task_id).where(
                        ts.c.task_id == task_id,
                        ts.c.step_id == step_id,
                        ts.c.attempt == attempt,
                        ts.c.lifecycle_status == Lifecycle.RUNNING.value,
                        ts.c.health == Health.HEALTHY.value,
                        ts.c.heartbeat_deadline_at <= self.ctx.now(),
                    )
                ).first()
                if still_overdue is None:
                    return None
                return self.events.apply_locked(uow, caller, cmd)

            try:
                outcome = run_in_transaction(self.ctx.engine, work)
            except DomainError:
                continue
            if outcome is not None:
                result, group = outcome
                self.events.publish(group)
                results.append(result)
        return results


def _accepted(execution_id: str) -> dict[str, Any]:
    return {"executionId": execution_id, "accepted": True, "health": Health.HEALTHY.value, "reason": None}
