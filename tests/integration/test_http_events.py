"""Event ingestion over HTTP: idempotency, binding, state machine, data contracts (design D6.1, D8, D18)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from status.app.service import StatusService
from status.infra import tables as t
from tests.integration.conftest import Http
from tests.support.flows import activate, create_workflow, event_body, report
from tests.support.shards import rows_everywhere


def _task(http: Http) -> tuple[str, dict]:
    created = create_workflow(http)
    task_id = created["tasks"][0]["taskId"]
    return task_id, activate(http, task_id)


def test_ac1_same_event_id_retried_returns_the_first_result(http: Http) -> None:
    task_id, ctx = _task(http)
    body = event_body("STEP_STARTED", 1)
    first = http.client.post("/internal/v1/task-events", json=body, headers=http.auth(ctx["executionToken"]))
    again = http.client.post("/internal/v1/task-events", json=body, headers=http.auth(ctx["executionToken"]))
    assert first.status_code == again.status_code == 200
    assert again.json()["duplicate"] is True and first.json()["duplicate"] is False
    strip = lambda r: {k: v for k, v in r.json().items() if k != "duplicate"}  # noqa: E731
    assert strip(first) == strip(again)
    snap = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    assert snap["taskVersion"] == first.json()["taskVersion"]


def test_ac2_same_event_id_different_content_conflicts(http: Http) -> None:
    _, ctx = _task(http)
    body = event_body("STEP_STARTED", 1)
    assert (
        http.client.post("/internal/v1/task-events", json=body, headers=http.auth(ctx["executionToken"])).status_code
        == 200
    )
    changed = {**body, "phaseCode": "OTHER"}
    response = http.client.post("/internal/v1/task-events", json=changed, headers=http.auth(ctx["executionToken"]))
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "EVENT_ID_CONFLICT"


def test_compact_form_with_handle_and_service_token(http: Http) -> None:
    _task_id, ctx = _task(http)
    body = event_body("STEP_STARTED", 1, executionHandle=ctx["executionHandle"])
    response = http.client.post("/internal/v1/task-events", json=body, headers=http.worker)
    assert response.status_code == 200, response.text
    assert response.json()["stepId"] == "02_parse" and response.json()["lifecycleStatus"] == "RUNNING"
    # Another producer's service token can't use the handle.
    other = http.auth(http.service_token("someone-else", "WORKER"))
    body = event_body("STEP_PROGRESS", 2, executionHandle=ctx["executionHandle"])
    response = http.client.post("/internal/v1/task-events", json=body, headers=other)
    assert response.status_code == 403 and response.json()["error"]["code"] == "PRODUCER_MISMATCH"


def test_a_retry_that_claims_another_envelope_is_refused_not_answered_as_a_duplicate(http: Http) -> None:
    """The envelope (workflowId, operationCode, taskType) is checked before the eventId's dedup
    entry: the same eventId naming other facts is refused, the honest retry is still a duplicate."""
    _task_id, ctx = _task(http)
    body = event_body("STEP_STARTED", 1, executionHandle=ctx["executionHandle"])
    assert http.client.post("/internal/v1/task-events", json=body, headers=http.worker).status_code == 200
    for claim, code in (
        ({"workflowId": "wf_someone_else"}, "PERMISSION_DENIED"),
        ({"operationCode": "FILE.PREPARE"}, "OPERATION_MISMATCH"),
        ({"taskType": "other.type"}, "PERMISSION_DENIED"),
    ):
        lying = http.client.post("/internal/v1/task-events", json={**body, **claim}, headers=http.worker)
        assert lying.status_code == 403 and lying.json()["error"]["code"] == code, (claim, lying.text)
    honest = http.client.post("/internal/v1/task-events", json=body, headers=http.worker)
    assert honest.status_code == 200 and honest.json()["duplicate"] is True


def test_ac12_unregistered_schema_is_rejected_and_state_untouched(http: Http) -> None:
    task_id, ctx = _task(http)
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    before = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    bad = report(
        http,
        ctx,
        "STEP_PROGRESS",
        2,
        data={"schema": "video.transcode.progress.v1", "value": {"frame": 1, "totalFrames": 2}},
    )
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "SCHEMA_REJECTED"
    invalid = report(
        http, ctx, "STEP_PROGRESS", 2, data={"schema": "document.parse.progress.v1", "value": {"page": "x"}}
    )
    assert invalid.status_code == 422 and invalid.json()["error"]["code"] == "SCHEMA_REJECTED"
    after = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    assert after["taskVersion"] == before["taskVersion"] and after["steps"] == before["steps"]
    good = report(
        http,
        ctx,
        "STEP_PROGRESS",
        2,
        data={"schema": "document.parse.progress.v1", "value": {"page": 1, "secret": "x"}},
    )
    assert good.status_code == 200
    parse = next(
        s
        for s in http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()["steps"]
        if s["stepId"] == "02_parse"
    )
    assert parse["data"] == {
        "schema": "document.parse.progress.v1",
        "value": {"page": 1},
    }  # unknown field stripped (design D8.10)


def test_one_poison_item_never_fails_its_batch(http: Http, monkeypatch: pytest.MonkeyPatch) -> None:
    """A non-domain failure of one event (a bug, a broken row) is that event's result; the others commit."""
    from status.app.events import EventCommands

    task_id = create_workflow(http)["tasks"][0]["taskId"]
    ctx = activate(http, task_id)
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    events = [event_body("STEP_PROGRESS", seq, progress={"current": seq, "total": 10}) for seq in (2, 3, 4)]
    poison = events[2]["eventId"]  # the last, so that sending it again later is still in sequence
    apply = EventCommands._apply

    def failing(self: Any, conn: Any, group: Any, caller: Any, cmd: Any) -> Any:
        if cmd.event_id == poison:
            raise RuntimeError("a fault in this one event")
        return apply(self, conn, group, caller, cmd)

    monkeypatch.setattr(EventCommands, "_apply", failing)
    response = http.client.post(
        "/internal/v1/task-events:batch", json={"events": events}, headers=http.auth(ctx["executionToken"])
    )
    assert response.status_code == 200, response.text
    results = {r["eventId"]: r for r in response.json()["results"]}
    assert results[poison]["accepted"] is False
    assert results[poison]["error"]["code"] == "UNAVAILABLE" and results[poison]["error"]["retryable"] is True
    assert all(results[e["eventId"]]["accepted"] for e in events if e["eventId"] != poison)
    monkeypatch.undo()
    # The poison item, sent again once the fault is gone, gets in (same eventId).
    again = http.client.post(
        "/internal/v1/task-events:batch", json={"events": [events[2]]}, headers=http.auth(ctx["executionToken"])
    )
    assert again.json()["results"][0]["accepted"] is True


def test_event_ids_are_scoped_to_the_tenant(http: Http) -> None:
    """Tenant A using an id first (predictable coordinator ids included) never blocks tenant B's event."""
    other = Http(http.client, f"{http.tenant}-b", http.service_tokens, http.user_tokens)
    results = []
    for tenant in (http, other):
        task_id = create_workflow(tenant)["tasks"][0]["taskId"]
        ctx = activate(tenant, task_id)
        results.append(report(tenant, ctx, "STEP_STARTED", 1, eventId="evt-shared-across-tenants"))
    assert [r.status_code for r in results] == [200, 200], [r.text for r in results]
    assert results[0].json()["taskId"] != results[1].json()["taskId"]
    assert not results[1].json().get("duplicate")
    # Inside a tenant, design D8.1 still holds: the same id with other content conflicts.
    task_id = create_workflow(other)["tasks"][0]["taskId"]
    ctx = activate(other, task_id)
    again = report(other, ctx, "STEP_STARTED", 1, eventId="evt-shared-across-tenants")
    assert again.status_code == 409 and again.json()["error"]["code"] == "EVENT_ID_CONFLICT"


def test_an_event_older_than_the_maximum_age_is_refused_with_its_own_code(http: Http) -> None:
    """Its dedup entry may be purged already (retention): accepting it could apply a retry twice."""
    task_id, ctx = _task(http)
    week_ago = (datetime.now(UTC) - timedelta(days=7)).isoformat()
    refused = report(http, ctx, "STEP_STARTED", 1, occurredAt=week_ago)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["code"] == "EVENT_TOO_OLD" and refused.json()["error"]["retryable"] is False
    snap = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    assert snap["lifecycleStatus"] != "RUNNING"  # nothing was applied
    five_days_ago = (datetime.now(UTC) - timedelta(days=5)).isoformat()
    assert report(http, ctx, "STEP_STARTED", 1, occurredAt=five_days_ago).status_code == 200


def test_an_event_from_further_ahead_than_the_tolerated_clock_skew_is_refused_with_its_own_code(http: Http) -> None:
    """The dedup retention argument holds only for events that are not from the future: a producer
    whose clock is years ahead is told so (not retryable), one a little ahead is taken."""
    task_id, ctx = _task(http)
    years_ahead = (datetime.now(UTC) + timedelta(days=3 * 365)).isoformat()
    refused = report(http, ctx, "STEP_STARTED", 1, occurredAt=years_ahead)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["code"] == "EVENT_IN_FUTURE" and refused.json()["error"]["retryable"] is False
    ten_minutes_ahead = (datetime.now(UTC) + timedelta(minutes=10)).isoformat()
    past_the_default = report(http, ctx, "STEP_STARTED", 1, occurredAt=ten_minutes_ahead)
    assert past_the_default.json()["error"]["code"] == "EVENT_IN_FUTURE"  # the default tolerates 5 minutes
    snap = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    assert snap["lifecycleStatus"] != "RUNNING"  # nothing was applied
    a_minute_ahead = (datetime.now(UTC) + timedelta(minutes=1)).isoformat()
    assert report(http, ctx, "STEP_STARTED", 1, occurredAt=a_minute_ahead).status_code == 200


def test_rejections_are_counted_by_operation(http: Http) -> None:
    """design D12: an operation's schema rejections spiking is an alert (OperationRejectionsSpike)."""
    from status.infra.metrics import REGISTRY

    def count() -> float:
        labels = {"operation": "DOCUMENT.PARSE", "code": "SCHEMA_REJECTED"}
        return REGISTRY.get_sample_value("task_status_rejections_by_operation_total", labels) or 0.0

    _, ctx = _task(http)
    assert report(http, ctx, "STEP_STARTED", 1).status_code == 200
    before = count()
    bad = {"schema": "document.parse.progress.v1", "value": {"page": "not a number"}}
    assert report(http, ctx, "STEP_PROGRESS", 2, data=bad).status_code == 422
    assert count() == before + 1


def _heartbeat_seq(service: StatusService, execution_id: str) -> int:
    (row,) = rows_everywhere(
        service, sa.select(t.task_step.c.last_heartbeat_seq).where(t.task_step.c.execution_id == execution_id)
    )
    return int(row[0])


def test_heartbeats_ride_in_an_events_batch_and_are_answered_as_their_own_call(
    http: Http, service: StatusService
) -> None:
    _, ctx = _task(http)
    _, idle = _task(http)  # a running execution with no event in this batch: its heartbeat rides all the same
    assert report(http, idle, "STEP_STARTED", 1).status_code == 200
    body = {
        "events": [event_body("STEP_STARTED", 1, executionHandle=ctx["executionHandle"])],
        "heartbeats": [
            {"executionHandle": ctx["executionHandle"], "heartbeatSeq": 3},
            {"executionHandle": idle["executionHandle"], "heartbeatSeq": 2},
            {"executionHandle": "h" * 40, "heartbeatSeq": 1},  # unknown: refused alone
        ],
    }
    response = http.client.post("/internal/v1/task-events:batch", json=body, headers=http.worker)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert [r["accepted"] for r in answer["results"]] == [True]
    beats = answer["heartbeats"]
    assert [r["accepted"] for r in beats["results"]] == [True, True, False] and beats["receivedAt"]
    assert _heartbeat_seq(service, ctx["executionId"]) == 3 and _heartbeat_seq(service, idle["executionId"]) == 2
    # Heartbeats alone in the batch are a batch too; an empty batch is not.
    alone = {"heartbeats": [{"executionHandle": ctx["executionHandle"], "heartbeatSeq": 4}]}
    response = http.client.post("/internal/v1/task-events:batch", json=alone, headers=http.worker)
    assert response.status_code == 200 and response.json()["results"] == []
    assert _heartbeat_seq(service, ctx["executionId"]) == 4
    empty = http.client.post("/internal/v1/task-events:batch", json={"events": []}, headers=http.worker)
    assert empty.status_code == 422 and empty.json()["error"]["code"] == "VALIDATION_FAILED"
    # Without heartbeats the answer is what it always was.
    plain = {
        "events": [event_body("STEP_PROGRESS", 2, executionHandle=ctx["executionHandle"], progress={"current": 1})]
    }
    response = http.client.post("/internal/v1/task-events:batch", json=plain, headers=http.worker)
    assert response.status_code == 200 and set(response.json()) == {"results"}


def test_heartbeats_in_an_events_batch_need_the_workers_service_token(http: Http, service: StatusService) -> None:
    _, ctx = _task(http)
    body = {
        "events": [event_body("STEP_STARTED", 1)],
        "heartbeats": [{"executionHandle": ctx["executionHandle"], "heartbeatSeq": 5}],
    }
    response = http.client.post("/internal/v1/task-events:batch", json=body, headers=http.auth(ctx["executionToken"]))
    assert response.status_code == 403 and response.json()["error"]["code"] == "PERMISSION_DENIED"
    assert _heartbeat_seq(service, ctx["executionId"]) == 0
    # A service token without WORKER (a coordinator's): refused before anything is applied.
    compact = {**body, "events": [event_body("STEP_STARTED", 1, executionHandle=ctx["executionHandle"])]}
    response = http.client.post("/internal/v1/task-events:batch", json=compact, headers=http.coordinator)
    assert response.status_code == 403 and response.json()["error"]["code"] == "PERMISSION_DENIED"
    assert _heartbeat_seq(service, ctx["executionId"]) == 0
    # Refused as a whole: the event did not land either (a retry sends both again).
    snap = http.client.get(f"/api/tasks/{ctx['taskId']}", headers=http.user("user-1")).json()
    step = next(s for s in snap["steps"] if s["stepId"] == "02_parse")
    assert step["lifecycleStatus"] != "RUNNING"
