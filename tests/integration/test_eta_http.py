"""ETAs over HTTP with deterministic durations: from the history of the same operation and task
type, carried in snapshots, summaries and published projections, absent when unknown, and never
a version of their own."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import sqlalchemy as sa

from status.app.service import StatusService
from status.infra import tables as t
from status.infra.stores.definitions import SqlDurationStore
from tests.integration.conftest import Http
from tests.support.flows import activate, complete_task, create_workflow, follow_detail, report
from tests.support.outbox import publications
from tests.support.shards import engine_for

PARSE_ONLY = [{"stepId": "02_parse", "operationCode": "DOCUMENT.PARSE"}]


def _parse_task(http: Http, task_type: str) -> tuple[str, dict[str, Any]]:
    task_id = create_workflow(http, taskType=task_type, knownSteps=PARSE_ONLY)["tasks"][0]["taskId"]
    return task_id, activate(http, task_id)


def _history(http: Http, task_type: str, durations: list[int]) -> None:
    for duration in durations:
        _, ctx = _parse_task(http, task_type)
        assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
        done = report(http, ctx, "STEP_COMPLETED", 2, durationMs=duration)
        assert done.status_code == 200, done.text


def _outbox_count(service: StatusService, task_id: str) -> int:
    with engine_for(service, task_id).connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count()).select_from(t.task_outbox).where(t.task_outbox.c.aggregate_id == task_id)
            ).scalar_one()
        )


def test_a_running_step_and_its_task_get_an_eta_from_history(http: Http, service: StatusService) -> None:
    task_type = f"DOC_{uuid.uuid4().hex[:6].upper()}"
    # One outlier among steady one-minute runs: the median ignores it.
    _history(http, task_type, [60_000, 60_000, 60_000, 60_000, 3_600_000])
    task_id, ctx = _parse_task(http, task_type)
    follow_detail(http, task_id)
    started = report(http, ctx, "STEP_STARTED", 1)
    assert started.status_code == 200
    snap = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    step = next(s for s in snap["steps"] if s["stepId"] == "02_parse")
    assert 50_000 <= step["etaMs"] <= 60_000, step
    assert 0 < step["etaConfidence"] < 1
    assert snap["etaMs"] == step["etaMs"] and snap["etaConfidence"] == step["etaConfidence"]
    listed = http.client.get("/api/me/tasks", headers=http.user("user-1")).json()["tasks"]
    summary = next(x for x in listed if x["taskId"] == task_id)
    assert 50_000 <= summary["etaMs"] <= 60_000
    # The published projections of that version carry it too.
    with engine_for(service, task_id).connect() as conn:
        published = publications(conn, task_id, version=int(started.json()["taskVersion"]))
    by_projection = {p.projection: p.payload for p in published}
    assert 50_000 <= by_projection["USER_SUMMARY"]["etaMs"] <= 60_000
    detail_step = next(s for s in by_projection["TASK_DETAIL"]["state"]["steps"] if s["stepId"] == "02_parse")
    assert 50_000 <= detail_step["etaMs"] <= 60_000
    # Time passing changes the estimate a reader sees, never the version or the outbox.
    rows = _outbox_count(service, task_id)
    again = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    assert again["taskVersion"] == snap["taskVersion"] and again["etaMs"] <= snap["etaMs"]
    assert _outbox_count(service, task_id) == rows
    # A finished task has no ETA.
    assert report(http, ctx, "STEP_COMPLETED", 2, durationMs=61_000).status_code == 200
    done = complete_task(http, task_id)
    assert done.status_code == 200
    final = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    assert "etaMs" not in final and all("etaMs" not in s for s in final["steps"])


def test_no_history_means_no_eta(http: Http) -> None:
    task_type = f"DOC_{uuid.uuid4().hex[:6].upper()}"
    _history(http, task_type, [60_000, 60_000])  # too few samples to say anything
    task_id, ctx = _parse_task(http, task_type)
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    snap = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    assert "etaMs" not in snap and "etaConfidence" not in snap
    assert all("etaMs" not in s for s in snap["steps"])
    # Another task type's history is not this one's.
    other = f"DOC_{uuid.uuid4().hex[:6].upper()}"
    _history(http, other, [60_000, 60_000, 60_000])
    snap = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    assert "etaMs" not in snap


def test_a_filling_history_costs_no_read_per_success_and_counts_each_one(
    http: Http, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each committed success joins its operation's sample in memory: the history is read once,
    not once per success, and the ETA after the third success already stands on three samples."""
    reads: list[tuple[str, ...]] = []
    original = SqlDurationStore.recent_durations

    def counted(self: SqlDurationStore, *key: Any) -> list[float]:
        reads.append(key)
        return original(self, *key)

    monkeypatch.setattr(SqlDurationStore, "recent_durations", counted)
    task_type = f"DOC_{uuid.uuid4().hex[:6].upper()}"
    _history(http, task_type, [30_000, 30_000, 30_000])
    assert len([key for key in reads if task_type in key]) == 1, reads  # the first ETA read it; none since
    task_id, ctx = _parse_task(http, task_type)
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    snap = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    assert 25_000 <= snap["etaMs"] <= 30_000, snap  # three samples: enough for an estimate
    assert len([key for key in reads if task_type in key]) == 1, reads
