"""A page on another origin: the API answers CORS, preflight included, for the
configured origins only; with none configured (the default) nothing changes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from status.api.app import create_app
from status.app.service import StatusService
from status.settings import Settings, SettingsError
from tests.integration.conftest import Http

APP = "http://app.example:5173"


@pytest.fixture
def cross_origin(settings: Settings, engine: sa.Engine, service: StatusService, http: Http) -> Iterator[Http]:
    allowed = replace(settings, cors_allowed_origins=(APP,))
    with TestClient(create_app(allowed, engine, service), raise_server_exceptions=False) as client:
        yield Http(client, http.tenant, http.service_tokens, http.user_tokens)


def _preflight(http: Http, origin: str, method: str = "GET") -> object:
    return http.client.options(
        "/api/me/tasks",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )


def test_a_configured_origin_gets_its_preflight_and_its_answers(cross_origin: Http) -> None:
    preflight = _preflight(cross_origin, APP)
    assert preflight.status_code == 200  # type: ignore[attr-defined]
    headers = preflight.headers  # type: ignore[attr-defined]
    assert headers["access-control-allow-origin"] == APP
    assert "authorization" in headers["access-control-allow-headers"].lower()
    assert "POST" in headers["access-control-allow-methods"]
    assert "access-control-allow-credentials" not in headers  # bearer headers, never cookies
    listed = cross_origin.client.get("/api/me/tasks", headers={**cross_origin.user("user-1"), "Origin": APP})
    assert listed.status_code == 200 and listed.headers["access-control-allow-origin"] == APP
    # An error answer carries the header too, so the page can read the stable code.
    refused = cross_origin.client.get("/api/me/tasks", headers={"Origin": APP})
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == APP
    assert refused.json()["error"]["code"] == "UNAUTHENTICATED"


@pytest.mark.parametrize(
    ("origin", "method", "headers"),
    [
        ("http://evil.example", "GET", "authorization"),
        ("null", "GET", "authorization"),
        (APP, "TRACE", "authorization"),
        (APP, "PATCH", "authorization"),
        (APP, "GET", "x-evil"),
        (APP, "GET", "cookie"),
    ],
)
def test_a_refused_preflight_is_the_contracts_error_object(
    cross_origin: Http, origin: str, method: str, headers: str
) -> None:
    preflight = cross_origin.client.options(
        "/api/me/tasks",
        headers={"Origin": origin, "Access-Control-Request-Method": method, "Access-Control-Request-Headers": headers},
    )
    assert preflight.status_code == 403, preflight.text
    assert preflight.headers["content-type"].startswith("application/json")
    error = preflight.json()["error"]
    assert error["code"] == "PERMISSION_DENIED" and error["retryable"] is False and error["message"]
    if origin != APP:
        assert "access-control-allow-origin" not in preflight.headers


def test_another_origin_is_not_let_in(cross_origin: Http) -> None:
    preflight = _preflight(cross_origin, "http://evil.example")
    assert preflight.status_code == 403  # type: ignore[attr-defined]
    assert "access-control-allow-origin" not in preflight.headers  # type: ignore[attr-defined]
    listed = cross_origin.client.get(
        "/api/me/tasks", headers={**cross_origin.user("user-1"), "Origin": "http://evil.example"}
    )
    assert "access-control-allow-origin" not in listed.headers  # the browser keeps the answer from the page


def test_with_no_origin_configured_nothing_is_cross_origin(http: Http) -> None:
    preflight = _preflight(http, APP)
    assert preflight.status_code == 405  # type: ignore[attr-defined]
    assert "access-control-allow-origin" not in preflight.headers  # type: ignore[attr-defined]


def test_origins_are_checked_when_the_settings_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASK_OBSERVER_CORS_ALLOWED_ORIGINS", f"{APP}, https://app.example/")
    assert Settings.from_env().cors_allowed_origins == (APP, "https://app.example")
    for bad in ("*", "app.example", "https://app.example/path", "ftp://app.example"):
        monkeypatch.setenv("TASK_OBSERVER_CORS_ALLOWED_ORIGINS", bad)
        with pytest.raises(SettingsError):
            Settings.from_env()
