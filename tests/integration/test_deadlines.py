"""Every request has a deadline, and the database work under it a time limit (design D13): a
stuck database (here: a row lock, or SQLite's write lock, held elsewhere) gets the caller a
clear 503 UNAVAILABLE (retryable) within REQUEST_DEADLINE_SECONDS instead of a request that
hangs; the same request again, once the database answers, is applied once. On MariaDB a
statement past DB_STATEMENT_TIMEOUT_SECONDS is ended by the server and answered at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from status.api.app import create_app
from status.app.service import StatusService
from status.bootstrap import build_service
from status.domain.errors import Unavailable
from status.infra import tables as t
from status.infra.db import create_engine
from status.infra.uow import SqlDatabase
from status.settings import Settings
from tests.integration.conftest import Http
from tests.support.flows import activate, create_workflow, event_body
from tests.support.shards import engine_for

DEADLINE = 2.5
STATEMENT = 2.0  # lock waits end after 1 s and are retried: only the deadline ends the request


@pytest.fixture
def bounded(settings: Settings, http: Http) -> Iterator[tuple[Http, sa.Engine]]:
    limited = replace(settings, request_deadline_seconds=DEADLINE, db_statement_timeout_seconds=STATEMENT)
    engine = create_engine(settings.database_url, statement_timeout=STATEMENT)
    service = build_service(limited, engine)
    with TestClient(create_app(limited, engine, service), raise_server_exceptions=False) as client:
        yield Http(client, http.tenant, http.service_tokens, http.user_tokens), engine
    engine.dispose()


def _url_of(service: StatusService, task_id: str) -> str:
    """The URL of the database (the shard) holding the task."""
    return engine_for(service, task_id).url.render_as_string(hide_password=False)


def _hold_lock(engine: sa.Engine, task_id: str, release: threading.Event, held: threading.Event) -> None:
    """Hold what an event for the task needs until ``release``: its row lock (MariaDB), the write lock (SQLite)."""
    with engine.connect() as conn:
        conn.begin()  # SQLite: the engine's begin hook takes the write lock (BEGIN IMMEDIATE)
        if engine.dialect.name != "sqlite":
            conn.execute(sa.select(t.task.c.id).where(t.task.c.id == task_id).with_for_update())
        held.set()
        release.wait(30)
        conn.rollback()


def test_a_request_stuck_on_the_database_is_answered_503_within_its_deadline_and_its_retry_applies_once(
    bounded: tuple[Http, sa.Engine], service: StatusService
) -> None:
    http, engine = bounded
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    ctx = activate(http, task_id)
    body = event_body("STEP_STARTED", 1)
    release, held = threading.Event(), threading.Event()
    other = create_engine(_url_of(service, task_id))  # no limits: the one holding the lock
    holder = threading.Thread(target=_hold_lock, args=(other, task_id, release, held), daemon=True)
    holder.start()
    try:
        assert held.wait(10)
        began = time.monotonic()
        stuck = http.client.post("/internal/v1/task-events", json=body, headers=http.auth(ctx["executionToken"]))
        took = time.monotonic() - began
    finally:
        release.set()
        holder.join(30)
        other.dispose()
    assert stuck.status_code == 503, stuck.text
    assert stuck.json()["error"] == {
        "code": "UNAVAILABLE",
        "message": "the request did not finish within its deadline; retry with the same request",
        "retryable": True,
    }
    assert stuck.headers["Retry-After"] == "1"
    assert took < DEADLINE + 3  # answered at the deadline, not when the lock went
    # The database answers again: the same request is applied (or found applied), once.
    again = http.client.post("/internal/v1/task-events", json=body, headers=http.auth(ctx["executionToken"]))
    assert again.status_code == 200, again.text
    with engine_for(service, task_id).connect() as conn:
        logged = conn.scalar(
            sa.select(sa.func.count())
            .select_from(t.task_event_log)
            .where(t.task_event_log.c.event_id == body["eventId"])
        )
    assert logged == 1
    snapshot = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    assert next(s for s in snapshot["steps"] if s["stepId"] == "02_parse")["lifecycleStatus"] == "RUNNING"
    assert "task_status_deadline_exceeded_total" in http.client.get("/metrics").text


def test_a_statement_past_its_time_limit_is_ended_by_the_server_and_not_retried(settings: Settings) -> None:
    if not settings.database_url.startswith("mysql"):
        pytest.skip("SQLite has no statement time limit; its lock waits are bounded by busy_timeout")
    engine = create_engine(settings.database_url, statement_timeout=STATEMENT)
    try:
        runs = []

        def slow(uow: object) -> None:
            runs.append(1)
            uow.conn.exec_driver_sql("SELECT SLEEP(5)")  # type: ignore[attr-defined]

        began = time.monotonic()
        with pytest.raises(Unavailable) as refused:
            SqlDatabase(engine).run(slow)
        took = time.monotonic() - began
        assert "did not answer in time" in refused.value.message
        assert runs == [1] and took < STATEMENT + 4  # ended by the server, answered at once, not re-run
        with engine.connect() as conn:  # the session carries the limits
            assert float(conn.exec_driver_sql("SELECT @@max_statement_time").scalar_one()) == STATEMENT
            assert int(conn.exec_driver_sql("SELECT @@innodb_lock_wait_timeout").scalar_one()) == 1
    finally:
        engine.dispose()


async def test_a_grpc_call_stuck_on_the_database_is_answered_unavailable_within_its_deadline(
    bounded: tuple[Http, sa.Engine], service: StatusService
) -> None:
    import grpc
    from task_status_wire import convert
    from task_status_wire import task_events_pb2_grpc as pb_grpc

    from status.api.grpc_server import start_grpc_server

    http, _ = bounded
    api = http.client.app.state.api  # type: ignore[attr-defined]
    server, port = await start_grpc_server(api.gate, api.grpc_committer, api.changes, "127.0.0.1", 0)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    ctx = activate(http, task_id)
    release, held = threading.Event(), threading.Event()
    other = create_engine(_url_of(service, task_id))
    holder = threading.Thread(target=_hold_lock, args=(other, task_id, release, held), daemon=True)
    holder.start()
    try:
        assert held.wait(10)
        body = event_body("STEP_STARTED", 1)
        body.pop("executionToken", None)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await pb_grpc.TaskEventsStub(channel).ReportEvent(
                convert.event_from_json(body), metadata=(("authorization", f"Bearer {ctx['executionToken']}"),)
            )
    finally:
        release.set()
        holder.join(30)
        other.dispose()
        await channel.close()
        await server.stop(grace=None)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    trailing = dict(refused.value.trailing_metadata() or ())
    assert trailing["task-status-error-code"] == "UNAVAILABLE" and trailing["task-status-retryable"] == "true"
    assert "deadline" in (refused.value.details() or "")
