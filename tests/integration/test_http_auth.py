"""Credentials at the edge: JWKS user tokens, per-producer rate limits (SPEC §3, AC26)."""

from __future__ import annotations

import json
import threading
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


@pytest.fixture
def jwks() -> Iterator[tuple[str, rsa.RSAPrivateKey]]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    body = json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
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
