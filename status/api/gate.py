"""The transport-neutral gate of the status API: credentials, rate limits and parsing.

HTTP handlers (through ``status.api.http_gate``, which reads a Starlette request) and the gRPC
adapter both pass through it, so a credential, a limit or a malformed body gets the same answer
(and the same stable code) on either transport. Nothing here knows a transport's types.
"""

from __future__ import annotations

import json
import math
from typing import Any, TypeVar

from pydantic import ValidationError

from status.api.limits import RateLimiter
from status.api.models import Body
from status.app.service import EventCaller, StatusService
from status.domain.auth import Role, ServicePrincipal, UserPrincipal
from status.domain.errors import Forbidden, Invalid, TooLarge
from status.infra.tokens import ServiceTokens, UserTokens
from status.settings import Settings

M = TypeVar("M", bound=Body)


class Gate:
    """Who is calling, whether they may call now, and what they sent — for every transport."""

    def __init__(
        self, settings: Settings, service: StatusService, service_tokens: ServiceTokens, user_tokens: UserTokens
    ) -> None:
        self.settings = settings
        self.service = service
        self.service_tokens = service_tokens
        self.user_tokens = user_tokens
        self.rate_limiter = RateLimiter(settings.internal_rate_per_second, settings.internal_rate_burst)
        self.user_rate_limiter = RateLimiter(settings.public_rate_per_second, settings.public_rate_burst, "user")

    def event_caller_of(self, bearer: str) -> EventCaller:
        """An execution token's claims or a service token's principal, rate-limited per producer."""
        caller = self.service.resolve_caller(bearer, self.service_tokens)
        self.rate_limiter.check(f"{caller.tenant_id}/{caller.producer_id}")
        return caller

    def service_principal_of(self, bearer: str) -> ServicePrincipal:
        principal = self.service_tokens.verify(bearer)
        self.rate_limiter.check(f"{principal.tenant_id}/{principal.producer_id}")
        return principal

    def user_of(self, bearer: str) -> UserPrincipal:
        principal = self.user_tokens.verify(bearer)
        self.user_rate_limiter.check(principal.subject)
        return principal

    def check_body_size(self, size: int) -> None:
        """A body (declared or read so far) past the limit is refused before more of it is read."""
        if size > self.settings.max_body_bytes:
            raise TooLarge(f"the request body is larger than {self.settings.max_body_bytes} bytes")


def parse_json(raw: bytes) -> Any:
    """A free-form JSON body (no model): what Python's json reads, minus what storage cannot hold."""
    try:
        body = json.loads(raw or b"null", parse_constant=_no_constant)
    except RecursionError as exc:
        raise Invalid("the request body nests too deeply") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise Invalid("the request body is not valid JSON") from exc
    check_storable(body)
    return body


def parse_body(raw: bytes, model: type[M]) -> M:
    """``raw`` as ``model``; mistakes are VALIDATION_FAILED naming the first bad field.

    Parsed and validated in one pass from its bytes (pydantic's own JSON parser: no
    intermediate objects, no second walk), then only the model's free-form values are checked
    for storage (``Body.free_form``). The trap: that parser reads NaN and Infinity, which the
    models' float fields refuse but a free-form value would carry into storage — so
    ``check_storable`` still runs on those, at the depth they sit at in the body. Lone
    surrogates it refuses itself, as it refuses nesting past its own limit."""
    try:
        parsed = model.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["type"] == "json_invalid":
            raise Invalid("the request body is not valid JSON") from exc
        if not first["loc"] and first["type"] in ("model_type", "model_attributes_type", "dict_type"):
            raise Invalid("the request body must be a JSON object") from exc
        raise refusal(exc) from exc
    for value, depth in parsed.free_form():
        check_storable(value, depth)
    return parsed


def refusal(exc: ValidationError, at: str = "") -> Invalid:
    """A body's mistake as every transport words it: VALIDATION_FAILED naming the first bad field
    by its path in the request (``at``: the path of what was validated, when it was a part)."""
    first = exc.errors()[0]
    where = at + ".".join(str(p) for p in first["loc"])
    return Invalid(f"{where or '(body)'}: {first['msg']}")


def heartbeat_caller(caller: EventCaller) -> ServicePrincipal:
    """Heartbeats riding in an events batch are the worker's: a service token with the WORKER
    role, not an execution's. Checked before the events are applied, so a refusal is the whole
    request's (nothing committed) rather than an error after the events' commit."""
    if not isinstance(caller, ServicePrincipal) or not caller.has(Role.WORKER):
        raise Forbidden("heartbeats need a service token with the WORKER role")
    return caller


# Deeper JSON than this is refused: stored inside projections and the outbox's payloads (a few
# levels more), it must stay under MySQL/MariaDB's JSON depth limit of 32 (error 4025 otherwise).
MAX_JSON_DEPTH = 20


def is_ascii_digits(text: str) -> bool:
    """``str.isdigit()`` is true for "²" and "①", which ``int()`` refuses: only 0-9 counts here."""
    return text.isascii() and text.isdigit()


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # Python's json accepts NaN, Infinity and -Infinity


def check_storable(value: Any, depth: int = 1) -> None:
    """Refuse what JSON allows but storage cannot hold: nesting deeper than ``MAX_JSON_DEPTH``,
    numbers that are not finite (NaN, infinities), strings with lone surrogates (not UTF-8).
    ``depth``: where ``value`` sits in the request body (the body itself is at 1)."""
    stack: list[tuple[Any, int]] = [(value, depth)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            if depth > MAX_JSON_DEPTH:
                raise Invalid(f"the request body nests deeper than {MAX_JSON_DEPTH} levels")
            for key, child in item.items():
                _check_text(key)
                stack.append((child, depth + 1))
        elif isinstance(item, list):
            if depth > MAX_JSON_DEPTH:
                raise Invalid(f"the request body nests deeper than {MAX_JSON_DEPTH} levels")
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, str):
            _check_text(item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise Invalid("numbers must be finite (no NaN or Infinity)")


def _check_text(text: Any) -> None:
    if isinstance(text, str) and not text.isascii():  # isascii is O(1): the usual case costs nothing
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise Invalid("strings must be valid Unicode (a lone surrogate is not)") from exc
