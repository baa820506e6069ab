"""Realtime credentials (SPEC §3, §7; seed §7): Centrifugo connection and subscription tokens.

A connection token names only the user's own summary channel (subscribed
server-side by Centrifugo).  Detail and workflow channels need a subscription
token, issued only after an ACL check and within a per-session limit that the
server keeps (``realtime_grant``), so a browser can neither pick another
user's channel nor hold unbounded detail subscriptions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from status.app.service import StatusService
from status.domain.auth import UserPrincipal
from status.domain.errors import Conflict, ErrorCode, Forbidden, Invalid, NotFound
from status.domain.projections import (
    SYSTEM_CHANNEL,
    detail_channel,
    iso,
    project_channel,
    tenant_channel,
    user_channel,
    workflow_channel,
)
from status.infra import tables as t
from status.infra.tokens import RealtimeTokens
from status.infra.uow import UnitOfWork, run_in_transaction

# The row that serializes one login session's grants (no channel is named so).
SESSION_GUARD = ""


@dataclass(frozen=True)
class RealtimeEndpoints:
    websocket: str
    http_stream: str
    sse: str
    uni_sse: str

    @classmethod
    def from_websocket_url(cls, url: str) -> RealtimeEndpoints:
        base = url.removesuffix("/connection/websocket")
        http_base = base.replace("wss://", "https://").replace("ws://", "http://")
        return cls(
            websocket=url,
            http_stream=f"{http_base}/connection/http_stream",
            sse=f"{http_base}/connection/sse",
            uni_sse=f"{http_base}/connection/uni_sse",
        )


class RealtimeService:
    def __init__(
        self,
        status: StatusService,
        tokens: RealtimeTokens,
        endpoints: RealtimeEndpoints,
        detail_limit: int,
        token_ttl_seconds: int,
    ) -> None:
        self.status = status
        self.tokens = tokens
        self.endpoints = endpoints
        self.detail_limit = detail_limit
        self.ttl = timedelta(seconds=token_ttl_seconds)

    def session(self, user: UserPrincipal) -> dict[str, Any]:
        """A connection JWT for the user's summary channel only, plus where to connect."""
        channel = user_channel(user.tenant_id, user.user_id)
        token, exp = self.tokens.connection(user, [channel])
        return {
            "token": token,
            "expiresAt": exp,
            "user": user.subject,
            "channels": {"summary": channel},
            "endpoints": {
                "websocket": self.endpoints.websocket,
                "httpStream": self.endpoints.http_stream,
                "sse": self.endpoints.sse,
                "uniSse": self.endpoints.uni_sse,
            },
            "detailSubscriptionLimit": self.detail_limit,
        }

    def broadcast_token(self, user: UserPrincipal, *, scope: str | None, project_id: str | None) -> dict[str, Any]:
        """Tokens for the broadcast channels the user belongs to (not counted against the detail limit)."""
        if project_id is not None:
            if project_id not in user.project_ids:
                raise NotFound("project not found", ErrorCode.NOT_FOUND)
            channel = project_channel(user.tenant_id, project_id)
        elif scope == "tenant":
            channel = tenant_channel(user.tenant_id)
        else:
            channel = SYSTEM_CHANNEL
        token, exp = self.tokens.subscription(user, channel)
        return {"channel": channel, "token": token, "expiresAt": exp}

    def subscription_token(
        self, user: UserPrincipal, session_id: str, *, task_id: str | None, workflow_id: str | None
    ) -> dict[str, Any]:
        """A subscription JWT for one detail/workflow channel after an ACL check (AC25, AC26)."""
        if (task_id is None) == (workflow_id is None):
            raise Invalid("send exactly one of taskId, workflowId, projectId or broadcast")
        with self.status.engine.connect() as conn:
            if task_id is not None:
                if not self.status.can_see_task(conn, user, task_id):
                    raise NotFound("task not found", ErrorCode.NOT_FOUND)
                channel = detail_channel(user.tenant_id, task_id)
        if workflow_id is not None:
            self.status.get_workflow(user, workflow_id, with_tasks=False)  # raises NOT_FOUND when not visible
            with self.status.engine.connect() as conn:
                owner = conn.scalar(sa.select(t.workflow.c.owner_id).where(t.workflow.c.id == workflow_id))
            if owner != user.user_id:
                # The channel carries the aggregate over all of the workflow's tasks; others
                # read a summary trimmed to the tasks they see (GET /api/workflows/{id}).
                raise Forbidden("only the workflow's owner may follow its channel", ErrorCode.PERMISSION_DENIED)
            channel = workflow_channel(user.tenant_id, workflow_id)
        now = self.status.now()
        expires = now + self.ttl

        def work(conn: sa.Connection) -> None:
            g = t.realtime_grant
            # Serialize this session's grants on a row that always exists: FOR UPDATE over the
            # session's grants locks nothing while it has none, so concurrent first grants all
            # saw zero held and together passed the limit. An upsert takes the guard row's
            # exclusive lock at once (INSERT IGNORE then FOR UPDATE would upgrade a shared lock
            # and deadlock two waiting grants).
            guard = {
                "session_id": session_id,
                "channel": SESSION_GUARD,
                "tenant_id": user.tenant_id,
                "user_id": user.user_id,
                "expires_at": expires,
                "created_at": now,
            }
            if conn.dialect.name == "mysql":
                conn.execute(mysql_insert(g).values(guard).on_duplicate_key_update(expires_at=expires))
            else:
                conn.execute(
                    sqlite_insert(g)
                    .values(guard)
                    .on_conflict_do_update(index_elements=[g.c.session_id, g.c.channel], set_={"expires_at": expires})
                )
            conn.execute(
                sa.delete(g).where(g.c.session_id == session_id, g.c.expires_at <= now, g.c.channel != SESSION_GUARD)
            )
            held = set(
                conn.scalars(
                    sa.select(g.c.channel).where(g.c.session_id == session_id, g.c.channel != SESSION_GUARD)
                )
            )
            if channel not in held and len(held) >= self.detail_limit:
                raise Conflict(
                    f"this session already holds {len(held)} detail subscriptions (limit {self.detail_limit}); "
                    "release one first",
                    ErrorCode.DETAIL_SUBSCRIPTION_LIMIT,
                )
            if channel in held:
                conn.execute(
                    sa.update(g).where(g.c.session_id == session_id, g.c.channel == channel).values(expires_at=expires)
                )
            else:
                conn.execute(
                    sa.insert(g).values(
                        session_id=session_id,
                        channel=channel,
                        tenant_id=user.tenant_id,
                        user_id=user.user_id,
                        expires_at=expires,
                        created_at=now,
                    )
                )

        def unit(uow: UnitOfWork) -> None:
            work(uow.conn)
            uow.commit()

        run_in_transaction(self.status.engine, unit)  # a lock wait or deadlock is retried
        token, exp = self.tokens.subscription(user, channel)
        return {"channel": channel, "token": token, "expiresAt": exp, "grantExpiresAt": iso(expires)}

    # ------------------------------------------------------------ native SSE (seed §6.7.2)
    def stream_channels(self, user: UserPrincipal) -> tuple[str, str]:
        """The connection token for an SSE session: the user's summary channel only."""
        token, _ = self.tokens.connection(user, [user_channel(user.tenant_id, user.user_id)])
        return token, user_channel(user.tenant_id, user.user_id)

    def watch_set(self, user: UserPrincipal, client_id: str, task_ids: list[str]) -> dict[str, Any]:
        """Replace the detail channels of one SSE session: bounded, ACL-checked per task, expiring.

        Returns the channels to subscribe and unsubscribe; the HTTP adapter applies
        them through Centrifugo's server-side subscribe API for that client only.
        """
        wanted = list(dict.fromkeys(task_ids))
        if len(wanted) > self.detail_limit:
            raise Conflict(f"at most {self.detail_limit} tasks per watch set", ErrorCode.DETAIL_SUBSCRIPTION_LIMIT)
        session = f"sse:{user.subject}:{client_id}"
        now = self.status.now()
        expires = now + self.ttl
        g = t.realtime_grant
        with self.status.engine.connect() as conn:
            visible = [task_id for task_id in wanted if self.status.can_see_task(conn, user, task_id)]
        channels = {detail_channel(user.tenant_id, task_id) for task_id in visible}
        with self.status.engine.begin() as conn:
            held = set(conn.scalars(sa.select(g.c.channel).where(g.c.session_id == session)))
            conn.execute(sa.delete(g).where(g.c.session_id == session))
            if channels:
                conn.execute(
                    sa.insert(g),
                    [
                        {
                            "session_id": session,
                            "channel": ch,
                            "tenant_id": user.tenant_id,
                            "user_id": user.user_id,
                            "expires_at": expires,
                            "created_at": now,
                        }
                        for ch in sorted(channels)
                    ],
                )
        return {
            "watching": visible,
            "notFound": [task_id for task_id in wanted if task_id not in visible],
            "subscribe": sorted(channels - held),
            "unsubscribe": sorted(held - channels),
            "expiresAt": iso(expires),
        }

    def expired_watches(self, user: UserPrincipal, client_id: str) -> list[str]:
        """The detail channels of an SSE session whose watch has expired; their entries go."""
        g = t.realtime_grant
        session = f"sse:{user.subject}:{client_id}"
        now = self.status.now()
        with self.status.engine.begin() as conn:
            expired = list(
                conn.scalars(sa.select(g.c.channel).where(g.c.session_id == session, g.c.expires_at <= now))
            )
            if expired:
                conn.execute(sa.delete(g).where(g.c.session_id == session, g.c.channel.in_(expired)))
        return expired

    def end_stream(self, user: UserPrincipal, client_id: str) -> None:
        g = t.realtime_grant
        with self.status.engine.begin() as conn:
            conn.execute(sa.delete(g).where(g.c.session_id == f"sse:{user.subject}:{client_id}"))

    def release(self, session_id: str, channel: str) -> dict[str, Any]:
        """Give back a detail subscription slot (the client unsubscribed)."""
        g = t.realtime_grant
        with self.status.engine.begin() as conn:
            released = conn.execute(sa.delete(g).where(g.c.session_id == session_id, g.c.channel == channel)).rowcount
        return {"channel": channel, "released": bool(released)}
