"""``StatusService``: the application layer's front door, one object per process.

It owns nothing but the wiring: each capability lives in a module of its own
(workflows, executions, events, health, access, broadcasts, queries) over one
shared ``AppContext``, and every command reached through here is the same
method HTTP, batch, the reconciler and tests call (design P11).  Each state
change runs in one unit of work and writes current state, the immutable
event, the dedup result and the outbox rows before COMMIT (design D8.1, P17);
nothing is published here.  The composition root (``status.bootstrap``)
builds it from settings.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from status.app.access import AccessCommands
from status.app.beats import HeartbeatCommands
from status.app.broadcasts import BroadcastCommands
from status.app.context import AppContext, EventCaller
from status.app.corrections import CorrectionCommands
from status.app.definitions import default_document, save_definitions
from status.app.events import EventCommands
from status.app.executions import ExecutionCommands, ExecutionContext
from status.app.external_refs import ExternalRefCommands
from status.app.health import HealthCommands
from status.app.notifications import NotificationQueries
from status.app.overdue import OverdueQueries
from status.app.ports import Database, ExecutionTokens, UnitOfWork
from status.app.queries import Queries
from status.app.runs import RunCommands
from status.app.shard_ports import Shards
from status.app.shards import OneShard
from status.app.watching import DetailWatch
from status.app.workflows import WorkflowCommands
from status.domain.auth import Role, ServicePrincipal
from status.domain.clock import utcnow
from status.domain.definitions import ANY, SchemaValidator
from status.domain.errors import Forbidden

__all__ = ["EventCaller", "ExecutionContext", "StatusService"]


class StatusService:
    def __init__(
        self,
        db: Database,
        *,
        execution_tokens: ExecutionTokens,
        validator: SchemaValidator,
        execution_token_ttl_seconds: int = 3600,
        max_data_bytes: int = 16 * 1024,
        default_heartbeat_interval_seconds: int = 15,
        default_heartbeat_timeout_seconds: int = 60,
        overdue_after_seconds: int = 24 * 3600,
        max_event_age_seconds: int | None = None,
        max_clock_skew_seconds: int | None = 300,
        clock: Callable[[], datetime] = utcnow,
        shards: Shards | None = None,
    ) -> None:
        self.ctx = AppContext(
            db,
            execution_tokens,
            validator,
            shards if shards is not None else OneShard(db),
            clock=clock,
            token_ttl=timedelta(seconds=execution_token_ttl_seconds),
            max_data_bytes=max_data_bytes,
            max_event_age=timedelta(seconds=max_event_age_seconds) if max_event_age_seconds else None,
            max_clock_skew=timedelta(seconds=max_clock_skew_seconds) if max_clock_skew_seconds else None,
            heartbeat_interval_seconds=default_heartbeat_interval_seconds,
            heartbeat_timeout_seconds=default_heartbeat_timeout_seconds,
        )
        self.db = db
        self.definitions = self.ctx.definitions
        self._tokens = execution_tokens
        self._validator = validator
        self.workflows = WorkflowCommands(self.ctx)
        self.events = EventCommands(self.ctx)
        self.executions = ExecutionCommands(self.ctx, self.events)
        self.health = HealthCommands(self.ctx, self.events)
        self.beats = HeartbeatCommands(self.ctx, self.events)
        self.access = AccessCommands(self.ctx)
        self.watching = DetailWatch(self.ctx)
        self.broadcasts = BroadcastCommands(self.ctx)
        self.queries = Queries(self.ctx)
        self.external_refs = ExternalRefCommands(self.ctx, self.queries)
        self.corrections = CorrectionCommands(self.ctx)
        self.notifications = NotificationQueries(self.ctx)
        self.runs = RunCommands(self.ctx, self.events)
        self.overdue = OverdueQueries(self.ctx, timedelta(seconds=overdue_after_seconds)).overdue
        # The commands, by capability.
        self.create_workflow = self.workflows.create_workflow
        self.add_task = self.workflows.add_task
        self.classify = self.workflows.classify
        self.set_temporal_owner = self.runs.set_owner
        self.activate_step = self.executions.activate_step
        self.register_execution = self.executions.register_execution
        self.bind_executions = self.executions.bind_many
        self.report_event = self.events.report_event
        self.report_events = self.events.report_events
        self.report_group = self.events.report_group
        self.record_heartbeats = self.beats.record_heartbeats
        self.mark_stale = self.health.mark_stale
        self.watch_completions = self.health.watch_completions
        self.heartbeat_census = self.health.heartbeat_census
        self.heartbeat_freshness = self.health.heartbeat_freshness
        self.grant_access = self.access.grant_access
        self.revoke_access = self.access.revoke_access
        self.broadcast = self.broadcasts.broadcast
        self.correct = self.corrections.correct
        self.corrections_of = self.corrections.corrections_of
        self.attach_external_refs = self.external_refs.attach
        self.lookup_external_ref = self.external_refs.lookup
        self.task_by_external_ref = self.external_refs.task_for_user
        # The reads.
        self.can_see_task = self.queries.can_see_task
        self.get_task = self.queries.get_task
        self.task_events = self.queries.task_events
        self.batch_get = self.queries.batch_get
        self.my_tasks = self.queries.my_tasks
        self.get_workflow = self.queries.get_workflow
        self.workflow_summaries = self.queries.workflow_summaries
        self.snapshot = self.queries.snapshot
        self.my_notifications = self.notifications.list_for
        self.mark_notifications_read = self.notifications.mark_read

    def cached_task_type(self, task_id: str, version: int) -> str | None:
        """The task's type if this process holds the task at ``version`` in memory (for log lines:
        never a database read)."""
        view = self.ctx.steps.get(task_id, version)
        return view.task.task_type if view is not None else None

    def now(self) -> datetime:
        return self.ctx.now()

    def install_default_definitions(self) -> dict[str, int]:
        """Idempotently store the shipped defaults (tenant/scope "*")."""
        return self.put_definitions(None, default_document())

    def put_definitions(self, caller: ServicePrincipal | None, document: dict[str, Any]) -> dict[str, int]:
        """Store versioned definitions for the caller's tenant/scope (None: the global defaults)."""
        if caller is not None and not caller.has(Role.ADMIN):
            raise Forbidden("defining operations needs the ADMIN role")
        tenant, scope = (caller.tenant_id, caller.authority_scope) if caller else (ANY, ANY)

        def work(uow: UnitOfWork) -> dict[str, int]:
            result = save_definitions(uow, self._validator, document, tenant, scope)
            uow.commit()
            return result

        # Every shard holds the definitions its transactions decide by (small, read often, frozen
        # once written: a retry of a document that reached some shards only completes it).
        result, *_ = [database.run(work) for _, database in self.ctx.shards.every()]
        self.definitions.invalidate()
        return result

    def resolve_caller(self, bearer: str, service_tokens: Any) -> EventCaller:
        """An execution token or a service token (both verified by signature)."""
        if self._tokens.is_execution_token(bearer):
            return self._tokens.verify(bearer, self.now())
        principal: ServicePrincipal = service_tokens.verify(bearer)
        return principal
