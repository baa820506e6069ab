"""The gate as HTTP handlers use it: credentials, bodies and query numbers read from a Starlette request."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from status.api.gate import Gate, M, is_ascii_digits, parse_body, parse_json
from status.app.service import EventCaller
from status.domain.auth import ServicePrincipal, UserPrincipal
from status.domain.errors import Invalid, TooLarge, Unauthenticated


class HttpGate(Gate):
    async def raw_body(self, request: Request) -> bytes:
        """The body, read no further than the limit (a declared length past it is refused unread)."""
        declared = request.headers.get("content-length")
        if declared is not None and not is_ascii_digits(declared):
            raise TooLarge(f"the request body is larger than {self.settings.max_body_bytes} bytes")
        if declared is not None:
            self.check_body_size(int(declared))
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            self.check_body_size(size)
            chunks.append(chunk)
        return b"".join(chunks)

    async def body(self, request: Request) -> Any:
        return parse_json(await self.raw_body(request))

    async def parse(self, request: Request, model: type[M], *, empty: bool = False) -> M:
        """The body as ``model`` (``empty``: no body at all means ``{}``); see ``parse_body``."""
        raw = await self.raw_body(request)
        if empty and raw.strip() in (b"", b"null"):
            raw = b"{}"
        return parse_body(raw, model)

    @staticmethod
    def bearer(request: Request) -> str:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("a Bearer credential is required")
        return token.strip()

    def service_principal(self, request: Request) -> ServicePrincipal:
        return self.service_principal_of(self.bearer(request))

    def event_caller(self, request: Request) -> EventCaller:
        return self.event_caller_of(self.bearer(request))

    def user(self, request: Request) -> UserPrincipal:
        return self.user_of(self.bearer(request))


def int_param(request: Request, name: str, default: int, *, low: int = 0, high: int = 10**18 - 1) -> int:
    """A whole-number query parameter, parsed the same way everywhere: ASCII digits only, at most
    18 of them (``int()`` is never handed thousands of digits), from ``low`` to ``high``."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    # ``?limit=`` is a malformed number like ``?limit=x``, not an absent one.
    if not is_ascii_digits(raw) or len(raw) > 18 or not low <= int(raw) <= high:
        raise Invalid(f"{name} must be a whole number from {low} to {high}")
    return int(raw)
