"""Operators see what is overdue (design D18: long-RUNNING and STALE tasks get a reconciliation path).

A task is overdue when it has been RUNNING (or STALE) longer than it should: one of its running
attempts longer than its operation's ``maxRuntimeSeconds``, or the task itself longer than the
default. Read-only; ``task-observer overdue``, ``GET /internal/v1/tasks:overdue`` (ADMIN) and the
observer's ``overdue_tasks`` gauge show the same list.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NotRequired, TypedDict

from status.app.context import AppContext, operation, require
from status.app.ports import RunningAttempt, Stores
from status.domain import ids
from status.domain.auth import Role, ServicePrincipal
from status.domain.errors import DomainError
from status.domain.projections import iso

DEFAULT_MAX_RUNTIME = timedelta(hours=24)
# Attempts with their own, shorter limit are looked at from this age on.
SHORTEST_LIMIT = timedelta(seconds=1)


class OverdueReason(TypedDict):
    """Why a task is overdue: an attempt past its operation's limit, or the task past the default."""

    reason: str  # STEP_OVER_MAX_RUNTIME | TASK_OVER_DEFAULT
    limitSeconds: int
    stepId: NotRequired[str]
    operationCode: NotRequired[str]


class OverdueTask(OverdueReason):
    """One row of the overdue list, as the API, the command line and the gauge see it."""

    taskId: str
    tenantId: str
    title: str
    health: str
    startedAt: str | None
    runningForSeconds: int


@dataclass
class OverdueQueries:
    ctx: AppContext
    default_max_runtime: timedelta = DEFAULT_MAX_RUNTIME

    def overdue(self, caller: ServicePrincipal | None, *, limit: int = 100) -> list[OverdueTask]:
        """Overdue tasks, oldest first; ``caller`` None is the operator's command line (all tenants)."""
        if caller is not None:
            require(caller, Role.ADMIN)
        now = self.ctx.now()
        scope = (caller.tenant_id, caller.authority_scope) if caller is not None else None
        found: list[OverdueTask] = []
        for name, database in self.ctx.shards.every():  # each shard's oldest, merged
            with database.reading() as stores:
                found += [
                    task
                    for task in self._overdue_on(stores, scope, now, limit)
                    if self.ctx.shards.holds(name, ids.bucket_hint(task["taskId"]))
                ]
        found.sort(key=lambda task: -task["runningForSeconds"])
        return found[:limit]

    def _overdue_on(
        self, stores: Stores, scope: tuple[str, str] | None, now: datetime, limit: int
    ) -> list[OverdueTask]:
        found: dict[str, OverdueTask] = {}
        for row in stores.overdue.running_since(now - SHORTEST_LIMIT, limit=max(1, limit) * 50, tenant_scope=scope):
            reason = self._overdue_reason(stores, row, now)
            if reason is None or row.task_id in found:
                continue
            found[row.task_id] = {
                "taskId": row.task_id,
                "tenantId": row.tenant_id,
                "title": row.title,
                "health": row.health,
                "startedAt": iso(row.task_started_at) if row.task_started_at else None,
                "runningForSeconds": int((now - (row.task_started_at or now)).total_seconds()),
                **reason,
            }
            if len(found) >= limit:
                break
        return list(found.values())

    def _overdue_reason(self, stores: Stores, row: RunningAttempt, now: datetime) -> OverdueReason | None:
        if row.step_id is not None and row.step_started_at is not None and row.operation_code is not None:
            try:
                defs = self.ctx.definitions_for(stores, row.tenant_id, row.authority_scope)
                op = operation(defs, row.operation_code, row.task_type, row.operation_version)
            except DomainError:
                op = None
            limit = op.max_runtime_seconds if op is not None else None
            if limit is not None and now - row.step_started_at > timedelta(seconds=limit):
                return {
                    "stepId": row.step_id,
                    "operationCode": row.operation_code,
                    "limitSeconds": limit,
                    "reason": "STEP_OVER_MAX_RUNTIME",
                }
        if row.task_started_at is not None and now - row.task_started_at > self.default_max_runtime:
            return {"limitSeconds": int(self.default_max_runtime.total_seconds()), "reason": "TASK_OVER_DEFAULT"}
        return None
