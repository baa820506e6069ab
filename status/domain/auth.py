"""Principals and credential claims (design D3): plain data, no crypto here."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import NamedTuple


class Role(StrEnum):
    COORDINATOR = "COORDINATOR"
    WORKER = "WORKER"
    HEALTH = "HEALTH"
    # Temporal's verdict (the observer's run follower): ends a task when the Temporal run that owns
    # it has closed, with the run's outcome; it can neither report steps nor grant anything.
    RECONCILER = "RECONCILER"
    ADMIN = "ADMIN"


@dataclass(frozen=True)
class ServicePrincipal:
    """A service identity; tenant and authority scope come only from here, never from bodies."""

    producer_id: str
    tenant_id: str
    authority_scope: str
    roles: frozenset[Role]

    def has(self, role: Role) -> bool:
        return role in self.roles or Role.ADMIN in self.roles


@dataclass(frozen=True)
class UserPrincipal:
    tenant_id: str
    user_id: str
    project_ids: frozenset[str] = frozenset()
    role_ids: frozenset[str] = frozenset()
    session_id: str | None = None

    @property
    def subject(self) -> str:
        return f"{self.tenant_id}/{self.user_id}"


class StoredHandle(NamedTuple):
    """An execution handle as the service stored it (the compact form of an execution token: the
    producer names it, the row says what it binds and whether it still may)."""

    task_id: str
    step_id: str
    step_attempt: int
    execution_id: str
    producer_id: str
    expires_at: datetime
    revoked_at: datetime | None
    revoke_reason: str | None


@dataclass(frozen=True)
class ExecutionClaims:
    """What an execution token binds (design D3)."""

    workflow_id: str
    task_id: str
    step_id: str
    step_attempt: int
    execution_id: str
    operation_code: str
    producer_id: str
    tenant_id: str
    authority_scope: str
    bucket_id: int
    expires_at: datetime
    allowed_event_types: frozenset[str] = field(default_factory=frozenset)


def renewed_expiry(expires_at: datetime, now: datetime, ttl: timedelta) -> datetime | None:
    """An execution credential's new expiry when a heartbeat has just proved its execution alive:
    ``now + ttl`` once less than half its life is left, else None (it stays as it is).

    Execution tokens and handles are short-lived (a leaked one is good for at most ``ttl``), while
    an activity may run for days: each accepted heartbeat past half-life renews it. Renewing at
    every beat would put a write on the heartbeat light path at every beat; past half-life it is
    one write per execution per ``ttl / 2``, and an execution that stops beating keeps at most
    ``ttl`` of its credential.
    """
    if expires_at <= now or expires_at - now >= ttl / 2:
        return None
    return now + ttl
