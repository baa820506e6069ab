"""Credentials at the edge: JWKS user tokens, per-producer rate limits (design D3AC26)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, HTTPServer

import jwt
import pytest
import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric import rsa
from starlette.testclient import TestClient

from status.api.app import create_app
from status.app.service import StatusService
from status.domain.errors import Unauthenticated
from status.infra.tokens import UserTokens
from status.settings import Settings
from tests.integration.conftest import Http

JWKS_HITS: list[str] = []


@pytest.fixture
def jwks() -> Iterator[tuple[str, rsa.RSAPrivateKey]]:
    JWKS_HITS.clear()
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    body = json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            JWKS_HITS.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/jwks.json", key
    server.shutdown()
    server.server_close()


def test_user_tokens_from_an_identity_provider_jwks(jwks: tuple[str, rsa.RSAPrivateKey]) -> None:
    url, key = jwks
    tokens = UserTokens("unused-hmac-secret-0123456789abcdef0123456789", url)
    good = jwt.encode(
        {"sub": "alice", "tnt": "acme", "exp": 4_000_000_000}, key, algorithm="RS256", headers={"kid": "k1"}
    )
    user = tokens.verify(good)
    assert (user.tenant_id, user.user_id) == ("acme", "alice")
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode(
        {"sub": "alice", "tnt": "acme", "exp": 4_000_000_000}, other, algorithm="RS256", headers={"kid": "k1"}
    )
    with pytest.raises(Unauthenticated):
        tokens.verify(forged)
    hmac = jwt.encode(
        {"sub": "alice", "tnt": "acme", "exp": 4_000_000_000, "typ": "usr"},
        "unused-hmac-secret-0123456789abcdef0123456789",
        algorithm="HS256",
    )
    with pytest.raises(Unauthenticated):  # with JWKS configured, the shared secret no longer works
        tokens.verify(hmac)


def test_internal_api_is_rate_limited_per_producer(
    settings: Settings, engine: sa.Engine, service: StatusService, http: Http
) -> None:
    limited = replace(settings, internal_rate_per_second=0.001, internal_rate_burst=2)
    with TestClient(create_app(limited, engine, service), raise_server_exceptions=False) as client:
        noisy = http.auth(http.service_token("noisy", "COORDINATOR"))
        quiet = http.auth(http.service_token("quiet", "COORDINATOR"))
        codes = [
            client.post(
                "/internal/v1/workflows/wf_x/tasks", json={"clientTaskKey": "a", "title": "a"}, headers=noisy
            ).status_code
            for _ in range(3)
        ]
        assert codes == [404, 404, 429]
        limited_body = client.post("/internal/v1/workflows/wf_x/tasks", json={}, headers=noisy).json()
        assert limited_body["error"] == {
            "code": "RATE_LIMITED",
            "message": limited_body["error"]["message"],
            "retryable": True,
        }
        # Another producer has its own bucket.
        assert (
            client.post(
                "/internal/v1/workflows/wf_x/tasks", json={"clientTaskKey": "a", "title": "a"}, headers=quiet
            ).status_code
            == 404
        )


def _part(value: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def _unsigned(claims: dict[str, object]) -> str:
    """A JWT with ``alg: none`` (no signature at all)."""
    return f"{_part({'alg': 'none', 'typ': 'JWT'})}.{_part(claims)}."


def test_hostile_credentials_are_refused_everywhere(http: Http, settings: Settings) -> None:
    now = int(time.time())
    user_claims = {"sub": "user-1", "tnt": http.tenant, "typ": "usr", "exp": now + 600}
    service_claims = {"sub": "p", "tnt": http.tenant, "scp": "content", "roles": ["COORDINATOR"], "typ": "svc"}
    cases = {
        "alg none (user)": _unsigned(user_claims),
        "alg none (service)": _unsigned(service_claims),
        "expired user token": jwt.encode({**user_claims, "exp": now - 5}, settings.user_token_secret, "HS256"),
        "user token signed with another secret": jwt.encode(user_claims, "x" * 40, "HS256"),
        "service token as user token": http.service_token("p", "COORDINATOR"),
        "HS512 with the right secret": jwt.encode(user_claims, settings.user_token_secret, "HS512"),
    }
    for name, token in cases.items():
        response = http.client.get("/api/me/tasks", headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 401, (name, response.status_code)
        assert response.json()["error"]["code"] == "UNAUTHENTICATED", name
    internal = {
        "alg none (service)": _unsigned(service_claims),
        "expired service token": jwt.encode({**service_claims, "exp": now - 5}, settings.service_token_secret, "HS256"),
        "user token as service token": http.user_tokens.issue(http.tenant, "user-1"),
        "service claims under the user secret": jwt.encode(service_claims, settings.user_token_secret, "HS256"),
    }
    for name, token in internal.items():
        response = http.client.post(
            "/internal/v1/workflows",
            json={"clientWorkflowKey": "k-hostile", "ownerId": "u", "title": "t"},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert response.status_code == 401, (name, response.status_code)


def test_a_jwks_deployment_refuses_hmac_tokens_signed_with_the_public_key(
    jwks: tuple[str, rsa.RSAPrivateKey],
) -> None:
    """The classic algorithm confusion: HS256 keyed with the RSA public key's PEM."""
    from cryptography.hazmat.primitives import serialization

    url, key = jwks
    tokens = UserTokens("unused-hmac-secret-0123456789abcdef0123456789", url)
    pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    header = {"alg": "HS256", "typ": "JWT", "kid": "k1"}
    signing_input = f"{_part(header)}.{_part({'sub': 'alice', 'tnt': 'acme', 'exp': 4_000_000_000})}"
    signature = base64.urlsafe_b64encode(hmac.new(pem, signing_input.encode(), hashlib.sha256).digest()).rstrip(b"=")
    with pytest.raises(Unauthenticated):
        tokens.verify(f"{signing_input}.{signature.decode()}")


def test_a_revoked_service_credential_is_refused_within_seconds(http: Http, engine: sa.Engine) -> None:
    from status.infra.tokens import RevokedCredentials

    token = http.service_token("revocable", "COORDINATOR")
    body = {"clientWorkflowKey": f"k-{time.time_ns()}", "ownerId": "u", "title": "t"}
    assert http.client.post("/internal/v1/workflows", json=body, headers=http.auth(token)).status_code == 201
    RevokedCredentials.revoke(engine, token, "left the company")
    deadline = time.monotonic() + 20
    status = 201
    while time.monotonic() < deadline:  # every API process re-reads the list every few seconds
        status = http.client.post("/internal/v1/workflows", json=body, headers=http.auth(token)).status_code
        if status == 401:
            break
        time.sleep(0.1)
    assert status == 401
    other = http.service_token("revocable", "COORDINATOR")  # same producer, new credential: unaffected
    assert http.client.post("/internal/v1/workflows", json=body, headers=http.auth(other)).status_code == 200


def test_service_credentials_need_a_jti_and_expire_by_default(http: Http, settings: Settings) -> None:
    claims = {"sub": "p", "tnt": http.tenant, "scp": "content", "roles": ["COORDINATOR"], "typ": "svc"}
    no_jti = jwt.encode(claims, settings.service_token_secret, "HS256")
    response = http.client.post(
        "/internal/v1/workflows",
        json={"clientWorkflowKey": "k-jti", "ownerId": "u", "title": "t"},
        headers=http.auth(no_jti),
    )
    assert response.status_code == 401
    from task_observer.cli import build_parser

    args = build_parser().parse_args(
        ["service-token", "--producer", "p", "--tenant", "t", "--scope", "s", "--role", "WORKER"]
    )
    assert args.ttl == 90 * 24 * 3600


def test_the_public_api_is_rate_limited_per_user(
    settings: Settings, engine: sa.Engine, service: StatusService, http: Http
) -> None:
    limited = replace(settings, public_rate_per_second=0.001, public_rate_burst=3)
    with TestClient(create_app(limited, engine, service), raise_server_exceptions=False) as client:
        codes = [client.get("/api/me/tasks", headers=http.user("busy")).status_code for _ in range(5)]
        other = client.get("/api/me/tasks", headers=http.user("calm")).status_code
        limited_body = client.get("/api/me/tasks", headers=http.user("busy")).json()
    assert codes == [200, 200, 200, 429, 429] and other == 200
    assert limited_body["error"]["code"] == "RATE_LIMITED" and "user" in limited_body["error"]["message"]


def test_the_stream_with_an_access_token_is_rate_limited_like_the_header(
    settings: Settings, engine: sa.Engine, service: StatusService, http: Http
) -> None:
    """EventSource sends the user token as ?access_token=: the same per-user limit applies (the
    stream itself needs Centrifugo; the limit answers before it is reached)."""
    limited = replace(settings, public_rate_per_second=0.001, public_rate_burst=2)
    token = http.user("streamer")["Authorization"].removeprefix("Bearer ")
    with TestClient(create_app(limited, engine, service), raise_server_exceptions=False) as client:
        for _ in range(2):
            client.get("/api/me/tasks", headers=http.user("streamer"))
        limited_stream = client.get("/api/v1/me/task-stream", params={"access_token": token})
    assert limited_stream.status_code == 429 and limited_stream.json()["error"]["code"] == "RATE_LIMITED"


def test_jwks_tokens_must_carry_the_configured_audience_and_issuer(jwks: tuple[str, rsa.RSAPrivateKey]) -> None:
    url, key = jwks
    tokens = UserTokens("unused-hmac-secret-0123456789abcdef0123456789", url, "task-observer", "https://idp.example")
    base = {"sub": "alice", "tnt": "acme", "exp": 4_000_000_000}

    def signed(**claims: object) -> str:
        return jwt.encode({**base, **claims}, key, algorithm="RS256", headers={"kid": "k1"})

    assert tokens.verify(signed(aud="task-observer", iss="https://idp.example")).user_id == "alice"
    for wrong in (
        signed(aud="another-app", iss="https://idp.example"),  # a token the provider issued for someone else
        signed(aud="task-observer", iss="https://evil.example"),
        signed(iss="https://idp.example"),  # no audience at all
        signed(aud="task-observer"),
    ):
        with pytest.raises(Unauthenticated):
            tokens.verify(wrong)


def test_verifying_jwks_tokens_never_waits_for_the_identity_provider(jwks: tuple[str, rsa.RSAPrivateKey]) -> None:
    url, key = jwks
    tokens = UserTokens("unused-hmac-secret-0123456789abcdef0123456789", url)
    fetched_at_start = len(JWKS_HITS)
    assert fetched_at_start == 1
    good = jwt.encode({"sub": "alice", "tnt": "acme", "exp": 4_000_000_000}, key, "RS256", headers={"kid": "k1"})
    for _ in range(50):
        tokens.verify(good)
    assert len(JWKS_HITS) == fetched_at_start  # the keys came from memory
    unknown = jwt.encode({"sub": "alice", "tnt": "acme", "exp": 4_000_000_000}, key, "RS256", headers={"kid": "k9"})
    for _ in range(20):  # made-up key ids: refused at once, and no refetch within 30 s of the last fetch
        with pytest.raises(Unauthenticated):
            tokens.verify(unknown)
    assert len(JWKS_HITS) == fetched_at_start


def test_production_with_a_jwks_requires_audience_and_issuer(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    from status.settings import SettingsError

    monkeypatch.setenv("TASK_OBSERVER_ENV", "production")
    monkeypatch.setenv("TASK_OBSERVER_DATA_DIR", str(tmp_path))
    for name in (
        "CENTRIFUGO_API_KEY",
        "CENTRIFUGO_TOKEN_SECRET",
        "SERVICE_TOKEN_SECRET",
        "EXECUTION_TOKEN_SECRET",
        "USER_TOKEN_SECRET",
    ):
        monkeypatch.setenv(f"TASK_OBSERVER_{name}", name.lower() * 3)
    monkeypatch.setenv("TASK_OBSERVER_USER_JWKS_URL", "https://idp.example/jwks.json")
    with pytest.raises(SettingsError, match="AUDIENCE"):
        Settings.from_env()
    monkeypatch.setenv("TASK_OBSERVER_USER_JWKS_AUDIENCE", "task-observer")
    monkeypatch.setenv("TASK_OBSERVER_USER_JWKS_ISSUER", "https://idp.example")
    assert Settings.from_env().user_jwks_audience == "task-observer"
