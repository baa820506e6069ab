"""HTTP adapter of users' durable notifications: the unread list and marking read."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.routing import Route

from status.api.http_gate import HttpGate, int_param
from status.api.models import MarkReadIn
from status.api.responses import JSONResponse
from status.domain.errors import Invalid


class NotificationEndpoints:
    def __init__(self, gate: HttpGate) -> None:
        self.gate = gate
        self.service = gate.service

    async def list_notifications(self, request: Request) -> JSONResponse:
        user = self.gate.user(request)
        unread = request.query_params.get("unread", "false").lower()
        if unread not in ("true", "false"):
            raise Invalid("unread must be true or false")
        cursor = request.query_params.get("cursor") or None
        if cursor is not None and len(cursor) > 512:
            raise Invalid("cursor is not valid")
        limit = int_param(request, "limit", 50, high=9999)
        result = await run_in_threadpool(
            lambda: self.service.my_notifications(user, unread_only=unread == "true", cursor=cursor, limit=limit)
        )
        return JSONResponse(result)

    async def mark_read(self, request: Request) -> JSONResponse:
        user = self.gate.user(request)
        body = await self.gate.parse(request, MarkReadIn)
        ids = None if body.all else body.ids
        return JSONResponse(await run_in_threadpool(self.service.mark_notifications_read, user, ids))

    def routes(self) -> list[Route]:
        return [
            Route("/api/me/notifications", self.list_notifications, methods=["GET"]),
            Route("/api/me/notifications:read", self.mark_read, methods=["POST"]),
        ]
