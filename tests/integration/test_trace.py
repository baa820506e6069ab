"""Tracing a change (design D12): accepted changes are logged, sampled by eventId, with the
correlation fields; ``task-observer trace EVENT_ID`` goes from an eventId to the task version it
committed and each outbox row with its channel and publish state."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import structlog
from starlette.testclient import TestClient

from status import logs
from status.api.app import create_app
from status.app.service import StatusService
from status.infra import tables as t
from status.settings import Settings
from task_observer.cli import main
from tests.integration.conftest import Http
from tests.support.flows import activate, create_workflow, event_body, follow_detail, report
from tests.support.outbox import publications
from tests.support.settings import database_environment
from tests.support.shards import engine_for


def test_trace_goes_from_an_event_id_to_its_version_and_outbox_rows(
    http: Http,
    service: StatusService,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: Any,
) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    follow_detail(http, task_id)
    ctx = activate(http, task_id)
    body = event_body("STEP_STARTED", 1)
    accepted = http.client.post("/internal/v1/task-events", json=body, headers=http.auth(ctx["executionToken"])).json()
    with engine_for(service, task_id).begin() as conn:  # the change's row published, as a relay would mark it
        first = conn.scalars(
            sa.select(sa.func.min(t.task_outbox.c.id)).where(t.task_outbox.c.event_id == body["eventId"])
        ).one()
        conn.execute(sa.update(t.task_outbox).where(t.task_outbox.c.id == first).values(status="PUBLISHED"))
        expected = {(p.row_id, p.projection, p.channel) for p in publications(conn) if p.event_id == body["eventId"]}
    database_environment(monkeypatch, settings)
    monkeypatch.setenv("TASK_OBSERVER_DATA_DIR", str(tmp_path))

    assert main(["trace", body["eventId"]]) == 0
    (found,) = json.loads(capsys.readouterr().out)
    assert found["tenantId"] == http.tenant and found["taskId"] == task_id and found["dedupHeld"] is True
    event = found["event"]
    assert str(event["taskVersion"]) == accepted["taskVersion"] and event["eventType"] == "STEP_STARTED"
    assert (event["stepId"], event["operationCode"], event["executionId"]) == (
        accepted["stepId"],
        accepted["operationCode"],
        ctx["executionId"],
    )
    assert found["task"]["currentVersion"] == accepted["taskVersion"]
    rows = found["outbox"]
    # one row per change, each naming its messages' projections and channels
    assert {(r["id"], m["projection"], ch) for r in rows for m in r["messages"] for ch in m["channels"]} == expected
    assert len(rows) == 1 and rows[0]["projection"] == "MESSAGES"
    assert ("TASK_DETAIL", f"task_detail:{http.tenant}/{task_id}") in {(p, ch) for _, p, ch in expected}
    assert {r["id"]: r["status"] for r in rows}[first] == "PUBLISHED"
    assert "payload" not in json.dumps(rows)  # what users see stays out of an operator's terminal

    # Another tenant's id of the same spelling is another event; an unknown id is a clear miss.
    assert main(["trace", body["eventId"], "--tenant", "someone-else"]) == 1
    assert main(["trace", "evt-never-sent"]) == 1
    assert "no event 'evt-never-sent'" in capsys.readouterr().err


def test_trace_names_the_row_that_carried_a_change_its_transaction_changed_again(
    http: Http, settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: Any
) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    follow_detail(http, task_id)
    ctx = activate(http, task_id)
    assert report(http, ctx, "STEP_STARTED", 1).is_success
    ticks = [
        {**event_body("STEP_PROGRESS", seq, progress={"current": seq}), "executionHandle": ctx["executionHandle"]}
        for seq in (2, 3)
    ]
    answer = http.client.post("/internal/v1/task-events:batch", json={"events": ticks}, headers=http.worker)
    first, last = (r["taskVersion"] for r in answer.json()["results"])  # one transaction, two versions
    database_environment(monkeypatch, settings)
    monkeypatch.setenv("TASK_OBSERVER_DATA_DIR", str(tmp_path))

    assert main(["trace", ticks[0]["eventId"]]) == 0
    (covered,) = json.loads(capsys.readouterr().out)
    assert str(covered["event"]["taskVersion"]) == first and covered["outbox"] == []
    carrier = covered["carriedBy"]
    assert (carrier["eventId"], str(carrier["aggregateVersion"])) == (ticks[1]["eventId"], last)
    assert ("TASK_DETAIL", f"task_detail:{http.tenant}/{task_id}") in {
        (m["projection"], ch) for m in carrier["messages"] for ch in m["channels"]
    }
    assert main(["trace", ticks[1]["eventId"]]) == 0
    (own,) = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in own["outbox"]] == [carrier["id"]] and "carriedBy" not in own


def test_accepted_changes_are_logged_with_correlation_fields_sampled_by_event_id(
    settings: Settings, engine: sa.Engine, service: StatusService, http: Http
) -> None:
    with TestClient(create_app(replace(settings, change_log_sample=1.0), engine, service)) as client:
        logged = Http(client, http.tenant, http.service_tokens, http.user_tokens)
        task_id = create_workflow(logged, taskType="document.ingest")["tasks"][0]["taskId"]
        ctx = activate(logged, task_id)
        data = {"schema": "document.parse.progress.v1", "value": {"page": 3}}
        started = event_body("STEP_STARTED", 1)
        token = logged.auth(ctx["executionToken"])
        assert client.post("/internal/v1/task-events", json=started, headers=token).is_success
        body = event_body("STEP_PROGRESS", 2, progress={"current": 3}, data=data)
        with structlog.testing.capture_logs() as lines:
            accepted = client.post("/internal/v1/task-events", json=body, headers=logged.auth(ctx["executionToken"]))
            again = client.post("/internal/v1/task-events", json=body, headers=logged.auth(ctx["executionToken"]))
    assert accepted.status_code == 200 and again.json()["duplicate"] is True, accepted.text
    (line,) = [entry for entry in lines if entry["event"] == "event accepted"]  # the duplicate is not a change
    assert line["eventId"] == body["eventId"] and line["taskId"] == task_id
    assert line["taskType"] == "document.ingest" and line["operationCode"] == accepted.json()["operationCode"]
    assert (line["attempt"], line["executionId"], line["sourceSeq"]) == (1, ctx["executionId"], 2)
    assert line["taskVersion"] == accepted.json()["taskVersion"] and line["dataSchema"] == data["schema"]
    # The fields survive the production log filter; data never does.
    kept = logs._whitelist(None, "info", {**line, "data": data, "executionToken": "secret"})
    assert kept == {k: v for k, v in line.items() if k != "log_level"}  # (production's key is "level")
    assert "data" not in kept and "executionToken" not in kept


def test_sampling_keeps_or_drops_an_events_lines_together() -> None:
    ids = [f"evt-{i}" for i in range(4000)]
    kept = [i for i in ids if logs.sampled(i, 0.1)]
    assert 300 < len(kept) < 500  # about a tenth
    assert kept == [i for i in ids if logs.sampled(i, 0.1)]  # the same answer each time (API and relay agree)
    assert all(logs.sampled(i, 1.0) for i in ids) and not any(logs.sampled(i, 0.0) for i in ids)
