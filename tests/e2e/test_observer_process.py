"""``task-observer observer`` as real processes, in both modes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from temporalio.testing import WorkflowEnvironment

from status.infra import tables as t
from status.settings import Settings
from tests.e2e.test_realtime_delivery import connect_user, next_for_task
from tests.integration.conftest import Http
from tests.support.flows import activate, create_workflow, report

pytestmark = pytest.mark.centrifugo
CLI = Path(sys.executable).with_name("task-observer")


def _env(settings: Settings, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "TASK_OBSERVER_ENV": "test",
        "TASK_OBSERVER_DATA_DIR": str(settings.data_dir),
        "TASK_OBSERVER_DATABASE_URL": settings.database_url,
        "TASK_OBSERVER_CENTRIFUGO_API_URL": settings.centrifugo_api_url,
        "TASK_OBSERVER_CENTRIFUGO_API_KEY": settings.centrifugo_api_key,
        "TASK_OBSERVER_CENTRIFUGO_TOKEN_SECRET": settings.centrifugo_token_secret,
        "TASK_OBSERVER_SERVICE_TOKEN_SECRET": settings.service_token_secret,
        "TASK_OBSERVER_EXECUTION_TOKEN_SECRET": settings.execution_token_secret,
        "TASK_OBSERVER_USER_TOKEN_SECRET": settings.user_token_secret,
        "TASK_OBSERVER_OBSERVER_METRICS_PORT": "0",
        **extra,
    }


@contextmanager
def observers(settings: Settings, count: int, *args: str, **extra: str) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs = []
    for i in range(count):
        with (settings.data_dir / f"observer-{os.getpid()}-{i}.log").open("ab") as log:
            procs.append(
                subprocess.Popen(
                    [str(CLI), "observer", *args], env=_env(settings, **extra), stdout=log, stderr=subprocess.STDOUT
                )
            )
    try:
        yield procs
    finally:
        for proc in procs:
            proc.terminate()
        for i, proc in enumerate(procs):
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGUSR1)  # its threads' stacks into its log (faulthandler)
                time.sleep(1)
                proc.kill()
                proc.wait(10)
                stacks = (settings.data_dir / f"observer-{os.getpid()}-{i}.log").read_text()[-6000:]
                pytest.fail(f"the observer did not stop on SIGTERM; where it waited:\n{stacks}")


async def _events_arrive(api: Http, e2e_engine: Any, events: int = 6) -> str:
    task_id = create_workflow(api)["tasks"][0]["taskId"]
    ctx = activate(api, task_id)
    client, recorder, _ = await connect_user(api, "user-1")
    assert report(api, ctx, "STEP_STARTED", 1).status_code == 200
    for seq in range(2, events):
        assert report(api, ctx, "STEP_PROGRESS", seq).status_code == 200
    final = api.client.get(f"/api/tasks/{task_id}", headers=api.user("user-1")).json()["taskVersion"]
    while (message := await next_for_task(recorder, task_id, timeout=20))["taskVersion"] != final:
        pass
    assert message["lifecycleStatus"] == "RUNNING"
    await client.disconnect()
    return task_id


async def test_two_loop_mode_observers_deliver_every_row_once(
    api: Http, e2e_settings: Settings, e2e_engine: Any
) -> None:
    with observers(e2e_settings, 2, "--mode", "loops") as procs:
        task_id = await _events_arrive(api, e2e_engine, events=12)
        assert all(p.poll() is None for p in procs)
    with e2e_engine.connect() as conn:
        rows = conn.execute(
            sa.select(t.task_outbox.c.status, t.task_outbox.c.attempts).where(t.task_outbox.c.aggregate_id == task_id)
        ).all()
    assert rows and {status for status, _ in rows} == {"PUBLISHED"}
    assert max(attempts for _, attempts in rows) == 1  # no row was claimed twice


async def test_a_commit_wakes_an_observer_in_another_process(
    api: Http, e2e_settings: Settings, e2e_engine: Any
) -> None:
    # A safety poll of ten minutes: within the test's timeouts only the wake-up datagram
    # the API sends after each commit can make the observer publish.
    with observers(e2e_settings, 1, "--mode", "loops", TASK_OBSERVER_RELAY_IDLE_MS="600000") as procs:
        await _registered(e2e_engine, procs)
        await _events_arrive(api, e2e_engine)
        assert procs[0].poll() is None


async def _registered(e2e_engine: Any, procs: list[subprocess.Popen[bytes]], timeout: float = 30) -> None:
    """Until an observer holds outbox partitions and advertises where it takes wake-ups."""
    relays = t.outbox_relay
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        assert all(p.poll() is None for p in procs), "an observer exited"
        with e2e_engine.connect() as conn:
            if conn.scalar(sa.select(sa.func.count()).select_from(relays).where(relays.c.wake_address.is_not(None))):
                return
        await asyncio.sleep(0.05)
    pytest.fail("no observer registered for wake-ups")


@pytest.mark.temporal
async def test_temporal_mode_observer_delivers(
    api: Http, e2e_settings: Settings, e2e_engine: Any, temporal_env: WorkflowEnvironment
) -> None:
    address = temporal_env.client.service_client.config.target_host
    with observers(e2e_settings, 1, "--mode", "temporal", TASK_OBSERVER_TEMPORAL_ADDRESS=address) as procs:
        await _events_arrive(api, e2e_engine)
        assert procs[0].poll() is None
        handle = temporal_env.client.get_workflow_handle("task-observer-relay")
        description = await handle.describe()
        assert description.status is not None and description.status.name == "RUNNING"
