"""Health (design D8.6, D8.7): silent executions go STALE, and attempts end as Temporal recorded them.

An execution whose heartbeat deadline passed changes health through the full event transaction,
exactly once (a STALE execution heard again is made HEALTHY by ``status.app.beats``, the
heartbeats' light path); one whose activity Temporal no longer has pending ends as Temporal's
record says (its own report was lost), as does one whose activity completes elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from status import logs
from status.app import commands as c
from status.app.answers import EventAccepted
from status.app.context import RUN_PRODUCER, AppContext
from status.app.events import EventCommands
from status.app.group import Group
from status.app.ports import Database, UnitOfWork
from status.app.shards import run_for
from status.domain import ids
from status.domain.auth import Role, ServicePrincipal
from status.domain.errors import DomainError
from status.domain.lifecycle import EventType, Health, Lifecycle
from status.domain.model import StepError
from status.domain.reports import HEALTH_PRODUCER
from status.domain.silence import HeartbeatCensus, HeartbeatFreshness
from status.domain.verdicts import (
    ActivityOutcome,
    ActivityRef,
    ActivityState,
    next_completion_check,
    step_ending_for,
)

# Asks Temporal about silent executions' activities: execution id -> what Temporal knows of it.
AskTemporal = Callable[[Mapping[str, ActivityRef]], Mapping[str, ActivityOutcome]]
log = logs.get("status.health")
# A step attempt a beat or a health change names: (task, step, attempt, execution).
Attempt = tuple[str, str, int, str]


class HealthCommands:
    def __init__(self, ctx: AppContext, events: EventCommands) -> None:
        self.ctx = ctx
        self.events = events

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
    ) -> EventAccepted | None:
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
        counts = []
        for _, database in self.ctx.shards.every():
            with database.reading() as stores:
                counts.append(stores.heartbeats.census())
        return HeartbeatCensus(
            sum(running for running, *_ in counts),
            # A producer beats on every shard its tasks are on: the largest count is the one sure.
            max(producers for _, producers, *_ in counts),
            max((newest for _, _, newest, _ in counts if newest is not None), default=None),
            min((shortest for *_, shortest in counts if shortest is not None), default=None),
        )

    def heartbeat_freshness(self, ages: Sequence[int]) -> HeartbeatFreshness:
        """How fresh running executions' heartbeats are now (one aggregate read)."""
        now = self.ctx.now()
        running = overdue = 0
        heard = [0] * len(ages)
        age_sum = 0.0
        for _, database in self.ctx.shards.every():
            with database.reading() as stores:
                shard_running, shard_overdue, shard_heard, shard_age_sum = stores.heartbeats.freshness(now, ages)
            running, overdue, age_sum = running + shard_running, overdue + shard_overdue, age_sum + shard_age_sum
            heard = [a + b for a, b in zip(heard, shard_heard, strict=True)]
        return HeartbeatFreshness(running, overdue, dict(zip(ages, heard, strict=True)), age_sum)

    def mark_stale(  # noqa: C901
        self,
        *,
        tenant_scope: tuple[str, str] | None = None,
        limit: int = 100,
        ask: AskTemporal | None = None,
        due_by: datetime | None = None,
    ) -> list[EventAccepted]:
        """design D8.7: overdue RUNNING+HEALTHY executions become STALE through the event transaction.

        Overdue means a heartbeat deadline at or before ``due_by`` (default: now); the reconciler
        passes the newest beat of a fleet (``status.domain.silence.stale_cutoff``).

        Candidates are read without locks; each is re-checked under the task
        lock taken with SKIP LOCKED, so several reconcilers never collide and a
        reporter holding the task wins. With ``ask``, Temporal is asked first about the
        candidates whose activity it knows: one it no longer has pending, with an outcome in
        its run's history, ends that way instead (its report was lost); the others go STALE.
        """
        now = self.ctx.now()
        due = now if due_by is None else min(now, due_by)
        candidates = []
        for name, database in self.ctx.shards.every():
            with database.reading() as stores:
                overdue = stores.heartbeats.overdue_executions(due, limit, tenant_scope)
            candidates += [row for row in overdue if self.ctx.shards.holds(name, ids.bucket_hint(row[0]))]
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
        results: list[EventAccepted] = []
        for task_id, step_id, attempt, execution_id, tenant, scope, *_ in candidates:
            ending = step_ending_for(outcomes.get(execution_id, ActivityOutcome(ActivityState.UNKNOWN)))
            if ending is not None:
                result = self._end_from_temporal(tenant, scope, task_id, step_id, attempt, execution_id, *ending)
                if result is not None:
                    results.append(result)
                continue
            caller = ServicePrincipal(HEALTH_PRODUCER, tenant, scope, frozenset({Role.HEALTH}))
            deadline = self.ctx.now()
            cmd = health_change(
                f"health:{execution_id}:stale:{deadline.isoformat()}",
                deadline,
                (task_id, step_id, attempt, execution_id),
                Health.STALE,
                "HEARTBEAT_TIMEOUT",
            )

            def work(
                uow: UnitOfWork,
                cmd: c.ReportEvent = cmd,
                caller: ServicePrincipal = caller,
                task_id: str = task_id,
                step_id: str = step_id,
                attempt: int = attempt,
            ) -> tuple[EventAccepted, Group] | None:
                if not uow.heartbeats.try_lock_task(task_id):
                    return None  # another reconciler or a reporter has it; next pass re-checks
                if not uow.heartbeats.still_overdue(task_id, step_id, attempt, due):
                    return None
                return self.events.apply_locked(uow, caller, cmd)

            try:
                outcome = run_for(self.ctx.shards, ids.bucket_hint(task_id), work)
            except DomainError:
                continue
            if outcome is not None:
                result, group = outcome
                self.events.publish(group)
                results.append(result)
        return results

    def watch_completions(self, ask: AskTemporal, *, limit: int = 100) -> list[EventAccepted]:
        """Attempts whose activity completes elsewhere (through its task token) end as Temporal
        recorded it, once it has: each due one is asked about (one describe per run, and the
        run's history only when something ended), then ends that way or is asked again later
        (``next_completion_check``). Temporal unreachable: nothing changes, asked again next pass."""
        results: list[EventAccepted] = []
        for name, database in self.ctx.shards.every():
            results += self._watch_completions_on(name, database, ask, limit)
        return results

    def _watch_completions_on(self, name: str, database: Database, ask: AskTemporal, limit: int) -> list[EventAccepted]:
        now = self.ctx.now()
        with database.reading() as stores:
            due = [
                row
                for row in stores.heartbeats.awaited_executions(now, limit)
                if self.ctx.shards.holds(name, ids.bucket_hint(row.task_id))
            ]
        checks: dict[str, datetime | None] = {
            row.execution_id: None for row in due if row.lifecycle_status != "RUNNING"
        }
        running = [row for row in due if row.lifecycle_status == Lifecycle.RUNNING.value]
        results: list[EventAccepted] = []
        if running:
            refs = {
                row.execution_id: ActivityRef(row.namespace, row.workflow_id, row.run_id, row.activity_id)
                for row in running
            }
            outcomes = ask(refs)  # raises when Temporal is unreachable: nothing is written
            for row in running:
                ending = step_ending_for(outcomes.get(row.execution_id, ActivityOutcome(ActivityState.UNKNOWN)))
                if ending is None:
                    checks[row.execution_id] = next_completion_check(row.completes_elsewhere_at, now)
                    continue
                checks[row.execution_id] = None
                result = self._end_from_temporal(
                    row.tenant_id,
                    row.authority_scope,
                    row.task_id,
                    row.step_id,
                    row.attempt,
                    row.execution_id,
                    *ending,
                )
                if result is not None:
                    results.append(result)
        if checks:

            def work(uow: UnitOfWork) -> None:
                uow.heartbeats.next_check(checks)
                uow.commit()

            database.run(work)
        return results


def health_change(event_id: str, at: datetime, attempt: Attempt, health: Health, reason: str) -> c.ReportEvent:
    """A change of an attempt's health the service reports itself (sequence 0: the producer's own
    sequence is untouched)."""
    task_id, step_id, step_attempt, execution_id = attempt
    return c.ReportEvent(
        event_id=event_id,
        event_type=EventType.STEP_HEALTH_CHANGED.value,
        source_seq=0,
        occurred_at=at,
        task_id=task_id,
        step_id=step_id,
        step_attempt=step_attempt,
        execution_id=execution_id,
        health=health.value,
        reason=reason,
    )
