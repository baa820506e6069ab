"""Temporal's verdict (design D18): tasks end when the Temporal run that owns them ends, however it ends.

The run that creates a task owns it (``CreateWorkflow.temporal_owner``) until it hands it over
(``set_owner``). The observer's run follower (``observer/runs.py``) reads closed runs from
Temporal and calls ``follow`` here: the open tasks of a run whose work continues in another run
(continue-as-new, retry, cron, reset) move to that run; the others end with the run's verdict
(``status.domain.verdicts``), written as ``RECONCILER`` through the same event command as every
report, with an event id derived from the run and its close — a replay or a second observer
changes nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from status import logs
from status.app import commands as c
from status.app.context import RUN_PRODUCER, AppContext, require
from status.app.events import EventCommands
from status.app.ports import OwnedTask, UnitOfWork
from status.app.shard_ports import ShardGroup
from status.app.shards import MOVING, on_shards, run_for
from status.domain import ids
from status.domain.auth import Role, ServicePrincipal
from status.domain.errors import Conflict, DomainError, ErrorCode, NotFound, Unavailable
from status.domain.lifecycle import EventType, Health, Lifecycle
from status.domain.verdicts import ClosedRun, verdict_event_id, verdict_for, verdict_source_seq

log = logs.get("status.runs")

__all__ = ["RUN_PRODUCER", "FollowResult", "OwnedTask", "RunCommands"]


@dataclass
class FollowResult:
    ended: list[str]  # task ids this call ended
    handed_over: list[str]  # task ids that moved to the run continuing the work


@dataclass
class StuckResult:
    stuck: list[str]  # task ids now shown stuck
    recovered: list[str]  # task ids whose run moves again


def _owned_by_one_of(task: OwnedTask, runs: set[tuple[str, str]]) -> bool:
    """The task's owner is one of these runs (an owner without a run id: any run of its workflow id)."""
    if task.run_id is not None:
        return (task.workflow_id, task.run_id) in runs
    return any(workflow_id == task.workflow_id for workflow_id, _ in runs)


class RunCommands:
    def __init__(self, ctx: AppContext, events: EventCommands) -> None:
        self.ctx = ctx
        self.events = events

    def set_owner(self, caller: ServicePrincipal, task_id: str, owner: c.TemporalOwner) -> dict[str, Any]:
        """Hand a task to another Temporal run (a child workflow's, say): its end then ends the task."""
        require(caller, Role.COORDINATOR)

        def work(uow: UnitOfWork) -> dict[str, Any]:
            row = uow.tasks.lock_tenancy(task_id)
            if row is None or (row[0], row[1]) != (caller.tenant_id, caller.authority_scope):
                raise NotFound(f"task {task_id} does not exist", ErrorCode.UNKNOWN_TASK)
            if Lifecycle(row[2]).terminal:
                raise Conflict(f"task {task_id} has ended; it has no owner to change", ErrorCode.TERMINAL_STATE)
            uow.runs.set_owner([task_id], owner.namespace, owner.workflow_id, owner.run_id)
            uow.commit()
            return {
                "taskId": task_id,
                "temporalOwner": {"namespace": owner.namespace, "workflowId": owner.workflow_id, "runId": owner.run_id},
            }

        return run_for(self.ctx.shards, ids.bucket_hint(task_id), work)

    # ------------------------------------------------------------ for the run follower
    # One follower serves every shard: it reads Temporal's closed runs once, and each run's tasks
    # are read and written on their own shards.
    def open_tasks(self, namespace: str, workflow_ids: Sequence[str]) -> list[OwnedTask]:
        found: list[OwnedTask] = []
        for name, database in self.ctx.shards.every():
            with database.reading() as stores:
                owned = stores.runs.open_tasks_of(namespace, workflow_ids)
            found += [task for task in owned if self.ctx.shards.holds(name, ids.bucket_hint(task.task_id))]
        return found

    def follow(self, run: ClosedRun, continued_by: str | None, tasks: Sequence[OwnedTask]) -> FollowResult:
        """Apply one closed run to the open tasks it owns (the caller matched them by workflow id)."""
        mine = [task for task in tasks if task.run_id in (None, run.run_id)]
        result = FollowResult([], [])
        if not mine:
            return result
        if continued_by is not None:

            def move(group: ShardGroup) -> list[None]:
                def work(uow: UnitOfWork) -> list[None]:
                    uow.runs.hand_over(run.namespace, [mine[i].task_id for i in group.indexes], continued_by)
                    uow.commit()
                    return [None] * len(group.indexes)

                return self.ctx.shards.run(group, work)

            on_shards(self.ctx.shards, [ids.bucket_hint(task.task_id) for task in mine], move, _moving)
            result.handed_over = [task.task_id for task in mine]
            return result
        verdict = verdict_for(run)
        if verdict is None:  # continued-as-new, and the next run is not known yet: look again later
            return result
        for task in mine:
            caller = ServicePrincipal(RUN_PRODUCER, task.tenant_id, task.authority_scope, frozenset({Role.RECONCILER}))
            cmd = c.ReportEvent(
                event_id=verdict_event_id(run, task.task_id),
                event_type=verdict.event_type.value,
                source_seq=verdict_source_seq(run),
                occurred_at=run.close_time,
                task_id=task.task_id,
                task_attempt=task.attempt,
                error=verdict.error,
                reason=verdict.message,
            )
            try:
                outcome = self.events.report_event(caller, cmd)
            except DomainError as err:
                if err.code in (ErrorCode.TERMINAL_STATE, ErrorCode.EVENT_ID_CONFLICT, ErrorCode.STALE_ATTEMPT):
                    continue  # it ended meanwhile (its own run's report, or another follower): nothing to do
                raise
            if not outcome.get("duplicate"):
                result.ended.append(task.task_id)
        return result

    def reflect_stuck(self, namespace: str, stuck: Collection[tuple[str, str]]) -> StuckResult:
        """Temporal's list of this namespace's stuck runs (workflow id, run id: open, their workflow
        task failing again and again) becomes the health of the open tasks they own: a task whose
        run is listed turns STALE (stuck), one shown stuck whose run is listed no more recovers (the
        run moved again; a closed run's verdict ends the task anyway). Idempotent: a second observer
        or a replayed pass finds nothing left to change."""
        shown: list[OwnedTask] = []
        for name, database in self.ctx.shards.every():
            with database.reading() as stores:
                stuck_here = stores.runs.stuck_tasks(namespace)
            shown += [task for task in stuck_here if self.ctx.shards.holds(name, ids.bucket_hint(task.task_id))]
        owned = self.open_tasks(namespace, sorted({workflow_id for workflow_id, _ in stuck}))
        runs = set(stuck)
        shown_ids = {task.task_id for task in shown}
        result = StuckResult([], [])
        for task in owned:
            if task.task_id not in shown_ids and _owned_by_one_of(task, runs) and self._run_health(task, stuck=True):
                result.stuck.append(task.task_id)
        for task in shown:
            if not _owned_by_one_of(task, runs) and self._run_health(task, stuck=False):
                result.recovered.append(task.task_id)
        return result

    def _run_health(self, task: OwnedTask, *, stuck: bool) -> bool:
        caller = ServicePrincipal(RUN_PRODUCER, task.tenant_id, task.authority_scope, frozenset({Role.RECONCILER}))
        health = Health.STALE if stuck else Health.HEALTHY
        now = self.ctx.now()
        cmd = c.ReportEvent(
            event_id=f"run-health:{task.task_id}:{health.value}:{now.isoformat()}",
            event_type=EventType.TASK_HEALTH_CHANGED.value,
            source_seq=0,
            occurred_at=now,
            task_id=task.task_id,
            task_attempt=task.attempt,
            health=health.value,
            reason="WORKFLOW_STUCK" if stuck else "WORKFLOW_MOVES",
        )
        try:
            self.events.report_event(caller, cmd)
        except DomainError as err:
            if err.code in (ErrorCode.TERMINAL_STATE, ErrorCode.INVALID_TRANSITION):
                return False  # it ended, or another observer changed it first
            raise
        return True

    def watermark(self, namespace: str) -> datetime | None:
        """Where to go on reading ``namespace``'s closed runs: the stored watermark, or (first time)
        the creation of the oldest open task a run of it owns; None when there is nothing to follow."""
        with self.ctx.db.reading() as stores:  # the home database keeps the follower's watermark
            kept = stores.runs.watermark(namespace)
        if kept is not None:
            return kept
        oldest = []
        for _, database in self.ctx.shards.every():
            with database.reading() as stores:
                oldest.append(stores.runs.oldest_open_owned(namespace))
        return min((t for t in oldest if t is not None), default=None)

    def advance_watermark(self, namespace: str, close_time: datetime) -> None:
        def work(uow: UnitOfWork) -> None:
            uow.runs.advance_watermark(namespace, close_time, self.ctx.now())
            uow.commit()

        self.ctx.db.run(work)


def _moving(_: int) -> None:
    raise Unavailable(MOVING)  # the pass is taken again later, the bucket then on its shard
