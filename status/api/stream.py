"""Native SSE (design D7): the user's summary stream over Centrifugo's uni-directional SSE, resumed
from ``Last-Event-ID`` (``stream_positions``), and the bounded, ACL-checked watch set of details
that a stream's session follows (applied with Centrifugo's server-side subscribe API)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from status import logs
from status.api import stream_positions
from status.api.http_gate import HttpGate
from status.api.models import WatchSetIn
from status.api.responses import JSONResponse
from status.app.realtime import RealtimeService
from status.domain.auth import UserPrincipal
from status.domain.errors import Unauthenticated
from status.settings import Settings

log = logs.get("status.api.stream")


class StreamEndpoints:
    def __init__(self, gate: HttpGate, realtime: RealtimeService, settings: Settings) -> None:
        self.gate = gate
        self.realtime = realtime
        self.settings = settings

    def routes(self) -> list[Route]:
        return [
            Route("/api/v1/me/task-stream", self.task_stream, methods=["GET"]),
            Route("/api/v1/me/task-watch-set", self.task_watch_set, methods=["PUT"]),
        ]

    def stream_user(self, request: Request) -> UserPrincipal:
        """EventSource can't send headers: the (short-lived) user token may come as ``access_token``."""
        if "authorization" in request.headers:
            return self.gate.user(request)
        token = request.query_params.get("access_token")
        if not token:
            raise Unauthenticated("a Bearer credential or access_token is required")
        principal = self.gate.user_tokens.verify(token)
        self.gate.user_rate_limiter.check(principal.subject)  # the same limit as with the header
        return principal

    async def task_stream(self, request: Request) -> Response:  # noqa: C901
        """``text/event-stream`` of the user's summaries (and watched details), over Centrifugo's uni-SSE."""
        user = self.stream_user(request)
        token, channel, followed = self.realtime.stream_channels(user)
        upstream_url = self.settings.centrifugo_api_url.removesuffix("/api") + "/connection/uni_sse"
        limit = self.settings.detail_subscription_limit
        # EventSource sends the last event's id back when it reconnects; a client that reconnects
        # by hand may pass it as lastEventId. It names where the stream stood in each channel.
        resume = request.headers.get("last-event-id") or request.query_params.get("lastEventId")
        positions = stream_positions.decode(resume, followed)
        connect: dict[str, Any] = {"token": token}
        if positions:
            connect["subs"] = stream_positions.recovery_request(positions)

        async def events() -> AsyncIterator[str]:  # noqa: C901
            client_id = None
            expiry: asyncio.Task[None] | None = None
            at = dict(positions)  # where the stream stands in each followed channel
            try:
                async with (
                    httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=None)) as http,
                    http.stream("POST", upstream_url, json=connect) as upstream,
                ):
                    if upstream.status_code != 200:
                        yield _sse("error", {"code": "UNAVAILABLE", "message": "realtime delivery is unavailable"})
                        return
                    async for line in upstream.aiter_lines():
                        if not line.startswith("data: "):
                            continue
                        message = json.loads(line[6:])
                        if "connect" in message:
                            client_id = message["connect"]["client"]
                            expiry = asyncio.create_task(self._end_expired_watches(user, client_id))
                            subs = message["connect"].get("subs") or {}
                            lost = [c for c in positions if not subs.get(c, {}).get("recovered")]
                            yield _sse(
                                "session",
                                {
                                    "sessionId": client_id,
                                    "summaryChannel": channel,
                                    "watchLimit": limit,
                                    # Resumed: everything since Last-Event-ID follows; channels in
                                    # `resync` could not be (history too short, a new epoch): load
                                    # their snapshot (GET /api/me/tasks) as at a first connection.
                                    "resumed": bool(positions) and not lost,
                                    "resync": lost,
                                },
                            )
                            for name, sub in subs.items():
                                if name in positions and name not in lost:
                                    at[name] = (str(sub.get("epoch") or positions[name][0]), at[name][1])
                                else:
                                    at[name] = (str(sub.get("epoch") or ""), int(sub.get("offset") or 0))
                                for pub in sub.get("publications") or ():
                                    at[name] = (at[name][0], int(pub.get("offset", at[name][1])))
                                    yield _sse("message", pub["data"], event_id=stream_positions.encode(at))
                        elif "pub" in message:
                            pub, name = message["pub"], message.get("channel")
                            event_id = None
                            if name in at:  # a followed channel: its position moves (a watched detail's does not)
                                at[name] = (str(pub.get("epoch") or at[name][0]), int(pub.get("offset", at[name][1])))
                                event_id = stream_positions.encode(at)
                            yield _sse("message", pub["data"], event_id=event_id)
                        elif "unsubscribe" in message:
                            yield _sse("unwatched", {"channel": message.get("channel")})
                        else:
                            yield ": ping\n\n"
            except httpx.HTTPError:
                yield _sse("error", {"code": "UNAVAILABLE", "message": "realtime delivery was interrupted"})
            finally:
                if expiry is not None:
                    expiry.cancel()
                if client_id is not None:
                    await run_in_threadpool(self.realtime.end_stream, user, client_id)

        return StreamingResponse(
            events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )

    async def _end_expired_watches(self, user: UserPrincipal, client_id: str) -> None:
        """While an SSE stream is open: a watch that expired (not renewed by a new watch set) ends
        its live detail subscription, as a subscription token's expiry ends a WebSocket client's."""
        interval = max(1.0, min(15.0, self.settings.realtime_token_ttl_seconds / 4))
        while True:
            await asyncio.sleep(interval)
            try:
                expired = await run_in_threadpool(self.realtime.expired_watches, user, client_id)
                if expired:
                    await self._server_command("unsubscribe", user, client_id, expired)
            except Exception:  # the next round tries again; the stream itself goes on
                log.warning("could not end expired watches", code="watch-expiry")

    async def _server_command(self, method: str, user: UserPrincipal, client_id: str, channels: list[str]) -> None:
        async with httpx.AsyncClient(
            base_url=self.settings.centrifugo_api_url,
            headers={"X-API-Key": self.settings.centrifugo_api_key},
            timeout=5.0,
        ) as http:
            for channel_name in channels:
                # Bound to this user's own client: another user's session id matches nothing.
                await http.post(f"/{method}", json={"user": user.subject, "channel": channel_name, "client": client_id})

    async def task_watch_set(self, request: Request) -> JSONResponse:
        """Replace the detail streams of one SSE session (bounded, ACL per task, session-bound, expiring)."""
        user = self.gate.user(request)
        body = await self.gate.parse(request, WatchSetIn)
        result = await run_in_threadpool(self.realtime.watch_set, user, body.sessionId, body.taskIds)
        await self._server_command("subscribe", user, body.sessionId, result.pop("subscribe"))
        await self._server_command("unsubscribe", user, body.sessionId, result.pop("unsubscribe"))
        return JSONResponse(result)


def _sse(event: str, data: Any, event_id: str | None = None) -> str:
    head = f"event: {event}\n" + (f"id: {event_id}\n" if event_id else "")
    return head + f"data: {json.dumps(data, separators=(',', ':'))}\n\n"
