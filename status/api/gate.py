"""The transport-neutral gate of the status API: credentials, rate limits and parsing.

HTTP handlers and the gRPC adapter both pass through it, so a credential, a limit or a
malformed body gets the same answer (and the same stable code) on either transport.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from status.api.limits import RateLimiter
from status.app.service import EventCaller, StatusService
from status.domain.auth import ServicePrincipal, UserPrincipal
from status.domain.errors import Invalid, TooLarge, Unauthenticated
from status.infra.tokens import RevokedCredentials, ServiceTokens, UserTokens
from status.settings import Settings

M = TypeVar("M", bound=BaseModel)


class Gate:
    """Who is calling, whether they may call now, and what they sent — for every transport."""

    def __init__(self, settings: Settings, service: StatusService) -> None:
        self.settings = settings
        self.service = service
        self.service_tokens = ServiceTokens(settings.service_token_secret, RevokedCredentials(service.engine))
        self.user_tokens = UserTokens(
            settings.user_token_secret, settings.user_jwks_url, settings.user_jwks_audience, settings.user_jwks_issuer
        )
        self.rate_limiter = RateLimiter(settings.internal_rate_per_second, settings.internal_rate_burst)
        self.user_rate_limiter = RateLimiter(settings.public_rate_per_second, settings.public_rate_burst, "user")

    # ------------------------------------------------------------ parsing (HTTP bodies; gRPC decodes its own)
    async def body(self, request: Request) -> Any:
        limit = self.settings.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            raise TooLarge(f"the request body is larger than {limit} bytes")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise TooLarge(f"the request body is larger than {limit} bytes")
            chunks.append(chunk)
        try:
            return json.loads(b"".join(chunks) or b"null")
        except RecursionError as exc:
            raise Invalid("the request body nests too deeply") from exc
        except (ValueError, UnicodeDecodeError) as exc:
            raise Invalid("the request body is not valid JSON") from exc

    async def parse(self, request: Request, model: type[M], *, empty: bool = False) -> M:
        """The body as ``model`` (``empty``: no body at all means ``{}``); mistakes are VALIDATION_FAILED."""
        raw = await self.body(request)
        if raw is None and empty:
            raw = {}
        if not isinstance(raw, dict):
            raise Invalid("the request body must be a JSON object")
        return self.validated(model, raw)

    @staticmethod
    def validated(model: type[M], raw: dict[str, Any]) -> M:
        """``raw`` as ``model``; mistakes are VALIDATION_FAILED naming the first bad field (REST and gRPC)."""
        try:
            return model.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(body)"
            raise Invalid(f"{where}: {first['msg']}") from exc

    @staticmethod
    def bearer(request: Request) -> str:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("a Bearer credential is required")
        return token.strip()

    def service_principal(self, request: Request) -> ServicePrincipal:
        return self.service_principal_of(self.bearer(request))

    def event_caller(self, request: Request) -> EventCaller:
        return self.event_caller_of(self.bearer(request))

    def event_caller_of(self, bearer: str) -> EventCaller:
        """An execution token's claims or a service token's principal, rate-limited per producer."""
        caller = self.service.resolve_caller(bearer, self.service_tokens)
        self.rate_limiter.check(f"{caller.tenant_id}/{caller.producer_id}")
        return caller

    def service_principal_of(self, bearer: str) -> ServicePrincipal:
        principal = self.service_tokens.verify(bearer)
        self.rate_limiter.check(f"{principal.tenant_id}/{principal.producer_id}")
        return principal

    def user(self, request: Request) -> UserPrincipal:
        principal = self.user_tokens.verify(self.bearer(request))
        self.user_rate_limiter.check(principal.subject)
        return principal

