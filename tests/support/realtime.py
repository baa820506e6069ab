"""A centrifuge-python client that records what it receives, for awaiting in tests."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import jwt
from centrifuge import (
    Client,
    ClientEventHandler,
    ConnectedContext,
    DisconnectedContext,
    ServerPublicationContext,
    ServerSubscribedContext,
)

from status.infra.tokens import RealtimeTokens

# What deploy/centrifugo/config.json makes Centrifugo require (the service's RealtimeTokens defaults).
AUDIENCE, ISSUER = RealtimeTokens.AUDIENCE, RealtimeTokens.ISSUER


def connection_token(secret: str, sub: str, channels: list[str], ttl: int = 300) -> str:
    claims: dict[str, Any] = {"sub": sub, "exp": int(time.time()) + ttl, "aud": AUDIENCE, "iss": ISSUER}
    if channels:
        claims["channels"] = channels
    return jwt.encode(claims, secret, algorithm="HS256")


@dataclass
class Recorder(ClientEventHandler):
    """Collects server-side subscription events; callbacks never block."""

    publications: asyncio.Queue[tuple[str, int, Any]] = field(default_factory=asyncio.Queue)
    subscribed: asyncio.Queue[ServerSubscribedContext] = field(default_factory=asyncio.Queue)
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    disconnects: asyncio.Queue[DisconnectedContext] = field(default_factory=asyncio.Queue)

    async def on_connected(self, ctx: ConnectedContext) -> None:
        self.connected.set()

    async def on_disconnected(self, ctx: DisconnectedContext) -> None:
        self.connected.clear()
        self.disconnects.put_nowait(ctx)

    async def on_subscribed(self, ctx: ServerSubscribedContext) -> None:
        self.subscribed.put_nowait(ctx)

    async def on_publication(self, ctx: ServerPublicationContext) -> None:
        self.publications.put_nowait((ctx.channel, ctx.pub.offset, ctx.pub.data))

    async def next_publication(self, timeout: float = 10) -> tuple[str, int, Any]:
        return await asyncio.wait_for(self.publications.get(), timeout)

    async def next_disconnect(self, timeout: float = 10) -> DisconnectedContext:
        return await asyncio.wait_for(self.disconnects.get(), timeout)

    async def next_subscribed(self, timeout: float = 10) -> ServerSubscribedContext:
        return await asyncio.wait_for(self.subscribed.get(), timeout)


def recording_client(ws_url: str, token: str) -> tuple[Client, Recorder]:
    recorder = Recorder()
    return Client(ws_url, events=recorder, token=token, max_reconnect_delay=1.0), recorder
