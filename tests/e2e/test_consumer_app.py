"""A front-end developer's app: the packed client installed into a throwaway
Vite + React + TypeScript app outside web/, type-checked strictly and built for production, served
on another origin than the API, with the documented cross-origin settings (CORS_ALLOWED_ORIGINS,
Centrifugo's allowed_origins). In Chromium its tasks appear and update live — also when the API
was unreachable at page load and came back afterwards (start() never gives up)."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
import uvicorn
from playwright.sync_api import expect
from starlette.testclient import TestClient

from status.api.app import create_app
from status.bootstrap import build_service
from status.infra.db import create_engine
from status.infra.tokens import ServiceTokens, UserTokens
from tests.integration.conftest import Http
from tests.support.browser import chromium
from tests.support.flows import activate, create_workflow, report
from tests.support.processes import REPO_ROOT, CentrifugoNode, free_port, wait_until
from tests.support.relay_pump import RelayPump
from tests.support.settings import make_settings

pytestmark = [pytest.mark.centrifugo]

WEB = REPO_ROOT / "web"
APP_MAIN = """\
import { createElement as h, type ReactNode } from 'react';
import { createRoot } from 'react-dom/client';
import { TaskStatusClient, type ConnectionState } from '@task-status-observer/client';
import { TaskStatusProvider, useConnectionState, useMyTasks } from '@task-status-observer/client/react';

const apiBaseUrl: string = new URLSearchParams(location.search).get('api') ?? '';
const token: string = decodeURIComponent(location.hash.replace(/^#token=/, ''));
const errors: string[] = [];
const client = new TaskStatusClient({
  apiBaseUrl,
  getUserToken: () => token,
  onError: (_error: unknown, context: string) => {
    errors.push(context);
    document.body.dataset.errors = String(errors.length);
  },
});

function App(): ReactNode {
  const state: ConnectionState = useConnectionState();
  const tasks = useMyTasks('all');
  return h('main', { id: 'app', 'data-state': state },
    h('ul', {}, ...tasks.map((t) => h('li', {
      key: t.taskId, 'data-task-id': t.taskId, 'data-version': t.summaryVersion.toString(),
      'data-status': t.summary.lifecycleStatus,
    }, t.summary.title ?? t.taskId))));
}

createRoot(document.getElementById('root') as HTMLElement).render(
  h(TaskStatusProvider, { client }, h(App)),
);
client.start().catch((error: unknown) => { document.title = `login refused: ${String(error)}`; });
"""


VITE_CONFIG = """\
import { defineConfig } from 'vite';

const api = process.env.API_TARGET ?? 'http://127.0.0.1:8080';
const realtime = process.env.REALTIME_TARGET ?? 'http://127.0.0.1:8000';
const proxy = {
  '/api': api,
  '/connection': { target: realtime, ws: true },
  '/emulation': realtime,
};
export default defineConfig({ server: { proxy }, preview: { proxy } });
"""


def _npm(args: list[str], cwd: Path) -> None:
    done = subprocess.run(["npm", *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"npm {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


@pytest.fixture(scope="module")
def consumer_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tarball, packed from a copy of web/ without its node_modules (as from a fresh clone),
    installed into a new app with the same React, TypeScript and Vite versions web/ tests with."""
    work = tmp_path_factory.mktemp("consumer")
    source = work / "web"
    shutil.copytree(WEB, source, ignore=shutil.ignore_patterns("node_modules", "lib", "dist", "*.tgz"))
    _npm(["pack", "--silent", "--pack-destination", str(work)], source)
    (tarball,) = work.glob("task-status-observer-client-*.tgz")
    versions = json.loads((WEB / "package.json").read_text())["devDependencies"]
    app = work / "app"
    (app / "src").mkdir(parents=True)
    (app / "package.json").write_text(
        json.dumps(
            {
                "name": "consumer-app",
                "private": True,
                "type": "module",
                "dependencies": {
                    "@task-status-observer/client": f"file:{tarball}",
                    "react": versions["react"],
                    "react-dom": versions["react-dom"],
                },
                "devDependencies": {
                    "typescript": versions["typescript"],
                    "vite": versions["vite"],
                    "@types/react": versions["@types/react"],
                    "@types/react-dom": versions["@types/react-dom"],
                },
            }
        )
    )
    (app / "tsconfig.json").write_text(
        json.dumps(
            {
                "compilerOptions": {
                    "target": "ES2022",
                    "module": "ESNext",
                    "moduleResolution": "bundler",
                    "lib": ["ES2022", "DOM"],
                    "strict": True,
                    "noEmit": True,
                    "skipLibCheck": False,
                    "noUncheckedIndexedAccess": True,
                },
                "include": ["src"],
            }
        )
    )
    (app / "index.html").write_text(
        '<!doctype html><html><body><div id="root"></div>'
        '<script type="module" src="/src/main.ts"></script></body></html>'
    )
    (app / "src" / "main.ts").write_text(APP_MAIN)
    # The same-origin layout of docs/frontend.md: the app's own server proxies /api and /connection.
    (app / "vite.config.ts").write_text(VITE_CONFIG)
    _npm(["install", "--no-audit", "--no-fund"], app)
    _npm(["exec", "--", "tsc", "-p", "."], app)  # strict, the package's own .d.ts checked too
    _npm(["exec", "--", "vite", "build"], app)
    # One React in the app: the tarball brings none of its own.
    assert not (app / "node_modules" / "@task-status-observer" / "client" / "node_modules" / "react").exists()
    return app / "dist"


@pytest.fixture
def served_app(consumer_build: Path) -> Iterator[str]:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(consumer_build))
    handler.log_message = lambda *args: None  # type: ignore[method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Api:
    """The status API on a socket of its own (started when the test says), with a relay to Centrifugo."""

    app: Any
    engine: sa.Engine
    server: uvicorn.Server
    thread: threading.Thread
    port: int
    http: Http

    def start(self) -> None:
        self.thread.start()
        wait_until(lambda: self.server.started, 15, "the status API")


@contextlib.contextmanager
def _api(mariadb_url: str, tmp_path: Path, node: CentrifugoNode, **settings_: Any) -> Iterator[Api]:
    port = free_port()
    settings = make_settings(
        mariadb_url,
        tmp_path,
        centrifugo_api_url=node.api_url,
        centrifugo_api_key=node.api_key,
        centrifugo_token_secret=node.token_secret,
        **settings_,
    )
    engine = create_engine(settings.database_url)
    service = build_service(settings, engine)
    service.install_default_definitions()
    app = create_app(settings, engine, service)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    try:
        with TestClient(app) as client, RelayPump(engine, node.api_url, node.api_key):
            http_ = Http(
                client,
                f"tenant-{secrets.token_hex(4)}",
                ServiceTokens(settings.service_token_secret),
                UserTokens(settings.user_token_secret),
            )
            yield Api(app, engine, server, thread, port, http_)
    finally:
        server.should_exit = True
        if thread.is_alive():
            thread.join(15)
        node.stop()
        engine.dispose()


def _moves_live(api: Api, page: Any, task_id: str, user: str) -> None:
    """The task shows, the page is LIVE, and the task's next change reaches it."""
    row = page.locator(f'li[data-task-id="{task_id}"]')
    expect(row).to_be_visible(timeout=40_000)
    expect(page.locator("#app")).to_have_attribute("data-state", "LIVE", timeout=20_000)
    ctx = activate(api.http, task_id)
    assert report(api.http, ctx, "STEP_STARTED", 1).status_code == 200
    expect(row).to_have_attribute("data-status", "RUNNING", timeout=20_000)
    version = api.http.client.get(f"/api/tasks/{task_id}", headers=api.http.user(user)).json()["taskVersion"]
    expect(row).to_have_attribute("data-version", version, timeout=20_000)


def test_an_app_on_its_own_origin_shows_tasks_live_even_when_the_api_came_up_after_it(
    served_app: str, mariadb_url: str, tmp_path: Path
) -> None:
    node = CentrifugoNode(workdir=tmp_path, allowed_origins=[served_app]).start()
    with _api(
        mariadb_url, tmp_path, node, centrifugo_public_url=node.ws_url, cors_allowed_origins=(served_app,)
    ) as api:
        task_id = create_workflow(api.http, owner="dana")["tasks"][0]["taskId"]
        token = api.http.user_tokens.issue(api.http.tenant, "dana")
        with chromium() as (_, browser):
            page = browser.new_page()
            # The API is not listening yet: the page loads, start() keeps asking.
            page.goto(f"{served_app}/?api=http://127.0.0.1:{api.port}#token={token}")
            # Each failed attempt is told to onError; nothing is shown as if there were no tasks.
            expect(page.locator("body")).to_have_attribute("data-errors", re.compile(r"^[2-9]|\d\d"), timeout=20_000)
            assert page.locator("li").count() == 0
            api.start()
            # It came back: the session, the list, then live (cross-origin: CORS and allowed origins).
            _moves_live(api, page, task_id, "dana")
            page.close()


def test_the_same_app_behind_its_own_servers_proxy_needs_no_cors(
    consumer_build: Path, mariadb_url: str, tmp_path: Path
) -> None:
    """docs/frontend.md's other layout: the app's server (here `vite preview`, with the guide's
    proxy configuration) forwards /api and /connection; the API answers no CORS at all, and the
    session hands out the proxy's Centrifugo address (as --centrifugo-public-url does in dev)."""
    preview_port = free_port()
    origin = f"http://127.0.0.1:{preview_port}"
    node = CentrifugoNode(workdir=tmp_path, allowed_origins=[origin]).start()
    public_url = f"ws://127.0.0.1:{preview_port}/connection/websocket"
    with _api(mariadb_url, tmp_path, node, centrifugo_public_url=public_url) as api:
        api.start()
        preview = subprocess.Popen(
            [
                "npm",
                "exec",
                "--",
                "vite",
                "preview",
                "--host",
                "127.0.0.1",
                "--port",
                str(preview_port),
                "--strictPort",
            ],
            cwd=consumer_build.parent,
            env={
                **os.environ,
                "API_TARGET": f"http://127.0.0.1:{api.port}",
                "REALTIME_TARGET": node.api_url.removesuffix("/api"),
            },
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            wait_until(lambda: _answers(origin), 60, "vite preview")
            task_id = create_workflow(api.http, owner="erin")["tasks"][0]["taskId"]
            token = api.http.user_tokens.issue(api.http.tenant, "erin")
            cross = api.http.client.get("/api/me/tasks", headers={"Origin": origin})
            assert "access-control-allow-origin" not in cross.headers
            with chromium() as (_, browser):
                page = browser.new_page()
                page.goto(f"{origin}/#token={token}")  # no ?api=: the page's own origin
                _moves_live(api, page, task_id, "erin")
                page.close()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(preview.pid, signal.SIGTERM)
            preview.wait(15)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
