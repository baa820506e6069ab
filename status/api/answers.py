"""Every HTTP answer counted by its status class: the API's availability objective (docs/slo.md)
is the share of answers that are not 5xx."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from status.api import metrics

# One child per class, resolved once: a label lookup per request would cost more than the count.
_CLASSES = {digit: metrics.HTTP_RESPONSES.labels(**{"class": f"{digit}xx"}) for digit in range(1, 6)}


class CountAnswers:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        started = False

        async def counted(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                counter = _CLASSES.get(message["status"] // 100)
                if counter is not None:
                    counter.inc()
            await send(message)

        try:
            await self.app(scope, receive, counted)
        except Exception:
            # Answered outside this middleware, by the error handler: a 500 (or a transient
            # failure's 503) — a 5xx either way.
            if not started:
                _CLASSES[5].inc()
            raise
