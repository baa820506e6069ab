"""``task-observer serve --workers 2``: processes share tasks and never serve each other stale state."""

from __future__ import annotations

import subprocess
import threading
import uuid
from typing import Any

import httpx
import sqlalchemy as sa

from status.infra import tables as t
from status.infra.tokens import ServiceTokens, UserTokens
from status.settings import Settings
from tests.e2e.test_observer_process import CLI, _env
from tests.integration.conftest import Http
from tests.support.flows import activate, create_workflow, follow_detail, report
from tests.support.outbox import publications
from tests.support.processes import free_port, wait_until


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_two_workers_keep_one_gap_free_version_line_per_task(e2e_settings: Settings, e2e_engine: sa.Engine) -> None:
    tenant = f"tenant-{uuid.uuid4().hex[:8]}"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = (e2e_settings.data_dir / f"serve-workers-{port}.log").open("ab")
    proc = subprocess.Popen(
        [str(CLI), "serve", "--port", str(port), "--workers", "2"], env=_env(e2e_settings), stdout=log, stderr=log
    )
    try:
        wait_until(lambda: _ready(base), 60, "serve --workers 2")
        # No keep-alive: every request is a new connection, accepted by either process.
        client = httpx.Client(base_url=base, timeout=30, limits=httpx.Limits(max_keepalive_connections=0))
        http = Http(
            client,  # type: ignore[arg-type]
            tenant,
            ServiceTokens(e2e_settings.service_token_secret),
            UserTokens(e2e_settings.user_token_secret),
        )
        task_id = create_workflow(http)["tasks"][0]["taskId"]
        follow_detail(http, task_id)
        contexts = [activate(http, task_id, step) for step in ("01_prepare", "02_parse")]
        results: list[dict[str, Any]] = []
        lock = threading.Lock()

        def produce(ctx: dict[str, Any]) -> None:
            for seq in range(1, 13):
                kind = "STEP_STARTED" if seq == 1 else "STEP_PROGRESS"
                response = report(http, ctx, kind, seq, progress={"current": seq, "total": 12})
                assert response.status_code == 200, response.text
                with lock:
                    results.append(response.json())

        threads = [threading.Thread(target=produce, args=(ctx,)) for ctx in contexts]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        versions = sorted(int(r["taskVersion"]) for r in results)
        first = versions[0]
        assert versions == list(range(first, first + 24))  # distinct and gap-free across both processes
        with e2e_engine.connect() as conn:
            (detail,) = publications(conn, task_id, projection="TASK_DETAIL", version=versions[-1])
            payload = detail.payload
        steps = {s["stepId"]: s for s in payload["state"]["steps"]}
        # Whichever process wrote the last event, it showed the other producer's latest progress too.
        assert steps["01_prepare"]["progress"]["current"] == 12
        assert steps["02_parse"]["progress"]["current"] == 12
        client.close()
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def test_the_access_log_never_carries_a_token_and_database_errors_no_values(
    e2e_settings: Settings, e2e_engine: sa.Engine
) -> None:
    """``serve --access-log``: the SSE endpoint's ``?access_token=`` is redacted in the log line."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    path = e2e_settings.data_dir / f"serve-access-{port}.log"
    with path.open("ab") as log:
        proc = subprocess.Popen(
            [str(CLI), "serve", "--port", str(port), "--access-log"], env=_env(e2e_settings), stdout=log, stderr=log
        )
    try:
        wait_until(lambda: _ready(base), 60, "serve --access-log")
        secret = "eyJzZWNyZXQiOiJ0b2tlbiJ9.never-in-a-log"
        response = httpx.get(f"{base}/api/v1/me/task-stream?access_token={secret}", timeout=10)
        assert response.status_code == 401
        wait_until(lambda: "/api/v1/me/task-stream" in path.read_text(), 10, "the access log line")
        written = path.read_text()
        assert secret not in written and "access_token=[redacted]" in written
    finally:
        proc.terminate()
        proc.wait(15)


def test_database_errors_do_not_carry_bound_values(e2e_engine: sa.Engine) -> None:
    secret = "value-that-must-not-be-logged"
    with e2e_engine.begin() as conn:
        try:
            conn.execute(sa.insert(t.task_event_dedup).values(tenant_id="t", event_id=secret, task_id=None))
        except sa.exc.DBAPIError as exc:
            assert secret not in str(exc)
        else:
            raise AssertionError("the insert should have failed")
