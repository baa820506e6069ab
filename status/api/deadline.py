"""Every request has a deadline (design D13).

A database that stops answering must not hold requests (and the connections, threads and client
sockets behind them) for as long as it stays stuck. A request that has not begun its answer within
REQUEST_DEADLINE_SECONDS is answered ``503 UNAVAILABLE`` (retryable: every write of this API is
idempotent by its key — an eventId, a correction id, a client key — so the same request again is
safe whether or not the work behind the first one committed after all). The work itself is bounded
below by the database's statement and lock-wait timeouts (status.infra.db). An answer already
begun (a stream) is never cut.
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from status import logs
from status.api import metrics
from status.api.errors import error_body
from status.api.responses import JSONResponse

log = logs.get("status.api")

MESSAGE = "the request did not finish within its deadline; retry with the same request"


class RequestDeadline:
    def __init__(self, app: ASGIApp, seconds: float, exempt: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.seconds = seconds
        self.exempt = exempt  # long-lived streams: their answer begins at once and lasts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.seconds <= 0 or scope["path"] in self.exempt:
            await self.app(scope, receive, send)
            return
        answering = False
        # A timer on the request's own task, not a second task awaited with ``asyncio.wait``: that
        # cost every request a tenth of the HTTP layer's CPU (docs/benchmarks.md, 2026-12-07 later).
        deadline = asyncio.timeout(self.seconds)

        async def tracked(message: Message) -> None:
            nonlocal answering
            if message["type"] == "http.response.start":
                answering = True
                if not deadline.expired():
                    deadline.reschedule(None)  # its answer has begun: let it end as it will
            await send(message)

        try:
            async with deadline:
                await self.app(scope, receive, tracked)
            return
        except TimeoutError:
            if not deadline.expired():
                raise  # the request's own error, not its deadline
        if answering:  # it began answering while being cancelled: nothing more may be sent
            return
        metrics.DEADLINE_EXCEEDED.labels(transport="http").inc()
        log.warning("request deadline exceeded", method=scope.get("method"), path=scope["path"], code="UNAVAILABLE")
        response = JSONResponse(
            error_body("UNAVAILABLE", MESSAGE, True),
            status_code=503,
            headers={"Retry-After": "1"},
        )
        await response(scope, receive, send)
