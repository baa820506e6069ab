"""What operators reach, and what the internet does not: the observer's /metrics
listens where OBSERVER_METRICS_HOST says, and the shipped nginx locations keep /metrics, /readyz
and /healthz off the public side while passing the API through."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import httpx
import pytest

from observer.runner import serve_metrics
from tests.support.balancer import Nginx
from tests.support.processes import free_port
from tests.support.settings import make_settings


def test_the_observers_metrics_listen_on_the_configured_address(tmp_path: Path) -> None:
    port = free_port()
    # 127.0.0.2 is loopback too on Linux, but another address: only it may answer.
    settings = make_settings("sqlite://", tmp_path, observer_metrics_port=port, observer_metrics_host="127.0.0.2")
    server = serve_metrics(settings)
    assert server is not None
    try:
        scraped = httpx.get(f"http://127.0.0.2:{port}/metrics", timeout=5)
        assert scraped.status_code == 200 and "relay_published_total" in scraped.text
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
    finally:
        server.shutdown()
        server.server_close()
    assert serve_metrics(make_settings("sqlite://", tmp_path, observer_metrics_port=0)) is None


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:  # the stdlib's name
        self.seen.append(self.path)
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[tuple[int, list[str]]]:
    _Recorder.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], _Recorder.seen
    finally:
        server.shutdown()
        server.server_close()


def test_nginx_keeps_metrics_readiness_and_health_off_the_public_side(
    tmp_path: Path, upstream: tuple[int, list[str]]
) -> None:
    port, seen = upstream
    nginx = Nginx(tmp_path, [port], [port]).start()
    try:
        for path in ("/metrics", "/readyz", "/healthz"):
            assert httpx.get(f"{nginx.url}{path}", timeout=5).status_code == 404, path
        assert httpx.get(f"{nginx.url}/api/me/tasks", timeout=5).status_code == 200
        assert httpx.get(f"{nginx.url}/readyz/x", timeout=5).status_code == 200  # exact paths only
    finally:
        nginx.stop()
    assert seen == ["/api/me/tasks", "/readyz/x"]  # the blocked paths never reached a replica
