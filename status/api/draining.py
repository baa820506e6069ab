"""While a replica drains, every response says ``Connection: close``.

A load balancer keeps idle connections to each replica and reuses them.  When a drained replica
finally stops, the idle ones it closes can race a request the balancer is just sending on one of
them — a POST that reached the replica and got no answer, which the balancer may not repeat
(nginx answers 502).  Closing each connection after its response during the drain window leaves
the balancer no idle connection to that replica by the time it stops: new requests come on new
connections, and once the replica stops accepting those are refused before anything was sent,
which the balancer passes to another replica.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from status.app.readiness import ReadinessMonitor


class CloseWhileDraining:
    def __init__(self, app: ASGIApp, readiness: ReadinessMonitor) -> None:
        self.app = app
        self.readiness = readiness

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def closing(message: Message) -> None:
            if message["type"] == "http.response.start" and self.readiness.state.draining:
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, closing)
