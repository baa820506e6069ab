"""The composition root: every process's parts, built once from settings.

The API (HTTP and gRPC), the CLI, the observer, the dev stack, benchmarks and
tests all get their parts here: the engine, the database the application
runs its units of work on (with the after-commit notifiers injected), the
application service, credentials, realtime tokens, the Centrifugo publisher
and the outbox consumers' wake-up signal.  Nothing else wires implementations
to the application's ports.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import cached_property

import sqlalchemy as sa

from status.app.group_commit import GroupCommitter
from status.app.readiness import ReadinessMonitor
from status.app.realtime import RealtimeEndpoints, RealtimeService
from status.app.service import StatusService
from status.app.shard_ports import Shards
from status.app.workflow_fold import WorkflowFold
from status.domain.clock import utcnow
from status.domain.readiness import ReadinessPolicy
from status.infra.centrifugo import CentrifugoApi
from status.infra.db import create_engine
from status.infra.schemas import JsonSchemaValidator
from status.infra.shards import ShardedDatabases
from status.infra.tokens import ExecutionTokens, RealtimeTokens, RevokedCredentials, ServiceTokens, UserTokens
from status.infra.uow import SqlDatabase
from status.infra.wakeup import OutboxSignal
from status.settings import Settings


class Components:
    """One process's parts over one database (``engine``: reuse an engine the caller already has)."""

    def __init__(
        self, settings: Settings, engine: sa.Engine | None = None, *, clock: Callable[[], datetime] = utcnow
    ) -> None:
        self.settings = settings
        self.engine = (
            engine
            if engine is not None
            else create_engine(settings.database_url, statement_timeout=settings.db_statement_timeout_seconds)
        )
        self.clock = clock
        # After COMMIT of a transaction that wrote outbox or feed rows: wake the consumers
        # (in this process directly, other processes' relays by datagram).
        self.signal = OutboxSignal(self.engine, settings.wakeup_host)
        self.database = SqlDatabase(self.engine, [self.signal.committed])
        # Each shard's engine, database and wake-up signal, DATABASE_URL's (the home shard) first.
        self.shard_engines: dict[str, sa.Engine] = {settings.shard_name: self.engine}
        self.shard_signals: dict[str, OutboxSignal] = {settings.shard_name: self.signal}
        self.shard_databases: dict[str, SqlDatabase] = {settings.shard_name: self.database}
        for name, url in settings.shards.items():
            engine = create_engine(url, statement_timeout=settings.db_statement_timeout_seconds)
            self.shard_engines[name] = engine
            self.shard_signals[name] = OutboxSignal(engine, settings.wakeup_host)
            self.shard_databases[name] = SqlDatabase(engine, [self.shard_signals[name].committed])

    @cached_property
    def shards(self) -> Shards | None:
        """The bucket map over the shards (None: a single database). A sharded process without a
        usable map in the control store does not start: it cannot know where anything is."""
        if not self.settings.sharded:
            return None
        return ShardedDatabases(self.engine, self.shard_databases, self.settings.shard_name)

    @cached_property
    def service(self) -> StatusService:
        s = self.settings
        return StatusService(
            self.database,
            execution_tokens=ExecutionTokens(s.execution_token_secret),
            validator=JsonSchemaValidator(),
            execution_token_ttl_seconds=s.execution_token_ttl_seconds,
            max_data_bytes=s.max_data_bytes,
            overdue_after_seconds=s.overdue_after_seconds,
            max_event_age_seconds=s.max_event_age_seconds,
            max_clock_skew_seconds=s.max_clock_skew_seconds,
            clock=self.clock,
            shards=self.shards,
        )

    @cached_property
    def service_tokens(self) -> ServiceTokens:
        return ServiceTokens(self.settings.service_token_secret, RevokedCredentials(self.engine))

    @cached_property
    def user_tokens(self) -> UserTokens:
        s = self.settings
        return UserTokens(s.user_token_secret, s.user_jwks_url, s.user_jwks_audience, s.user_jwks_issuer)

    @cached_property
    def realtime(self) -> RealtimeService:
        s = self.settings
        return RealtimeService(
            self.service,
            RealtimeTokens(
                s.centrifugo_token_secret,
                s.realtime_token_ttl_seconds,
                s.realtime_token_audience,
                s.realtime_token_issuer,
            ),
            RealtimeEndpoints.from_websocket_url(s.centrifugo_public_url),
            s.detail_subscription_limit,
            s.realtime_token_ttl_seconds,
        )

    def group_committer(self) -> GroupCommitter:
        """A new committer over the service's event groups (one per event loop: groups never span loops)."""
        return GroupCommitter(
            self.service.report_group,
            max_group=self.settings.group_commit_max_events,
            max_in_flight=self.settings.group_commit_in_flight,
        )

    @cached_property
    def publisher(self) -> CentrifugoApi:
        return CentrifugoApi(self.settings.centrifugo_api_url, self.settings.centrifugo_api_key)

    @cached_property
    def readiness(self) -> ReadinessMonitor:
        s = self.settings
        policy = ReadinessPolicy(s.readiness_fail_after, s.readiness_recover_after, s.readiness_interval_ms / 1000)
        return ReadinessMonitor(policy, self.database.ping)

    def workflow_fold(self, shard: str | None = None) -> WorkflowFold:
        """The workflow fold over one shard's changes (None: the home database's)."""
        return WorkflowFold(self.shard_databases[shard or self.settings.shard_name], self.clock)


def build(settings: Settings, engine: sa.Engine | None = None) -> Components:
    return Components(settings, engine)


def build_service(settings: Settings, engine: sa.Engine | None = None) -> StatusService:
    """Just the application service (commands that need nothing else)."""
    return Components(settings, engine).service
