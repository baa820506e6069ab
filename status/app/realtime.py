"""Realtime credentials (design D3, D7; design D3.1): Centrifugo connection and subscription tokens.

A connection token names the user's own summary channel and the shared
channels of the projects and roles their login names (subscribed server-side
by Centrifugo; tasks granted to a group reach its members there).  Detail and workflow channels need a subscription
token, issued only after an ACL check and within a per-session limit that the
server keeps (``realtime_grant``), so a browser can neither pick another
user's channel nor hold unbounded detail subscriptions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from status.app.ports import RealtimeTokens, UnitOfWork
from status.app.service import StatusService
from status.domain.auth import UserPrincipal
from status.domain.errors import Conflict, ErrorCode, Forbidden, Invalid, NotFound
from status.domain.ids import is_principal_id
from status.domain.projections import (
    SYSTEM_CHANNEL,
    detail_channel,
    iso,
    project_channel,
    shared_channel,
    tenant_channel,
    user_channel,
    workflow_channel,
)

# The shared channels a connection subscribes to (its user's projects, then roles, each sorted): a
# login naming more groups gets the tasks shared with the rest from snapshots (its list and the
# client's periodic check), not live.
MAX_SHARED_CHANNELS = 32


def shared_channels(user: UserPrincipal) -> list[str]:
    """The shared channels (tasks granted to a PROJECT or ROLE) of the groups the user's login names."""
    groups = [("PROJECT", p) for p in sorted(user.project_ids)] + [("ROLE", r) for r in sorted(user.role_ids)]
    # An id no grant can name (grants check it) has no channel: its characters could read as another's.
    groups = [(kind, pid) for kind, pid in groups if is_principal_id(pid)]
    return [shared_channel(user.tenant_id, kind, pid) for kind, pid in groups[:MAX_SHARED_CHANNELS]]


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
        """A connection JWT for the user's summary channel and their groups' shared channels, plus where to connect."""
        channel = user_channel(user.tenant_id, user.user_id)
        shared = shared_channels(user)
        token, exp = self.tokens.connection(user, [channel, *shared])
        return {
            "token": token,
            "expiresAt": exp,
            "user": user.subject,
            "channels": {"summary": channel, "shared": shared},
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
        """A subscription JWT for one detail/workflow channel after an ACL check (design P25, P26)."""
        if (task_id is None) == (workflow_id is None):
            raise Invalid("send exactly one of taskId, workflowId, projectId or broadcast")
        if task_id is not None:
            if not self.status.queries.visible(user, [task_id]):
                raise NotFound("task not found", ErrorCode.NOT_FOUND)
            channel = detail_channel(user.tenant_id, task_id)
        if workflow_id is not None:
            self.status.get_workflow(user, workflow_id, with_tasks=False)  # raises NOT_FOUND when not visible
            workflow = self.status.queries.workflow(workflow_id)
            if workflow is None or workflow.owner_id != user.user_id:
                # The channel carries the aggregate over all of the workflow's tasks; others
                # read a summary trimmed to the tasks they see (GET /api/workflows/{id}).
                raise Forbidden("only the workflow's owner may follow its channel", ErrorCode.PERMISSION_DENIED)
            channel = workflow_channel(user.tenant_id, workflow_id)
        now = self.status.now()
        expires = now + self.ttl

        def work(uow: UnitOfWork) -> None:
            # Serialize this session's grants on a row that always exists (see the store).
            uow.grants.guard(session_id, user, expires, now)
            uow.grants.drop_expired(session_id, now)
            held = uow.grants.held(session_id)
            if channel not in held and len(held) >= self.detail_limit:
                raise Conflict(
                    f"this session already holds {len(held)} detail subscriptions (limit {self.detail_limit}); "
                    "release one first",
                    ErrorCode.DETAIL_SUBSCRIPTION_LIMIT,
                )
            uow.grants.hold(session_id, channel, user, expires, now)
            uow.commit()

        self.status.db.run(work)  # a lock wait or deadlock is retried
        if task_id is not None:
            # After the grant committed, before the token leaves: the task's detail is published
            # from now on, starting with its current state (status/app/watching.py).
            self.status.watching.watch([task_id], expires)
        token, exp = self.tokens.subscription(user, channel)
        return {"channel": channel, "token": token, "expiresAt": exp, "grantExpiresAt": iso(expires)}

    # ------------------------------------------------------------ native SSE (design D9)
    def stream_channels(self, user: UserPrincipal) -> tuple[str, str, list[str]]:
        """The connection token for an SSE session, its summary channel, and every channel the token
        follows (that one and their groups' shared channels)."""
        summary = user_channel(user.tenant_id, user.user_id)
        followed = [summary, *shared_channels(user)]
        token, _ = self.tokens.connection(user, followed)
        return token, summary, followed

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
        visible = self.status.queries.visible(user, wanted)
        channels = {detail_channel(user.tenant_id, task_id) for task_id in visible}

        def replace_set(uow: UnitOfWork) -> set[str]:
            held = uow.grants.held(session)
            uow.grants.release(session)
            uow.grants.insert(session, channels, user, expires, now)
            uow.commit()
            return held

        held = self.status.db.run(replace_set)
        self.status.watching.watch(visible, expires)  # as for a subscription token
        return {
            "watching": visible,
            "notFound": [task_id for task_id in wanted if task_id not in visible],
            "subscribe": sorted(channels - held),
            "unsubscribe": sorted(held - channels),
            "expiresAt": iso(expires),
        }

    def expired_watches(self, user: UserPrincipal, client_id: str) -> list[str]:
        """The detail channels of an SSE session whose watch has expired; their entries go."""
        session = f"sse:{user.subject}:{client_id}"
        now = self.status.now()

        def work(uow: UnitOfWork) -> list[str]:
            expired = uow.grants.drop_expired(session, now)
            uow.commit()
            return expired

        return self.status.db.run(work)

    def end_stream(self, user: UserPrincipal, client_id: str) -> None:
        def work(uow: UnitOfWork) -> None:
            uow.grants.release(f"sse:{user.subject}:{client_id}")
            uow.commit()

        self.status.db.run(work)

    def release(self, session_id: str, channel: str) -> dict[str, Any]:
        """Give back a detail subscription slot (the client unsubscribed)."""

        def work(uow: UnitOfWork) -> int:
            released = uow.grants.release(session_id, channel)
            uow.commit()
            return released

        return {"channel": channel, "released": bool(self.status.db.run(work))}
