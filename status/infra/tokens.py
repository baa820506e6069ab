"""Signed credentials (SPEC §3) with PyJWT (HS256; JWKS for user tokens when configured).

Each kind of token has its own secret and a ``typ`` claim, so a token of one
kind is never accepted as another.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

import jwt
import sqlalchemy as sa

from status.domain.auth import ExecutionClaims, Role, ServicePrincipal, UserPrincipal
from status.domain.errors import ErrorCode, Forbidden, Unauthenticated
from status.domain.ids import is_principal_id
from status.infra import tables as t

ALGORITHM = "HS256"
T = TypeVar("T")


def token_type(token: str) -> str | None:
    """The unverified ``typ`` claim: which verifier to try (never a credential by itself)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError, TypeError):
        return None
    typ = claims.get("typ") if isinstance(claims, dict) else None
    return typ if isinstance(typ, str) else None


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
        try:
            if not is_principal_id(claims["tnt"]):
                raise ValueError("the tenant id has characters channel names cannot carry")
            principal = ServicePrincipal(
                producer_id=str(claims["sub"]),
                tenant_id=str(claims["tnt"]),
                authority_scope=str(claims["scp"]),
                roles=frozenset(Role(r) for r in claims.get("roles", [])),
            )
            expires = int(claims["exp"]) if "exp" in claims else None
        except (KeyError, ValueError, TypeError) as exc:
            raise Unauthenticated("the credential is missing required claims") from exc
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
        try:
            expires_at = datetime.fromtimestamp(int(claims["exp"]), UTC).replace(tzinfo=None)
            parsed = ExecutionClaims(
                workflow_id=str(claims["wf"]),
                task_id=str(claims["tsk"]),
                step_id=str(claims["stp"]),
                step_attempt=int(claims["att"]),
                execution_id=str(claims["exe"]),
                operation_code=str(claims["op"]),
                producer_id=str(claims["prd"]),
                tenant_id=str(claims["tnt"]),
                authority_scope=str(claims["scp"]),
                bucket_id=int(claims["bkt"]),
                expires_at=expires_at,
                allowed_event_types=frozenset(str(e) for e in claims.get("evt", [])),
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise Unauthenticated("the execution token is missing required claims") from exc
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
        tenant = claims.get("tnt") or claims.get("tenant_id")
        if not tenant or not isinstance(claims.get("sub"), str):
            raise Unauthenticated("the user token names no tenant or user")
        if not is_principal_id(str(tenant)) or not is_principal_id(claims["sub"]):
            # Both become parts of channel names: "a/b" must never read as tenant a, user b.
            raise Unauthenticated("the user token's tenant or user id has characters channel names cannot carry")
        return UserPrincipal(
            tenant_id=str(tenant),
            user_id=str(claims["sub"]),
            project_ids=frozenset(str(p) for p in claims.get("projects", []) or []),
            role_ids=frozenset(str(r) for r in claims.get("roles", []) or []),
            session_id=str(claims["sid"]) if claims.get("sid") else None,
        )


class RealtimeTokens:
    """Centrifugo connection and subscription JWTs (SPEC §3, seed §7)."""

    def __init__(self, secret: str, ttl_seconds: int) -> None:
        self._secret = secret
        self._ttl = ttl_seconds

    def connection(self, user: UserPrincipal, channels: list[str]) -> tuple[str, int]:
        exp = int(time.time()) + self._ttl
        return jwt.encode({"sub": user.subject, "channels": channels, "exp": exp}, self._secret, ALGORITHM), exp

    def subscription(self, user: UserPrincipal, channel: str) -> tuple[str, int]:
        exp = int(time.time()) + self._ttl
        return jwt.encode({"sub": user.subject, "channel": channel, "exp": exp}, self._secret, ALGORITHM), exp
