"""The plugin never loses a report silently: credential problems keep and retry,
reports refused for good are kept with why and listed by ``task-observer undeliverable``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from task_status_interceptors import Reporter, ReporterConfig, StepBinding, read_undeliverable

from status.api.app import create_app
from status.bootstrap import build_service
from status.settings import Settings
from tests.e2e.test_observer_process import CLI, _env
from tests.integration.conftest import Http
from tests.support.flows import create_workflow
from tests.support.processes import serving

pytestmark = pytest.mark.mariadb


async def _until(condition: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_a_refused_credential_keeps_the_reports_until_a_good_one_delivers_them(
    api: Http, live_api: str, tmp_path: Path
) -> None:
    task_id = create_workflow(api)["tasks"][0]["taskId"]
    path = tmp_path / "outbox.sqlite3"
    wrong = Reporter(ReporterConfig(live_api, "a-credential-from-another-deployment", "document-parser", path))
    await wrong.start()
    execution = wrong.begin("run/cred/1", StepBinding(task_id, "02_parse"), 1)
    execution.completed()
    await _until(lambda: wrong.config_errors > 0)
    assert wrong.pending_events() == 2 and wrong.dropped == 0  # STARTED and COMPLETED, kept
    assert read_undeliverable(path) == []
    await wrong.stop(flush_timeout=0)

    right = Reporter(ReporterConfig(live_api, api.service_token("document-parser", "WORKER"), "document-parser", path))
    await right.start()
    await right.drained(30)
    await right.stop()
    step = next(
        s
        for s in api.client.get(f"/api/tasks/{task_id}", headers=api.user("user-1")).json()["steps"]
        if s["stepId"] == "02_parse"
    )
    assert step["lifecycleStatus"] == "SUCCEEDED"


async def test_reports_refused_for_good_are_kept_with_why_and_listed(
    api: Http, live_api: str, tmp_path: Path, e2e_settings: Settings
) -> None:
    path = tmp_path / "outbox.sqlite3"
    token = api.service_token("document-parser", "WORKER")
    reporter = Reporter(ReporterConfig(live_api, token, "document-parser", path))
    await reporter.start()
    missing = "tsk_000_01M8NZZZZZZZZZZZZZZZZZZZZZ"  # a task the status service never had
    execution = reporter.begin("run/gone/1", StepBinding(missing, "02_parse"), 1)
    execution.completed()
    await reporter.drained(30)
    await reporter.stop()
    kept = read_undeliverable(path)
    assert [r["eventId"] for r in kept] == ["run/gone/1:1:STEP_STARTED", "run/gone/1:2:STEP_COMPLETED"]
    assert all("bind refused: HTTP 404" in r["reason"] and "UNKNOWN_TASK" in r["reason"] for r in kept)
    listed = subprocess.run(
        [str(CLI), "undeliverable", str(path)], env=_env(e2e_settings), capture_output=True, text=True, timeout=60
    )
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line)["eventId"] for line in listed.stdout.splitlines()] == [r["eventId"] for r in kept]


@pytest.fixture
def short_handles_api(e2e_settings: Settings, e2e_engine: Any) -> Iterator[str]:
    """The status API with execution handles that expire after two seconds."""
    settings = replace(e2e_settings, execution_token_ttl_seconds=2)
    with serving(create_app(settings, e2e_engine, build_service(settings, e2e_engine))) as url:
        yield url


async def test_an_activity_that_outlives_its_handle_still_reports_its_completion(
    api: Http, short_handles_api: str, tmp_path: Path
) -> None:
    task_id = create_workflow(api)["tasks"][0]["taskId"]
    token = api.service_token("document-parser", "WORKER")
    reporter = Reporter(ReporterConfig(short_handles_api, token, "document-parser", tmp_path / "outbox.sqlite3"))
    await reporter.start()
    execution = reporter.begin("run/long/1", StepBinding(task_id, "02_parse"), 1)
    await reporter.drained(30)  # bound, STARTED delivered
    bound_at = time.monotonic()
    await _until(lambda: time.monotonic() - bound_at > 3)  # the handle's two seconds are over
    execution.completed()
    await reporter.drained(30)
    await reporter.stop()
    assert reporter.rebinds >= 1 and reporter.dropped == 0
    step = next(
        s
        for s in api.client.get(f"/api/tasks/{task_id}", headers=api.user("user-1")).json()["steps"]
        if s["stepId"] == "02_parse"
    )
    assert step["lifecycleStatus"] == "SUCCEEDED"


async def test_one_activity_costs_the_api_two_commits(
    api: Http, live_api: str, tmp_path: Path, e2e_engine: Any
) -> None:
    """Its binding carries its STEP_STARTED (one commit), its end is the other."""
    import sqlalchemy as sa

    task_id = create_workflow(api)["tasks"][0]["taskId"]
    token = api.service_token("document-parser", "WORKER")
    reporter = Reporter(ReporterConfig(live_api, token, "document-parser", tmp_path / "outbox.sqlite3"))
    await reporter.start()
    commits: list[int] = []

    def counted(conn: Any) -> None:
        commits.append(1)

    sa.event.listen(e2e_engine, "commit", counted)
    try:
        execution = reporter.begin("run/two-commits/1", StepBinding(task_id, "02_parse"), 1)
        await reporter.drained(30)  # bound with its STARTED
        assert len(commits) == 1
        execution.completed()
        await reporter.drained(30)
    finally:
        sa.event.remove(e2e_engine, "commit", counted)
        await reporter.stop()
    assert len(commits) == 2 and reporter.delivered == 2 and reporter.dropped == 0
    timeline = api.client.get(f"/api/tasks/{task_id}/events", headers=api.user("user-1")).json()["events"]
    assert [e["eventType"] for e in timeline][-3:] == ["STEP_ACTIVATED", "STEP_STARTED", "STEP_COMPLETED"]
    versions = [int(e["taskVersion"]) for e in timeline]
    assert versions == list(range(versions[0], versions[0] + len(versions)))  # gap-free


async def test_a_full_batch_whose_started_events_all_went_with_their_bindings_still_sends_the_rest(
    api: Http, live_api: str, tmp_path: Path
) -> None:
    """A batch emptied by the bindings (every event a STARTED that travelled with its binding) is no sign
    that the file is empty: what waits behind it is delivered too."""
    token = api.service_token("document-parser", "WORKER")
    config = ReporterConfig(live_api, token, "document-parser", tmp_path / "outbox.sqlite3", batch_size=3)
    reporter = Reporter(config)
    tasks = [create_workflow(api)["tasks"][0]["taskId"] for _ in range(4)]
    for i, task_id in enumerate(tasks):  # queued before the sender runs: STARTED, STARTED, STARTED | …
        reporter.begin(f"run/full/{i}", StepBinding(task_id, "02_parse"), 1)
    for i, task_id in enumerate(tasks):
        reporter.begin(f"run/full/{i}", StepBinding(task_id, "02_parse"), 1).completed()
    await reporter.start()
    await reporter.drained(30)
    await reporter.stop()
    assert reporter.delivered == 8 and reporter.dropped == 0
    for task_id in tasks:
        steps = api.client.get(f"/api/tasks/{task_id}", headers=api.user("user-1")).json()["steps"]
        assert {s["stepId"]: s["lifecycleStatus"] for s in steps}["02_parse"] == "SUCCEEDED"


async def test_a_burst_of_activities_is_reported_in_one_request_and_one_commit(
    api: Http, live_api: str, tmp_path: Path, e2e_engine: Any
) -> None:
    """Five activities that started and ended together: their bindings, each with its events, are one
    request and one transaction."""
    import sqlalchemy as sa

    token = api.service_token("document-parser", "WORKER")
    reporter = Reporter(ReporterConfig(live_api, token, "document-parser", tmp_path / "outbox.sqlite3"))
    tasks = [create_workflow(api)["tasks"][0]["taskId"] for _ in range(5)]
    for i, task_id in enumerate(tasks):  # all queued before the sender runs, as in a fan-out
        reporter.begin(f"run/burst/{i}", StepBinding(task_id, "02_parse"), 1).completed()
    commits: list[int] = []

    def counted(conn: Any) -> None:
        commits.append(1)

    sa.event.listen(e2e_engine, "commit", counted)
    try:
        await reporter.start()
        await reporter.drained(30)
    finally:
        sa.event.remove(e2e_engine, "commit", counted)
        await reporter.stop()
    assert reporter.delivered == 10 and reporter.dropped == 0
    assert len(commits) == 1, commits
    for task_id in tasks:
        steps = api.client.get(f"/api/tasks/{task_id}", headers=api.user("user-1")).json()["steps"]
        assert {s["stepId"]: s["lifecycleStatus"] for s in steps}["02_parse"] == "SUCCEEDED"


async def test_a_heartbeat_rides_with_its_executions_events_at_most_once_per_half_interval(
    api: Http, live_api: str, tmp_path: Path, e2e_engine: Any
) -> None:
    """One request for the events and the heartbeat of an execution, and
    no more heartbeat writes than the rounds would make: the next one waits half an interval. The
    rounds themselves are an hour apart here, so what reached the service rode with the events."""
    import sqlalchemy as sa

    from status.infra import tables as t

    task_id = create_workflow(api)["tasks"][0]["taskId"]
    token = api.service_token("document-parser", "WORKER")
    config = ReporterConfig(live_api, token, "document-parser", tmp_path / "outbox.sqlite3", heartbeat_interval=3600)
    reporter = Reporter(config)
    await reporter.start()
    rounds: list[int] = []
    assert reporter._events is not None
    own_round = reporter._events.record_heartbeats

    def counted(beats: list[dict[str, Any]]) -> Any:
        rounds.append(len(beats))
        return own_round(beats)

    reporter._events.record_heartbeats = counted  # type: ignore[method-assign]

    def last_seq() -> int:
        with e2e_engine.connect() as conn:
            return int(
                conn.execute(
                    sa.select(t.task_step.c.last_heartbeat_seq).where(
                        t.task_step.c.task_id == task_id, t.task_step.c.step_id == "02_parse"
                    )
                ).scalar_one()
            )

    try:
        execution = reporter.begin("run/riding/1", StepBinding(task_id, "02_parse"), 1)
        await reporter.drained(30)  # bound with its STARTED
        reporter.beat("run/riding/1", 3)
        execution.progress(1, 4, "page")
        await reporter.drained(30)
        assert last_seq() == 3
        reporter.beat("run/riding/1", 4)
        execution.progress(3, 4, "page", phase_code="OCR")  # a phase change: sent at once
        await reporter.drained(30)
        assert last_seq() == 3  # within half an interval of the last: it waits for its round
        assert await asyncio.to_thread(reporter.send_heartbeats) == 1  # which sends it
        assert last_seq() == 4
    finally:
        await reporter.stop()
    assert rounds == [1] and reporter.dropped == 0


@pytest.fixture
def small_data_api(e2e_settings: Settings, e2e_engine: Any) -> Iterator[str]:
    """The status API refusing operation data over 64 bytes (PAYLOAD_TOO_LARGE: refused for good)."""
    settings = replace(e2e_settings, max_data_bytes=64)
    with serving(create_app(settings, e2e_engine, build_service(settings, e2e_engine))) as url:
        yield url


def _plugin_command(*args: str) -> subprocess.CompletedProcess[str]:
    import sys

    return subprocess.run(
        [sys.executable, "-m", "task_status_interceptors", "undeliverable", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_the_plugins_own_command_lists_and_resends_what_was_refused_once_the_cause_is_fixed(
    api: Http, live_api: str, small_data_api: str, tmp_path: Path
) -> None:
    """Issue 29 item 8: `python -m task_status_interceptors undeliverable list|resend` in a worker's
    environment. Refused again while the cause stands (back in the list, with the new reason);
    delivered once it is fixed, with the same eventId, and gone from the list."""
    task_id = create_workflow(api)["tasks"][0]["taskId"]
    path = tmp_path / "outbox.sqlite3"
    token = api.service_token("document-parser", "WORKER")
    reporter = Reporter(ReporterConfig(small_data_api, token, "document-parser", path))
    await reporter.start()
    execution = reporter.begin("run/big/1", StepBinding(task_id, "02_parse"), 1)
    data = {"schema": "document.parse.progress.v1", "value": {"page": 3, "pageCount": 8, "note": "x" * 200}}
    execution.progress(3, 8, "page", data=data)
    await reporter.drained(30)
    await reporter.stop()
    (kept,) = read_undeliverable(path)
    assert kept["eventId"] == "run/big/1:2:STEP_PROGRESS" and "PAYLOAD_TOO_LARGE" in kept["reason"]

    listed = _plugin_command("list", str(path))
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line)["eventId"] for line in listed.stdout.splitlines()] == [kept["eventId"]]

    # The cause still stands: refused again, kept with why, exit 1.
    again = _plugin_command("resend", str(path), "--url", small_data_api, "--token", token, "--timeout", "30")
    assert again.returncode == 1, again.stderr
    assert "0 delivered, 1 refused again, 0 still waiting" in again.stderr
    assert [r["eventId"] for r in read_undeliverable(path)] == [kept["eventId"]]

    # Fixed (a deployment that takes the data): delivered, gone from the list.
    fixed = _plugin_command("resend", str(path), "--url", live_api, "--token", token, "--timeout", "30")
    assert fixed.returncode == 0, fixed.stderr
    assert "1 delivered, 0 refused again, 0 still waiting" in fixed.stderr
    assert read_undeliverable(path) == []
    step = next(
        s
        for s in api.client.get(f"/api/tasks/{task_id}", headers=api.user("user-1")).json()["steps"]
        if s["stepId"] == "02_parse"
    )
    assert step["progress"]["current"] == 3 and step["data"]["value"]["page"] == 3
    # Usage: no file, no credentials.
    assert _plugin_command("list", str(tmp_path / "none.sqlite3")).returncode == 2
    assert _plugin_command("resend", str(path)).returncode == 2
