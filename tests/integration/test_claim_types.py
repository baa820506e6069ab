"""A claim of the wrong JSON type is refused with 401, never coerced into access.

``frozenset("abc")`` is three groups and ``str(5)`` is a tenant: an identity
provider that sends one group as a bare string must not widen what its user
sees. Every claim each kind of token reads is tried with the types it must not
have, on every user route (and the realtime session), on the internal API, and
on the execution token's parser.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from datetime import UTC, datetime
from typing import Any

import pytest

from status.domain.errors import Unauthenticated
from status.infra.tokens import ExecutionTokens
from status.settings import Settings
from tests.integration.conftest import Http

FAR = 4_000_000_000
# Values of every JSON type but the right one; a list and a dict stand for the ways Python iterates.
NOT_A_STRING: list[Any] = [5, 1.5, True, ["acme"], {"acme": 1}]
NOT_A_STRING_LIST: list[Any] = ["abc", {"a": 1}, 5, 1.5, True, ["a", 5], [["a"]], [{"a": 1}], [None]]
NOT_A_NUMBER: list[Any] = [str(FAR), True, [FAR], {"t": FAR}]


def sign(claims: dict[str, Any], secret: str) -> str:
    """HS256 by hand: PyJWT's encoder refuses some of these claims (a non-string ``iss``) itself."""

    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = part(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()) + "." + part(json.dumps(claims).encode())
    return head + "." + part(hmac.new(secret.encode(), head.encode(), hashlib.sha256).digest())


def user_claims(tenant: str) -> dict[str, Any]:
    return {"typ": "usr", "sub": "alice", "tnt": tenant, "projects": ["p1"], "roles": ["r1"], "sid": "s1", "exp": FAR}


USER_CASES = (
    [("projects", v) for v in NOT_A_STRING_LIST]
    + [("roles", v) for v in NOT_A_STRING_LIST]
    + [("sub", v) for v in [*NOT_A_STRING, None, ""]]
    + [("tnt", v) for v in [*NOT_A_STRING, ""]]
    + [("sid", v) for v in NOT_A_STRING]
    + [("iss", v) for v in NOT_A_STRING]
    + [("aud", v) for v in [5, True, {"a": 1}, "someone-else"]]
    + [("typ", v) for v in [5, ["usr"], "svc"]]
    + [("exp", v) for v in NOT_A_NUMBER]
    + [("iat", v) for v in NOT_A_NUMBER]
    + [("nbf", v) for v in NOT_A_NUMBER]
)


def _user_requests(http: Http, token: str, *, stream: bool = True) -> dict[str, Any]:
    headers = http.auth(token)
    responses = {
        "my tasks": http.client.get("/api/me/tasks", headers=headers),
        "realtime session": http.client.get("/api/realtime/session", headers=headers),
        "batchGet": http.client.post("/api/tasks/status:batchGet", headers=headers, json={"taskIds": ["tsk_x"]}),
        "subscription token": http.client.post(
            "/api/realtime/subscription-token", headers=headers, json={"taskId": "tsk_x"}
        ),
    }
    if stream:  # with a good token it would stay open
        responses["task stream"] = http.client.get("/api/v1/me/task-stream", params={"access_token": token})
    return responses


def test_a_well_typed_user_token_is_accepted_everywhere(http: Http, settings: Settings) -> None:
    """The control: the same routes take the base claims, so each refusal below is its claim's."""
    token = sign(user_claims(http.tenant), settings.user_token_secret)
    for route, response in _user_requests(http, token, stream=False).items():
        assert response.status_code in (200, 404), (route, response.status_code, response.text)
    session = http.client.get("/api/realtime/session", headers=http.auth(token)).json()
    assert session["channels"]["shared"] == [
        f"task_shared:{http.tenant}/project.p1",
        f"task_shared:{http.tenant}/role.r1",
    ]


@pytest.mark.parametrize(("claim", "value"), USER_CASES, ids=[f"{c}={v!r}" for c, v in USER_CASES])
def test_a_user_claim_of_the_wrong_type_is_401_on_every_route(
    http: Http, settings: Settings, claim: str, value: Any
) -> None:
    claims = user_claims(http.tenant) | {claim: value}
    if value is None:
        del claims[claim]
    token = sign(claims, settings.user_token_secret)
    for route, response in _user_requests(http, token).items():
        assert response.status_code == 401, (route, response.status_code, response.text)
        assert response.json()["error"]["code"] == "UNAUTHENTICATED", route


def test_absent_or_null_groups_are_no_groups(http: Http, settings: Settings) -> None:
    for groups in ({"projects": None, "roles": None}, {}):
        claims = {k: v for k, v in user_claims(http.tenant).items() if k not in ("projects", "roles")} | groups
        token = sign(claims, settings.user_token_secret)
        session = http.client.get("/api/realtime/session", headers=http.auth(token))
        assert session.status_code == 200, session.text
        assert session.json()["channels"]["shared"] == []


def service_claims(tenant: str) -> dict[str, Any]:
    return {"typ": "svc", "sub": "coordinator-1", "tnt": tenant, "scp": "content", "roles": ["COORDINATOR"]} | {
        "jti": "j1"
    }


SERVICE_CASES = (
    [("roles", v) for v in [*NOT_A_STRING_LIST, {"COORDINATOR": 1}, "COORDINATOR", ["NOT_A_ROLE"]]]
    + [("sub", v) for v in [*NOT_A_STRING, None]]
    + [("tnt", v) for v in [*NOT_A_STRING, None]]
    + [("scp", v) for v in [*NOT_A_STRING, None]]
    + [("jti", v) for v in [*NOT_A_STRING, None]]
    + [("exp", v) for v in NOT_A_NUMBER]
)


@pytest.mark.parametrize(("claim", "value"), SERVICE_CASES, ids=[f"{c}={v!r}" for c, v in SERVICE_CASES])
def test_a_service_claim_of_the_wrong_type_is_401(http: Http, settings: Settings, claim: str, value: Any) -> None:
    claims = service_claims(http.tenant) | {claim: value}
    if value is None:
        del claims[claim]
    token = sign(claims, settings.service_token_secret)
    body = {"clientWorkflowKey": f"wf-{secrets.token_hex(4)}", "ownerId": "user-1", "title": "A batch"}
    response = http.client.post("/internal/v1/workflows", headers=http.auth(token), json=body)
    assert response.status_code == 401, response.text
    assert response.json()["error"]["code"] == "UNAUTHENTICATED"
    good = sign(service_claims(http.tenant), settings.service_token_secret)
    control = http.client.post("/internal/v1/workflows", headers=http.auth(good), json=body)
    assert control.status_code == 201, control.text  # created now: the refused call created nothing


def execution_claims() -> dict[str, Any]:
    return {
        "typ": "exe",
        "wf": "wf-1",
        "tsk": "tsk_v1_0001_x",
        "stp": "01_parse",
        "att": 1,
        "exe": "exe_1",
        "op": "parse",
        "prd": "document-parser",
        "tnt": "acme",
        "scp": "content",
        "bkt": 1,
        "evt": ["STEP_PROGRESS"],
        "exp": FAR,
    }


EXECUTION_CASES = (
    [(c, v) for c in ("wf", "tsk", "stp", "exe", "op", "prd", "tnt", "scp") for v in [*NOT_A_STRING, None]]
    + [(c, v) for c in ("att", "bkt") for v in ["1", 1.0, True, [1], None]]
    + [("evt", v) for v in NOT_A_STRING_LIST]
    + [("exp", v) for v in [*NOT_A_NUMBER, None]]
)


@pytest.mark.parametrize(("claim", "value"), EXECUTION_CASES, ids=[f"{c}={v!r}" for c, v in EXECUTION_CASES])
def test_an_execution_claim_of_the_wrong_type_is_refused(claim: str, value: Any) -> None:
    secret = secrets.token_hex(32)
    tokens = ExecutionTokens(secret)
    now = datetime.now(UTC).replace(tzinfo=None)
    assert tokens.verify(sign(execution_claims(), secret), now).step_attempt == 1
    claims = execution_claims() | {claim: value}
    if value is None:
        del claims[claim]
    with pytest.raises(Unauthenticated):
        tokens.verify(sign(claims, secret), now)
