"""What every capability of the application layer shares: the database, the clock,
credentials, limits and caches, plus the small checks they all apply.

One ``AppContext`` is built by the composition root (``status.bootstrap``) and
handed to each capability (workflows, executions, events, health, access,
broadcasts, queries), so they agree on time, definitions and cached state.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from status.app.definitions import DefinitionCache, Definitions
from status.app.durations import DurationHistory
from status.app.handle_cache import HandleCache
from status.app.ports import Database, ExecutionTokens, Stores
from status.app.shard_ports import Shards
from status.app.step_cache import StepCache
from status.domain.admission import TEMPORAL_VERDICT
from status.domain.auth import ExecutionClaims, Role, ServicePrincipal
from status.domain.clock import now_ms, utcnow
from status.domain.definitions import OperationDefinition, SchemaValidator
from status.domain.errors import ErrorCode, Forbidden, Invalid, NotFound
from status.domain.model import TaskState

# Temporal's verdict (the RECONCILER role): what ended a task or an attempt from Temporal's record.
RUN_PRODUCER = TEMPORAL_VERDICT
MAX_TITLE = 255

# Who may report an event: an execution (its token's claims) or a service (its principal).
EventCaller = ExecutionClaims | ServicePrincipal


@dataclass
class AppContext:
    db: Database
    tokens: ExecutionTokens
    validator: SchemaValidator
    # Where each bucket's tasks are (design D14.2): ``db`` alone on a single database.
    shards: Shards
    clock: Callable[[], datetime] = utcnow
    token_ttl: timedelta = timedelta(hours=1)
    max_data_bytes: int = 16 * 1024
    # Events that occurred longer ago are refused (EVENT_TOO_OLD): their dedup entries may be
    # purged (status.domain.retention). None: any age, for a service that never purges dedup.
    max_event_age: timedelta | None = None
    # How far ahead of this clock an event's occurredAt may be (producers' clocks drift).
    max_clock_skew: timedelta | None = timedelta(minutes=5)
    heartbeat_interval_seconds: int = 15
    heartbeat_timeout_seconds: int = 60
    definitions: DefinitionCache = field(default_factory=DefinitionCache)
    steps: StepCache = field(default_factory=StepCache)
    handles: HandleCache = field(default_factory=HandleCache)
    durations: DurationHistory = field(default_factory=DurationHistory)

    def now(self) -> datetime:
        return now_ms(self.clock())

    def definitions_for(self, stores: Stores, tenant_id: str, scope: str) -> Definitions:
        return self.definitions.get(stores, tenant_id, scope)


def content_hash(content: Any) -> str:
    """The fingerprint that tells a retry (same content) from a conflicting reuse of a key."""
    return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def check_title(title: str) -> None:
    if not title or len(title) > MAX_TITLE:
        raise Invalid(f"title must be 1–{MAX_TITLE} characters")


def check_heartbeat_settings(interval: int | None, timeout: int | None) -> None:
    if interval is not None and not 1 <= interval <= 3600:
        raise Invalid("heartbeatIntervalSeconds must be 1–3600")
    if timeout is not None and not 2 <= timeout <= 86400:
        raise Invalid("heartbeatTimeoutSeconds must be 2–86400")
    if interval is not None and timeout is not None and timeout < 2 * interval:
        raise Invalid("heartbeatTimeoutSeconds must cover at least two intervals")


def require(caller: ServicePrincipal, role: Role) -> None:
    if not caller.has(role):
        raise Forbidden(f"this needs the {role} role")


def require_binder(caller: ServicePrincipal, producer_id: str) -> None:
    """Binding an execution: a COORDINATOR for any producer, a WORKER only for itself.

    A worker's plugin can then report with WORKER alone: it cannot grant access,
    end tasks or broadcast, and cannot bind work in another producer's name.
    """
    if caller.has(Role.COORDINATOR):
        return
    if caller.has(Role.WORKER) and producer_id == caller.producer_id:
        return
    raise Forbidden("binding an execution needs COORDINATOR, or WORKER for the credential's own producerId")


def operation(defs: Definitions, code: str, task_type: str | None, version: int | None = None) -> OperationDefinition:
    return defs.operation(code, task_type, version)


def lock_task_for(stores: Stores, tenant_id: str, scope: str, task_id: str) -> TaskState:
    """Lock a task of the caller's tenant and scope; any other task does not exist for the caller."""
    task = stores.tasks.lock(task_id)
    if task is None or (task.tenant_id, task.authority_scope) != (tenant_id, scope):
        raise NotFound(f"task {task_id} does not exist", ErrorCode.UNKNOWN_TASK)
    return task
