"""Signed credentials (design D3) with PyJWT (HS256; JWKS for user tokens when configured).

Each kind of token has its own secret and a ``typ`` claim, so a token of one
kind is never accepted as another.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import secrets
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

import jwt
import sqlalchemy as sa
from jwt.algorithms import HMACAlgorithm

from status.domain.auth import ExecutionClaims, Role, ServicePrincipal, UserPrincipal
from status.domain.errors import ErrorCode, Forbidden, Unauthenticated
from status.domain.ids import is_principal_id
from status.infra import tables as t

ALGORITHM = "HS256"
T = TypeVar("T")


class _SecretCheckedOnce(HMACAlgorithm):
    """HS256 whose secret is checked once, not on every token signed or verified.

    PyJWT checks an HMAC secret each time it is used — that it is no PEM, SSH or DER key and no
    JSON text, parsing it as each (its guard against algorithm confusion) — and that check cost
    more than the signature: 5–10 % of the API's CPU per plugin activity, which signs an execution
    token per activation (docs/benchmarks.md, 2026-12-06, fourth session). This service's secrets are
    few and fixed: each is checked the first time, as before, and its prepared form kept; a secret
    that fails the check is refused every time.
    """

    _KEPT = 64  # secrets remembered; past that (never, in practice) each use is checked again

    def __init__(self) -> None:
        super().__init__(HMACAlgorithm.SHA256)
        self._prepared: dict[str | bytes, bytes] = {}

    def prepare_key(self, key: str | bytes) -> bytes:
        prepared = self._prepared.get(key)
        if prepared is None:
            prepared = super().prepare_key(key)
            if len(self._prepared) < self._KEPT:
                self._prepared[key] = prepared
        return prepared


jwt.unregister_algorithm(ALGORITHM)
jwt.register_algorithm(ALGORITHM, _SecretCheckedOnce())


def token_type(token: str) -> str | None:
    """The unverified ``typ`` claim: which verifier to try (never a credential by itself).

    Remembered per token: a producer sends the same credential with every request, and decoding
    its payload again each time cost as much as the rest of its check. The trap: this runs before
    any verification, so anyone can fill the memory — it holds tokens of a credential's length
    only, a bounded number of them."""
    if len(token) > _REMEMBERED_TOKEN_CHARS:
        return _read_type(token)
    return _remembered_type(token)


def _read_type(token: str) -> str | None:
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError, TypeError):
        return None
    typ = claims.get("typ") if isinstance(claims, dict) else None
    return typ if isinstance(typ, str) else None


# The credentials this service issues are a few hundred characters; 4,096 of at most 2 KiB each.
_REMEMBERED_TOKEN_CHARS = 2048
_remembered_type = functools.lru_cache(maxsize=4096)(_read_type)


class _Verified(Generic[T]):
    """Tokens that passed verification recently.

    A producer sends the same credential with every request; decoding and
    checking its signature each time was half of the HTTP layer's CPU per
    event.  Only successes are kept, for at most ``ttl`` seconds and never
    past the token's own expiry (checked by the caller on every hit).
    """

    def __init__(self, ttl: float = 60.0, size: int = 10_000) -> None:
        self._ttl = ttl
        self._size = size
        self._entries: dict[str, tuple[float, T]] = {}

    def get(self, token: str) -> T | None:
        entry = self._entries.get(token)
        if entry is None or entry[0] < time.monotonic():
            return None
        return entry[1]

    def put(self, token: str, value: T) -> None:
        if len(self._entries) >= self._size:
            self._entries.clear()  # bounded memory; the next requests verify again
        self._entries[token] = (time.monotonic() + self._ttl, value)


def _decode(token: str, secret: str, typ: str, *, check_exp: bool = True) -> dict[str, Any]:
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            secret,
            algorithms=[ALGORITHM],
            options={"verify_exp": check_exp, "require": ["typ"]},
        )
    except jwt.ExpiredSignatureError as exc:
        raise Unauthenticated("the credential has expired") from exc
    except jwt.PyJWTError as exc:
        raise Unauthenticated("the credential is not valid") from exc
    if claims.get("typ") != typ:
        raise Unauthenticated("the credential is not valid for this API")
    return claims


class _Claims:
    """A verified token's claims, read by type: a claim of the wrong type is refused, never coerced.

    The trap is Python's generosity: ``frozenset(claims["projects"])`` turns
    ``"abc"`` into the groups ``a``, ``b`` and ``c`` and ``{"a": 1}`` into
    ``a``, and ``str(5)`` makes a tenant of a number.  An identity provider
    that sends one group as a bare string would silently widen what its user
    sees, so every claim is checked against the one JSON type it may have.
    """

    def __init__(self, claims: dict[str, Any], kind: str) -> None:
        self._claims = claims
        self._kind = kind

    def _refuse(self, name: str, what: str) -> Unauthenticated:
        return Unauthenticated(f"the {self._kind} token's {name!r} claim must be {what}")

    def text(self, name: str) -> str:
        value = self._claims.get(name)
        if not isinstance(value, str) or not value:
            raise self._refuse(name, "a non-empty string")
        return value

    def optional_text(self, name: str) -> str | None:
        value = self._claims.get(name)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self._refuse(name, "a string")
        return value

    def texts(self, name: str) -> frozenset[str]:
        """A list of strings; absent or null is the empty set (a bare string is refused, not split)."""
        value = self._claims.get(name)
        if value is None:
            return frozenset()
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self._refuse(name, "a list of strings")
        return frozenset(value)

    def integer(self, name: str) -> int:
        value = self._claims.get(name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._refuse(name, "an integer")
        return value

    def times(self) -> int | None:
        """Checks ``exp``, ``iat`` and ``nbf`` are JSON numbers (PyJWT accepts ``"123"``); the expiry, if any."""
        for name in ("exp", "iat", "nbf"):
            value = self._claims.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise self._refuse(name, "a number (seconds since the epoch)")
        exp = self._claims.get("exp")
        return int(exp) if exp is not None else None


class _InBackground:
    """Runs ``work`` on a daemon thread, one run at a time; a call while one runs is dropped."""

    def __init__(self, work: Callable[[], None]) -> None:
        self._work = work
        self._running = threading.Lock()

    def __call__(self) -> None:
        if self._running.acquire(blocking=False):
            threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        try:
            self._work()
        finally:
            self._running.release()


class RevokedCredentials:
    """The ``jti``s of revoked service credentials, re-read at most every ``refresh_seconds``.

    A revoked credential is refused by every API process within that interval,
    cached verifications included; a database hiccup keeps the last list.
    """

    def __init__(self, engine: sa.Engine, refresh_seconds: float = 5.0) -> None:
        self._engine = engine
        self._refresh = refresh_seconds
        self._jtis: frozenset[str] = frozenset()
        self._read_at = float("-inf")
        self._reload_in_background = _InBackground(self._reload)
        self._reload()  # at start-up; afterwards in the background

    def __contains__(self, jti: object) -> bool:
        # Checked on the event loop for every request: never wait for the database here.
        if time.monotonic() - self._read_at >= self._refresh:
            self._reload_in_background()
        return jti in self._jtis

    def _reload(self) -> None:
        try:
            with self._engine.connect() as conn:
                self._jtis = frozenset(conn.scalars(sa.select(t.revoked_credential.c.jti)))
        except sa.exc.SQLAlchemyError:
            pass  # an older schema or a hiccup: keep the last list, look again at the next interval
        self._read_at = time.monotonic()

    @staticmethod
    def revoke(engine: sa.Engine, token_or_jti: str, reason: str | None = None) -> str:
        """Record a revocation (the token itself, whose signature is not checked, or its jti)."""
        jti, expires = token_or_jti, None
        if token_or_jti.count(".") == 2:
            claims = jwt.decode(token_or_jti, options={"verify_signature": False})
            jti = str(claims.get("jti") or "")
            expires = datetime.fromtimestamp(int(claims["exp"]), UTC).replace(tzinfo=None) if "exp" in claims else None
        if not jti:
            raise ValueError("the credential has no jti to revoke")
        now = datetime.now(UTC).replace(tzinfo=None)
        with engine.begin() as conn:
            exists = conn.scalar(sa.select(t.revoked_credential.c.jti).where(t.revoked_credential.c.jti == jti))
            if exists is None:
                conn.execute(
                    sa.insert(t.revoked_credential).values(jti=jti, revoked_at=now, expires_at=expires, reason=reason)
                )
        return jti


class ServiceTokens:
    def __init__(self, secret: str, revoked: RevokedCredentials | None = None) -> None:
        self._secret = secret
        self._revoked = revoked
        self._verified: _Verified[tuple[ServicePrincipal, int | None, str]] = _Verified()

    def issue(
        self, producer_id: str, tenant_id: str, authority_scope: str, roles: list[Role], ttl_seconds: int | None = None
    ) -> str:
        now = int(time.time())
        claims: dict[str, Any] = {
            "typ": "svc",
            "sub": producer_id,
            "tnt": tenant_id,
            "scp": authority_scope,
            "roles": sorted(r.value for r in roles),
            "iat": now,
            "jti": secrets.token_hex(8),
        }
        if ttl_seconds:
            claims["exp"] = now + ttl_seconds
        return jwt.encode(claims, self._secret, algorithm=ALGORITHM)

    def verify(self, token: str) -> ServicePrincipal:
        hit = self._verified.get(token)
        if hit is not None and (hit[1] is None or hit[1] > time.time()):
            self._check_revoked(hit[2])
            return hit[0]
        claims = _decode(token, self._secret, "svc")
        jti = claims.get("jti")
        if not isinstance(jti, str) or not jti:
            raise Unauthenticated("the credential has no jti, so it could not be revoked")
        self._check_revoked(jti)
        read = _Claims(claims, "service")
        tenant = read.text("tnt")
        if not is_principal_id(tenant):
            raise Unauthenticated("the service token's tenant id has characters channel names cannot carry")
        try:
            roles = frozenset(Role(r) for r in read.texts("roles"))
        except ValueError as exc:
            raise Unauthenticated("the service token names a role this service does not know") from exc
        principal = ServicePrincipal(
            producer_id=read.text("sub"), tenant_id=tenant, authority_scope=read.text("scp"), roles=roles
        )
        expires = read.times()
        self._verified.put(token, (principal, expires, jti))
        return principal

    def _check_revoked(self, jti: str) -> None:
        if self._revoked is not None and jti in self._revoked:
            raise Unauthenticated("the credential has been revoked")


class ExecutionTokens:
    def __init__(self, secret: str) -> None:
        self._secret = secret
        self._verified: _Verified[ExecutionClaims] = _Verified()

    def issue(self, claims: ExecutionClaims) -> str:
        return jwt.encode(
            {
                "typ": "exe",
                "wf": claims.workflow_id,
                "tsk": claims.task_id,
                "stp": claims.step_id,
                "att": claims.step_attempt,
                "exe": claims.execution_id,
                "op": claims.operation_code,
                "prd": claims.producer_id,
                "tnt": claims.tenant_id,
                "scp": claims.authority_scope,
                "bkt": claims.bucket_id,
                "evt": sorted(claims.allowed_event_types),
                "exp": int(claims.expires_at.replace(tzinfo=UTC).timestamp()),
            },
            self._secret,
            algorithm=ALGORITHM,
        )

    @staticmethod
    def is_execution_token(token: str) -> bool:
        return token_type(token) == "exe"

    def verify(self, token: str, now: datetime) -> ExecutionClaims:
        """Signature first (401), then expiry (403 TOKEN_EXPIRED: the token was ours)."""
        parsed = self._verified.get(token)
        if parsed is None:
            parsed = self._parse(token)
            self._verified.put(token, parsed)
        if parsed.expires_at <= now:
            raise Forbidden("the execution token has expired", ErrorCode.TOKEN_EXPIRED)
        return parsed

    def _parse(self, token: str) -> ExecutionClaims:
        claims = _decode(token, self._secret, "exe", check_exp=False)
        read = _Claims(claims, "execution")
        expires = read.times()
        if expires is None:
            raise Unauthenticated("the execution token has no expiry")
        parsed = ExecutionClaims(
            workflow_id=read.text("wf"),
            task_id=read.text("tsk"),
            step_id=read.text("stp"),
            step_attempt=read.integer("att"),
            execution_id=read.text("exe"),
            operation_code=read.text("op"),
            producer_id=read.text("prd"),
            tenant_id=read.text("tnt"),
            authority_scope=read.text("scp"),
            bucket_id=read.integer("bkt"),
            expires_at=datetime.fromtimestamp(expires, UTC).replace(tzinfo=None),
            allowed_event_types=read.texts("evt"),
        )
        return parsed


class JwksKeys:
    """An identity provider's signing keys, fetched at start and refreshed in the background.

    ``verify`` runs on the API's event loop for every request, so it never waits
    for the identity provider: a key id it does not know is refused, and asks for
    one background refetch (at most every ``refetch_seconds``: a flood of tokens
    with made-up key ids cannot make the API hammer the provider).
    """

    def __init__(self, url: str, refresh_seconds: float = 600.0, refetch_seconds: float = 30.0) -> None:
        self._client = jwt.PyJWKClient(url, cache_keys=False, cache_jwk_set=False)
        self._refresh = refresh_seconds
        self._refetch = refetch_seconds
        self._keys: dict[str, Any] = {}
        self._fetched_at = float("-inf")
        self._fetch_in_background = _InBackground(self._fetch)
        self._fetch()

    def key(self, kid: str | None) -> Any:
        age = time.monotonic() - self._fetched_at
        known = self._keys.get(kid or "")
        if (known is None and age >= self._refetch) or age >= self._refresh:
            self._fetch_in_background()
        if known is None:
            raise Unauthenticated("the user token's signing key is not known (yet); retry shortly")
        return known

    def _fetch(self) -> None:
        with contextlib.suppress(jwt.PyJWKClientError):  # keep the keys we have; try again later
            self._keys = {k.key_id or "": k.key for k in self._client.get_signing_keys(refresh=True)}
        self._fetched_at = time.monotonic()


class UserTokens:
    """User tokens: HMAC (dev/test, or a shared secret) or a JWKS endpoint (with audience and issuer)."""

    def __init__(
        self, secret: str, jwks_url: str | None = None, audience: str | None = None, issuer: str | None = None
    ) -> None:
        self._secret = secret
        self._jwks = JwksKeys(jwks_url) if jwks_url else None
        self._audience = audience
        self._issuer = issuer

    def issue(
        self,
        tenant_id: str,
        user_id: str,
        ttl_seconds: int = 3600,
        projects: list[str] | None = None,
        roles: list[str] | None = None,
    ) -> str:
        now = int(time.time())
        return jwt.encode(
            {
                "typ": "usr",
                "sub": user_id,
                "tnt": tenant_id,
                "projects": projects or [],
                "roles": roles or [],
                "sid": secrets.token_hex(8),
                "iat": now,
                "exp": now + ttl_seconds,
            },
            self._secret,
            algorithm=ALGORITHM,
        )

    def verify(self, token: str) -> UserPrincipal:
        try:
            if self._jwks is not None:
                key = self._jwks.key(jwt.get_unverified_header(token).get("kid"))
                required = ["exp", "sub"] + (["aud"] if self._audience else []) + (["iss"] if self._issuer else [])
                claims = jwt.decode(
                    token,
                    key,
                    algorithms=["RS256", "ES256"],
                    audience=self._audience,
                    issuer=self._issuer,
                    options={"require": required},
                )
            else:
                claims = jwt.decode(token, self._secret, algorithms=[ALGORITHM], options={"require": ["exp", "sub"]})
                if claims.get("typ") != "usr":
                    raise Unauthenticated("the credential is not a user token")
        except jwt.PyJWTError as exc:
            raise Unauthenticated("the user token is not valid") from exc
        read = _Claims(claims, "user")
        read.times()
        read.optional_text("iss")  # checked against the configured issuer in JWKS mode; typed always
        user_id = read.text("sub")
        tenant = read.text("tnt" if claims.get("tnt") is not None else "tenant_id")
        if not is_principal_id(tenant) or not is_principal_id(user_id):
            # Both become parts of channel names: "a/b" must never read as tenant a, user b.
            raise Unauthenticated("the user token's tenant or user id has characters channel names cannot carry")
        return UserPrincipal(
            tenant_id=tenant,
            user_id=user_id,
            project_ids=read.texts("projects"),
            role_ids=read.texts("roles"),
            session_id=read.optional_text("sid") or None,
        )


class RealtimeTokens:
    """Centrifugo connection and subscription JWTs (design D3.1), with an audience and an
    issuer Centrifugo checks (``client.token.audience`` / ``issuer``): a token minted for another
    purpose with the same secret is not a connection."""

    AUDIENCE = "task-status-observer:realtime"
    ISSUER = "task-status-observer"

    def __init__(self, secret: str, ttl_seconds: int, audience: str | None = None, issuer: str | None = None) -> None:
        self._secret = secret
        self._ttl = ttl_seconds
        self._audience = audience or self.AUDIENCE
        self._issuer = issuer or self.ISSUER

    def _sign(self, user: UserPrincipal, **claims: Any) -> tuple[str, int]:
        exp = int(time.time()) + self._ttl
        body = {"sub": user.subject, **claims, "aud": self._audience, "iss": self._issuer, "exp": exp}
        return jwt.encode(body, self._secret, ALGORITHM), exp

    def connection(self, user: UserPrincipal, channels: list[str]) -> tuple[str, int]:
        return self._sign(user, channels=channels)

    def subscription(self, user: UserPrincipal, channel: str) -> tuple[str, int]:
        return self._sign(user, channel=channel)
