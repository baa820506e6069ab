"""Readiness and draining: a replica leaves the load
balancer only when the database is really gone, comes back with hysteresis, and on SIGTERM says it
is unready before it stops — serving what it is given meanwhile."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import sqlalchemy as sa

from status.app.readiness import ReadinessMonitor
from status.domain.readiness import ReadinessPolicy
from status.infra.uow import SqlDatabase
from status.settings import Settings
from tests.conftest import MYSQL_SERVER_URL
from tests.e2e.test_observer_process import CLI, _env
from tests.integration.conftest import Http
from tests.support.flows import create_workflow
from tests.support.processes import free_port, wait_until
from tests.support.proxy import FailoverProxy

pytestmark = pytest.mark.mariadb


@pytest.fixture
def database_path() -> Iterator[tuple[FailoverProxy, int]]:
    """MariaDB behind a TCP proxy this test can cut (new connections then fail), on a loop of its own."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    mariadb_port = sa.make_url(MYSQL_SERVER_URL).port or 3306
    proxy = asyncio.run_coroutine_threadsafe(FailoverProxy([mariadb_port]).start(), loop).result(10)
    yield proxy, mariadb_port
    asyncio.run_coroutine_threadsafe(proxy.close(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def test_one_failed_probe_is_no_reason_to_leave_and_coming_back_takes_two(
    database_path: tuple[FailoverProxy, int], e2e_settings: Settings
) -> None:
    proxy, mariadb_port = database_path
    url = sa.make_url(e2e_settings.database_url).set(host="127.0.0.1", port=proxy.port)
    # A connection per probe: what a cut network does to the pool's next connection, every time.
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool, connect_args={"connect_timeout": 2})
    monitor = ReadinessMonitor(
        ReadinessPolicy(fail_after=3, recover_after=2, interval_seconds=0), SqlDatabase(engine).ping
    )
    try:
        assert monitor.check().ready
        proxy.upstreams = [free_port()]  # the database is gone for new connections
        seen = [monitor.check() for _ in range(3)]
        assert [s.ready for s in seen] == [True, True, False]
        assert seen[-1].reason == "database unreachable (3 consecutive failed probes)"
        proxy.upstreams = [mariadb_port]
        back = [monitor.check() for _ in range(2)]
        assert [s.ready for s in back] == [False, True]
    finally:
        engine.dispose()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_replica_says_it_is_draining_on_sigterm_serves_meanwhile_then_exits(
    api: Http, e2e_settings: Settings, workers: int
) -> None:
    """With ``--workers N`` the supervisor passes SIGTERM on and every worker drains alike."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = (e2e_settings.data_dir / f"serve-drain-{port}.log").open("ab")
    env = _env(e2e_settings, TASK_OBSERVER_DRAIN_SECONDS="3", TASK_OBSERVER_READINESS_INTERVAL_MS="0")
    command = [str(CLI), "serve", "--port", str(port), "--workers", str(workers)]
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=log)
    try:

        def ready() -> bool:
            try:
                return httpx.get(f"{base}/readyz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, 60, "task-observer serve")
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)

        def draining() -> bool:  # at once with one process; the supervisor passes it on within 0.5 s
            answer = httpx.get(f"{base}/readyz", timeout=5)
            return answer.status_code == 503 and answer.json()["status"] == "draining"

        wait_until(draining, 2, "the replica to report draining")

        def every_worker_draining() -> bool:  # each worker takes the signal on its own loop, a moment apart
            return all(draining() for _ in range(6))

        wait_until(every_worker_draining, 2, "every worker to report draining")
        # And none of them says ready again while it drains.
        assert all(httpx.get(f"{base}/readyz", timeout=5).status_code == 503 for _ in range(6))
        # Still serving while the load balancer moves away: a request sent now is answered.
        with httpx.Client(base_url=base, timeout=10) as client:
            created = client.post(
                "/internal/v1/workflows",
                json={
                    "clientWorkflowKey": f"wf-drain-{port}-{workers}",
                    "ownerId": "user-1",
                    "title": "During the drain",
                    "initialTasks": [{"clientTaskKey": "t", "title": "t"}],
                },
                headers=api.coordinator,
            )
        assert created.status_code == 201, created.text
        # After its graceful stop uvicorn re-raises the signal: the process ends as terminated by it.
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
        assert time.monotonic() - signalled >= 3  # it kept serving for the drain window
        listed = api.client.get("/api/me/tasks", headers=api.user("user-1")).json()["tasks"]
        assert any(t["title"] == "t" for t in listed)
        create_workflow(api)  # the shared database is fine
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()
