"""Verified tokens are remembered for speed, never past their expiry or for another kind."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from datetime import datetime, timedelta

import jwt
import pytest

from status.domain.auth import ExecutionClaims, Role
from status.domain.errors import ErrorCode, Forbidden, Unauthenticated
from status.infra.tokens import ExecutionTokens, ServiceTokens, token_type


def _claims(expires_at: datetime) -> ExecutionClaims:
    return ExecutionClaims(
        workflow_id="wf",
        task_id="tsk",
        step_id="s",
        step_attempt=1,
        execution_id="exe",
        operation_code="OP",
        producer_id="p",
        tenant_id="t",
        authority_scope="s",
        bucket_id=0,
        expires_at=expires_at,
        allowed_event_types=frozenset({"STEP_STARTED"}),
    )


def test_a_remembered_execution_token_still_expires() -> None:
    tokens = ExecutionTokens("x" * 32)
    now = datetime(2026, 1, 1)
    token = tokens.issue(_claims(now + timedelta(minutes=5)))
    assert tokens.verify(token, now).execution_id == "exe"
    assert tokens.verify(token, now + timedelta(minutes=4)).execution_id == "exe"  # from memory
    with pytest.raises(Forbidden) as expired:
        tokens.verify(token, now + timedelta(minutes=5))
    assert expired.value.code is ErrorCode.TOKEN_EXPIRED


def test_a_remembered_service_token_still_expires() -> None:
    tokens = ServiceTokens("y" * 32)
    token = tokens.issue("p", "t", "s", [Role.WORKER], ttl_seconds=1)
    assert tokens.verify(token).producer_id == "p"
    expires = jwt.decode(token, options={"verify_signature": False})["exp"]
    time.sleep(max(0.0, expires - time.time()) + 0.05)  # the token's own expiry passes (whole seconds)
    with pytest.raises(Unauthenticated):
        tokens.verify(token)


def test_only_verified_tokens_are_remembered_and_kinds_stay_apart() -> None:
    service, execution = ServiceTokens("a" * 32), ExecutionTokens("b" * 32)
    forged = jwt.encode({"typ": "svc", "sub": "p", "tnt": "t", "scp": "s", "roles": ["ADMIN"]}, "c" * 32, "HS256")
    for _ in range(2):  # a failure is never remembered as a success
        with pytest.raises(Unauthenticated):
            service.verify(forged)
    exe = execution.issue(_claims(datetime(2030, 1, 1)))
    assert token_type(exe) == "exe" and token_type(forged) == "svc" and token_type("not.a.jwt") is None
    with pytest.raises(Unauthenticated):
        service.verify(exe)


def test_a_secret_checked_once_is_still_checked_and_still_signs_as_pyjwt_does() -> None:
    """The HS256 secret's check is remembered per secret: the token is byte for byte PyJWT's own
    (signed with the secret), a wrong secret still fails, an asymmetric key as secret is refused
    on every use, not only the first."""
    secret = "y" * 32
    claims = {"typ": "svc", "sub": "p", "n": 1}
    token = jwt.encode(claims, secret, algorithm="HS256")
    header, payload, signature = token.split(".")
    expected = hmac.new(secret.encode(), f"{header}.{payload}".encode(), hashlib.sha256).digest()
    assert signature == base64.urlsafe_b64encode(expected).rstrip(b"=").decode()
    assert jwt.decode(token, secret, algorithms=["HS256"]) == claims
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(token, "z" * 32, algorithms=["HS256"])
    pem = "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n"
    for _ in range(2):
        with pytest.raises(jwt.InvalidKeyError):
            jwt.encode(claims, pem, algorithm="HS256")


def test_a_tokens_type_is_remembered_only_for_a_credentials_length() -> None:
    """The type is read before any verification: what anyone sends may not grow the memory."""
    from status.infra import tokens

    issued = ServiceTokens("s" * 32).issue("p", "t", "s", [Role.WORKER])
    padding = base64.urlsafe_b64encode(b'{"typ": "svc", "pad": "' + b"x" * 4000 + b'"}').decode().rstrip("=")
    forged = f"e30.{padding}.sig"  # unsigned: only its claimed type is read here
    tokens._remembered_type.cache_clear()
    assert token_type(issued) == token_type(issued) == "svc"
    assert tokens._remembered_type.cache_info().hits == 1  # read once, then remembered
    assert token_type(forged) == "svc" and token_type("not.a-token") is None
    assert tokens._remembered_type.cache_info().currsize == 2  # the issued one and the short one
