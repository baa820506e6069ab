"""Activation (or registration) and the execution's STEP_STARTED commit together."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import pytest
import sqlalchemy as sa

from status.app import commands as c
from status.app.service import StatusService
from status.domain.auth import ServicePrincipal
from status.domain.model import Progress
from status.infra import tables as t
from tests.support.factories import activate, create_task, event, now
from tests.support.flows import now_iso
from tests.support.outbox import publications
from tests.support.shards import engine_for, engines_of, fence_reads


def _started(event_id: str | None = None, seq: int = 1) -> c.StartedEvent:
    return c.StartedEvent(event_id or f"evt-{uuid.uuid4().hex}", now().replace(microsecond=0), seq)


@pytest.fixture
def commits(service: StatusService) -> Any:
    seen: list[int] = []

    def count(conn: Any) -> None:
        seen.append(1)

    engines = engines_of(service).values()
    for engine in engines:
        sa.event.listen(engine, "commit", count)
    yield seen
    for engine in engines:
        sa.event.remove(engine, "commit", count)


def test_activation_with_its_started_event_is_one_commit_and_two_versions(
    service: StatusService, coordinator: ServicePrincipal, commits: list[int]
) -> None:
    task_id = create_task(service, coordinator)
    commits.clear()
    started = _started()
    ctx = activate(service, coordinator, task_id, started=started)
    assert len(commits) == 1
    assert ctx.started is not None and ctx.started["accepted"] and not ctx.started["duplicate"]
    assert int(ctx.started["taskVersion"]) == ctx.task_version + 1  # activation, then STARTED: gap-free
    assert ctx.started["lifecycleStatus"] == "RUNNING"
    # The same request again (a retry after a lost answer): the same binding, the event a duplicate.
    again = activate(service, coordinator, task_id, started=started)
    assert again.execution_id == ctx.execution_id and again.started is not None and again.started["duplicate"]
    # Later events of the execution go on from there.
    claims = service._tokens.verify(ctx.execution_token, service.now())
    done = service.report_event(claims, event("STEP_COMPLETED", 2))
    assert int(done["taskVersion"]) == int(ctx.started["taskVersion"]) + 1


def test_a_refused_started_event_leaves_the_binding_and_says_why(
    service: StatusService, coordinator: ServicePrincipal
) -> None:
    task_id = create_task(service, coordinator)
    ctx = activate(service, coordinator, task_id, started=_started(seq=0))  # sourceSeq must be >= 1
    assert ctx.started is not None and ctx.started["accepted"] is False
    assert ctx.started["error"]["code"] == "VALIDATION_FAILED"
    claims = service._tokens.verify(ctx.execution_token, service.now())
    assert service.report_event(claims, event("STEP_STARTED", 1))["lifecycleStatus"] == "RUNNING"


def test_the_http_api_takes_started_event_on_activation_and_registration(http: Any) -> None:
    from tests.integration.test_http_rules import _agent_task

    policy = {"allowedParentOperations": ["AGENT.RUN"], "allowedChildOperations": ["SEARCH.*"], "maxDynamicSteps": 5}
    task_id, agent = _agent_task(http, policy)
    started = {"eventId": f"evt-{uuid.uuid4().hex}", "occurredAt": now_iso()}
    url = f"/internal/v1/tasks/{task_id}/executions:register"
    register = {
        "clientStepKey": "tool-1",
        "operationCode": "SEARCH.WEB",
        "producerId": "search-service",
        "parentExecutionId": agent["executionId"],
        "startedEvent": started,
    }
    first = http.client.post(url, json=register, headers=http.auth(agent["executionToken"]))
    assert first.status_code == 201, first.text
    assert first.json()["startedEvent"]["accepted"] is True
    assert first.json()["startedEvent"]["lifecycleStatus"] == "RUNNING"
    again = http.client.post(url, json=register, headers=http.auth(agent["executionToken"]))
    assert again.status_code == 200 and again.json()["startedEvent"]["duplicate"] is True
    snapshot = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    assert {s["stepId"]: s["lifecycleStatus"] for s in snapshot["steps"]}["dyn_tool-1"] == "RUNNING"
    # Out of the calendar in UTC: a clear rejection, nothing registered.
    bad = http.client.post(
        url,
        json={
            **register,
            "clientStepKey": "tool-2",
            "startedEvent": {**started, "occurredAt": "0001-01-01T00:30:00+01:00"},
        },
        headers=http.auth(agent["executionToken"]),
    )
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "VALIDATION_FAILED"
    snapshot = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    assert "dyn_tool-2" not in {s["stepId"] for s in snapshot["steps"]}


def _published_versions(service: StatusService, task_id: str) -> list[int]:
    with engine_for(service, task_id).connect() as conn:
        return [p.aggregate_version for p in publications(conn, task_id, projection="USER_SUMMARY")]


def test_the_started_events_messages_carry_the_bindings_state(
    service: StatusService, coordinator: ServicePrincipal
) -> None:
    """One commit, one set of messages: the STARTED's full state (the binding's version is in the timeline)."""
    task_id = create_task(service, coordinator)
    before = _published_versions(service, task_id)
    ctx = activate(service, coordinator, task_id, started=_started())
    assert ctx.started is not None
    assert _published_versions(service, task_id) == [*before, int(ctx.started["taskVersion"])]
    # A retry's notice rides on its binding's messages: those go, ahead of the STARTED's.
    claims = service._tokens.verify(ctx.execution_token, service.now())
    service.report_event(claims, event("STEP_FAILED", 2, error=_error()))
    mark = _published_versions(service, task_id)
    retry = activate(service, coordinator, task_id, attempt=2, started=_started())
    assert retry.started is not None and retry.started["accepted"]
    assert _published_versions(service, task_id) == [*mark, retry.task_version, int(retry.started["taskVersion"])]
    # A refused STARTED wrote nothing: the binding's own messages go.
    other = create_task(service, coordinator)
    refused = activate(service, coordinator, other, started=_started(seq=0))
    assert _published_versions(service, other)[-1] == refused.task_version


def _error() -> Any:
    from status.domain.model import StepError

    return StepError("DEPENDENCY", "OCR_DOWN", "The OCR service is down", True, None)


def test_a_binding_with_its_started_event_writes_each_row_once(
    service: StatusService, coordinator: ServicePrincipal
) -> None:
    """The binding's writes and the STARTED's are one set: each table written once, step and task rows
    carrying the final state."""
    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(" ".join(statement.split()[:3]).upper())

    activate(service, coordinator, create_task(service, coordinator), started=_started())  # its operation is frozen
    task_id = create_task(service, coordinator)
    activate(service, coordinator, task_id, "01_prepare", started=_started())  # the task's state is cached now
    engine = engine_for(service, task_id)
    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        activate(service, coordinator, task_id, started=_started())
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    writes = [s for s in statements if s.split()[0] in ("INSERT", "UPDATE")]
    assert len(writes) == len(set(writes)), statements  # no table written twice
    # the lock, the dedup probe (and, on a shard, its write fence)
    assert sum(s.startswith("SELECT") for s in statements) == 2 + fence_reads(service), statements
    # lock + probe; step, task; event log (both entries), dedup, feed, outbox; the handle
    assert len([s for s in statements if not s.startswith("BEGIN")]) == 9 + fence_reads(service), statements


def _bind_item(task_id: str, step_id: str, started: dict[str, Any] | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"taskId": task_id, "stepId": step_id, "attempt": 1, "producerId": "document-parser"}
    if started is not None:
        item["startedEvent"] = started
    return {"activate": item}


def _started_json() -> dict[str, Any]:
    return {"eventId": f"evt-{uuid.uuid4().hex}", "occurredAt": now_iso()}


def test_a_batch_of_bindings_is_one_transaction_and_each_item_gets_its_own_answer(
    http: Any, service: StatusService
) -> None:
    from tests.support.flows import create_workflow

    tasks = [create_workflow(http)["tasks"][0]["taskId"] for _ in range(3)]
    items = [
        _bind_item(tasks[0], "02_parse", _started_json()),
        _bind_item(tasks[0], "01_prepare", _started_json()),  # two bindings of one task: in order, gap-free
        _bind_item(tasks[1], "02_parse", _started_json()),
        _bind_item(tasks[2], "no_such_step", _started_json()),  # refused alone
        _bind_item(tasks[2], "02_parse"),  # no STARTED: bound, still PENDING
    ]
    commits: list[int] = []

    def count(conn: Any) -> None:
        commits.append(1)

    engines = engines_of(service).values()
    for engine in engines:
        sa.event.listen(engine, "commit", count)
    try:
        answer = http.client.post("/internal/v1/executions:bind", json={"items": items}, headers=http.coordinator)
    finally:
        for engine in engines:
            sa.event.remove(engine, "commit", count)
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert len(commits) == len({engine_for(service, task_id) for task_id in tasks})  # one per shard
    assert [r["status"] for r in results] == [201, 201, 201, 404, 201]
    assert results[3]["error"]["code"] == "UNKNOWN_STEP"
    assert all(r["startedEvent"]["accepted"] for r in results[:3]) and "startedEvent" not in results[4]
    first, second = (int(r["startedEvent"]["taskVersion"]) for r in results[:2])
    assert second == first + 2  # the second binding and its STARTED came after the first's
    timeline = http.client.get(f"/api/tasks/{tasks[0]}/events", headers=http.user("user-1")).json()["events"]
    versions = [int(e["taskVersion"]) for e in timeline]
    assert versions == list(range(versions[0], versions[0] + len(versions)))
    snapshot = http.client.get(f"/api/tasks/{tasks[2]}", headers=http.user("user-1")).json()
    assert {s["stepId"]: s["lifecycleStatus"] for s in snapshot["steps"]}["02_parse"] == "PENDING"
    # The same batch again (a lost answer): the same executions, the STARTEDs duplicates.
    again = http.client.post("/internal/v1/executions:bind", json={"items": items}, headers=http.coordinator).json()
    assert [r["status"] for r in again["results"]] == [200, 200, 200, 404, 200]
    assert [r.get("executionId") for r in again["results"]] == [r.get("executionId") for r in results]
    assert all(r["startedEvent"]["duplicate"] for r in again["results"][:3])


def test_a_batch_of_bindings_costs_the_same_statements_for_2_or_8_bindings(
    service: StatusService, coordinator: ServicePrincipal
) -> None:
    def batch(n: int) -> list[str]:
        tasks = [create_task(service, coordinator) for _ in range(n)]
        for task_id in tasks:  # cached, as in steady state
            activate(service, coordinator, task_id, "01_prepare", started=_started())
        items = [
            (
                coordinator,
                c.ActivateStep(
                    task_id,
                    "02_parse",
                    1,
                    "document-parser",
                    started=_started(),
                    # The Temporal activity behind each: one multi-row write for all of them.
                    temporal_activity=c.TemporalActivity("default", f"wf-{task_id}", "run-1", "2"),
                ),
            )
            for task_id in tasks
        ]
        seen: list[str] = []

        def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            seen.append(statement.split()[0].upper())

        engine = engine_for(service, tasks[0])  # one owner's: all on one shard
        sa.event.listen(engine, "before_cursor_execute", record)
        try:
            outcomes = service.bind_executions(items)
        finally:
            sa.event.remove(engine, "before_cursor_execute", record)
        assert all(not isinstance(o, BaseException) and o.started and o.started["accepted"] for o in outcomes), outcomes
        executions = [o.execution_id for o in outcomes if not isinstance(o, BaseException)]
        with engine.connect() as conn:
            recorded = conn.execute(
                sa.select(t.task_step_temporal.c.execution_id, t.task_step_temporal.c.workflow_id).where(
                    t.task_step_temporal.c.execution_id.in_(executions)
                )
            ).all()
        assert sorted(w for _, w in recorded) == sorted(f"wf-{task_id}" for task_id in tasks)
        return seen

    batch(1)  # the operation's definition is frozen once
    assert batch(2) == batch(8)


def test_a_poison_binding_does_not_take_its_neighbours_down(
    service: StatusService, coordinator: ServicePrincipal, monkeypatch: pytest.MonkeyPatch
) -> None:
    from status.app.executions import ExecutionCommands

    tasks = [create_task(service, coordinator) for _ in range(3)]
    original = ExecutionCommands._stage_activation

    def poisoned(self: Any, uow: Any, group: Any, view: Any, now: Any, caller: Any, cmd: Any) -> Any:
        if cmd.task_id == tasks[1]:
            raise RuntimeError("a fault of ours, for this item only")
        return original(self, uow, group, view, now, caller, cmd)

    monkeypatch.setattr(ExecutionCommands, "_stage_activation", poisoned)
    items = [(coordinator, c.ActivateStep(t, "02_parse", 1, "document-parser", started=_started())) for t in tasks]
    outcomes = service.bind_executions(items)
    assert isinstance(outcomes[1], RuntimeError)
    for outcome in (outcomes[0], outcomes[2]):
        assert not isinstance(outcome, BaseException) and outcome.started and outcome.started["accepted"]
    monkeypatch.undo()
    # Nothing of the failed group stayed behind: the neighbours are bound once (a replay is idempotent).
    again = service.bind_executions(items)
    assert [o.created for o in again if not isinstance(o, BaseException)] == [False, True, False]


def test_a_binding_carries_its_executions_events_in_its_one_commit(
    service: StatusService, coordinator: ServicePrincipal, commits: list[int]
) -> None:
    """A short activity's whole report — binding, STARTED, progress, ending — is one transaction,
    each event answered for itself, in order, gap-free."""
    task_id = create_task(service, coordinator)
    riding = (event("STEP_PROGRESS", 2, progress=Progress(1, 2, "page")), event("STEP_COMPLETED", 3))
    commits.clear()
    ctx = activate(service, coordinator, task_id, started=_started(), events=riding)
    assert len(commits) == 1
    assert ctx.started is not None and [a["accepted"] for a in ctx.events] == [True, True]
    versions = [int(ctx.started["taskVersion"]), *(int(a["taskVersion"]) for a in ctx.events)]
    assert versions == [ctx.task_version + 1, ctx.task_version + 2, ctx.task_version + 3]
    assert [a["lifecycleStatus"] for a in ctx.events] == ["RUNNING", "SUCCEEDED"]
    # Sent again (a lost answer): the same execution, every event a duplicate, nothing new.
    again = activate(service, coordinator, task_id, started=_started(ctx.started["eventId"]), events=riding)
    assert again.execution_id == ctx.execution_id and all(a["duplicate"] for a in again.events)
    # A refusal is that event's own: the binding and the events before it stand.
    other = create_task(service, coordinator)
    mixed = (event("STEP_PROGRESS", 2), event("TASK_COMPLETED", 3), event("STEP_FAILED", 1, error=_error()))
    refused = activate(service, coordinator, other, started=_started(), events=mixed)
    assert [a["accepted"] for a in refused.events] == [True, False, False]
    assert refused.events[1]["error"]["code"] == "EVENT_TYPE_NOT_ALLOWED"  # not an execution's event
    assert refused.events[2]["error"]["code"] == "SOURCE_SEQ_REGRESSION"  # older than what was applied
    assert refused.started is not None and refused.started["accepted"]


def test_a_pass_of_a_worker_is_one_request(http: Any) -> None:
    """Bindings with their events, then the events of executions bound before, in one events batch;
    each answered as its own call would be."""
    from tests.support.flows import activate as activate_http
    from tests.support.flows import create_workflow, event_body

    tasks = [create_workflow(http)["tasks"][0]["taskId"] for _ in range(2)]
    earlier = activate_http(http, tasks[1])
    short = {
        "taskId": tasks[0],
        "stepId": "02_parse",
        "attempt": 1,
        "producerId": "document-parser",
        "startedEvent": _started_json(),
        "events": [event_body("STEP_COMPLETED", 2)],
    }
    body = {
        "bindings": [{"activate": short}, _bind_item(tasks[0], "no_such_step", _started_json())],
        "events": [event_body("STEP_STARTED", 1, executionHandle=earlier["executionHandle"])],
    }
    worker = http.auth(http.service_token("document-parser", "WORKER", "COORDINATOR"))  # a plugin's credential
    counted = _accepted_over_http()
    answer = http.client.post("/internal/v1/task-events:batch", json=body, headers=worker)
    assert answer.status_code == 200, answer.text
    assert _accepted_over_http() == counted + 3  # the STARTED and COMPLETED that rode, the batch's own event
    bound, unknown = answer.json()["bindings"]
    assert bound["status"] == 201 and bound["startedEvent"]["accepted"]
    assert [e["lifecycleStatus"] for e in bound["events"]] == ["SUCCEEDED"]
    assert unknown["status"] == 404 and unknown["error"]["code"] == "UNKNOWN_STEP"
    assert [r["lifecycleStatus"] for r in answer.json()["results"]] == ["RUNNING"]
    steps = {
        task_id: {
            s["stepId"]: s["lifecycleStatus"]
            for s in http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()["steps"]
        }
        for task_id in tasks
    }
    assert steps[tasks[0]]["02_parse"] == "SUCCEEDED" and steps[tasks[1]]["02_parse"] == "RUNNING"
    # An event sent with its binding names no handle (the binding says whose it is): the whole
    # request is refused, nothing applied.
    third = create_workflow(http)["tasks"][0]["taskId"]
    wrong = {
        **short,
        "taskId": third,
        "events": [event_body("STEP_COMPLETED", 2, executionHandle=earlier["executionHandle"])],
    }
    refused = http.client.post(
        "/internal/v1/task-events:batch", json={"bindings": [{"activate": wrong}]}, headers=worker
    )
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "VALIDATION_FAILED"
    assert "bindings.0.activate.events" in refused.json()["error"]["message"]
    snapshot = http.client.get(f"/api/tasks/{third}", headers=http.user("user-1")).json()
    assert {s["stepId"]: s["lifecycleStatus"] for s in snapshot["steps"]}["02_parse"] == "PENDING"


def _accepted_over_http() -> float:
    from status.api.metrics import REGISTRY

    sample = REGISTRY.get_sample_value(
        "task_status_events_total", {"result": "accepted", "code": "", "transport": "http"}
    )
    return sample or 0.0


def test_an_execution_ended_by_what_rode_with_its_binding_has_its_handle_revoked(
    service: StatusService, coordinator: ServicePrincipal, worker: ServicePrincipal
) -> None:
    """A handle outlives nothing it names: an execution ended in its binding's own transaction is
    revoked as one ended through its handle is, so a report sent later with it is refused alike."""
    answers = []
    for riding in (True, False):
        task_id = create_task(service, coordinator)
        ending = event("STEP_COMPLETED", 2)
        ctx = activate(service, coordinator, task_id, started=_started(), events=(ending,) if riding else ())
        if not riding:
            (done,) = service.report_events(worker, [replace(ending, execution_handle=ctx.execution_handle)])
            assert done["accepted"], done
        late = event("STEP_PROGRESS", 3, execution_handle=ctx.execution_handle)
        (answer,) = service.report_events(worker, [late])
        answers.append((answer["accepted"], answer["error"]["code"]))
    assert answers == [(False, "TOKEN_REVOKED")] * 2
