"""How the status service serves the built dashboard (and says so when it is not built)."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from status.api.app import create_app
from status.infra.db import create_engine
from tests.support.settings import make_settings


def _client(sqlite_url: str, tmp_path: Path, dashboard_dir: Path | None) -> TestClient:
    settings = make_settings(sqlite_url, tmp_path, dashboard_dir=dashboard_dir)
    return TestClient(create_app(settings, create_engine(sqlite_url)), raise_server_exceptions=False)


def test_built_dashboard_is_served_with_its_assets(sqlite_url: str, tmp_path: Path) -> None:
    site = tmp_path / "dist"
    (site / "assets").mkdir(parents=True)
    (site / "index.html").write_text("<!doctype html><title>Task Status Observer</title>")
    (site / "assets" / "app.js").write_text("console.log('x')")
    with _client(sqlite_url, tmp_path, site) as client:
        root = client.get("/", follow_redirects=False)
        assert root.status_code == 307 and root.headers["location"] == "/dashboard/"
        assert "Task Status Observer" in client.get("/dashboard/").text
        asset = client.get("/dashboard/assets/app.js")
        assert asset.status_code == 200 and "javascript" in asset.headers["content-type"]
        # The API is unaffected by the mount.
        assert client.get("/healthz").json() == {"status": "ok"}


def test_unbuilt_dashboard_answers_with_a_clear_error(sqlite_url: str, tmp_path: Path) -> None:
    with _client(sqlite_url, tmp_path, tmp_path / "missing") as client:
        response = client.get("/dashboard/")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "NOT_FOUND"
        assert "scripts/web build" in response.json()["error"]["message"]


def test_no_dashboard_when_turned_off(sqlite_url: str, tmp_path: Path) -> None:
    with _client(sqlite_url, tmp_path, None) as client:
        assert client.get("/dashboard/").status_code == 404
        assert client.get("/", follow_redirects=False).status_code == 404
