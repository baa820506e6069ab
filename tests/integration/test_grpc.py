"""The gRPC adapter (task_status_wire/task_events.proto): one set of semantics with REST.

The same eventId gets the same result and taskVersion over REST, REST batch and gRPC (unary,
batch and stream); rejections carry the same stable codes; a batch of bindings is answered as
REST's executions:bind answers it; a stream binds executions to short numbers that never outlive it.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import grpc
import pytest
import structlog
from starlette.testclient import TestClient
from task_status_wire import convert
from task_status_wire import task_events_pb2 as pb
from task_status_wire import task_events_pb2_grpc as pb_grpc

from status.api.grpc_server import start_grpc_server
from tests.integration.conftest import Http
from tests.support.flows import activate, create_workflow


@pytest.fixture
async def stub(app_client: TestClient) -> AsyncIterator[pb_grpc.TaskEventsStub]:
    server, port = await start_grpc_server(
        app_client.app.state.api.gate,  # type: ignore[attr-defined]
        app_client.app.state.api.grpc_committer,  # type: ignore[attr-defined]
        app_client.app.state.api.changes,  # type: ignore[attr-defined]
        "127.0.0.1",
        0,
    )
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield pb_grpc.TaskEventsStub(channel)
    finally:
        await channel.close()
        await server.stop(grace=None)


def _meta(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def _body(event_type: str, seq: int, **fields: Any) -> dict[str, Any]:
    return {
        "eventId": fields.pop("eventId", f"evt-{uuid.uuid4().hex}"),
        "eventType": event_type,
        "sourceSeq": seq,
        "occurredAt": datetime.now(UTC).isoformat(),
        **fields,
    }


def _semantic(result: dict[str, Any]) -> dict[str, Any]:
    """A result without the flag that says whether this copy was the first."""
    return {k: v for k, v in result.items() if k != "duplicate"}


async def test_the_same_event_id_gets_the_same_result_over_rest_batch_and_grpc(
    http: Http, stub: pb_grpc.TaskEventsStub
) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    ctx = activate(http, task_id)
    token = ctx["executionToken"]
    started = _body("STEP_STARTED", 1)
    progress = _body("STEP_PROGRESS", 2, progress={"current": 3, "total": 8, "unit": "page"}, phaseLabel="page 3")
    # First over gRPC (unary), then the same eventId over REST, REST batch, gRPC batch.
    first = convert.result_to_json(await stub.ReportEvent(convert.event_from_json(started), metadata=_meta(token)))
    assert first["accepted"] is True and first["duplicate"] is False
    rest = http.client.post("/internal/v1/task-events", json=started, headers=http.auth(token)).json()
    rest_batch = http.client.post(
        "/internal/v1/task-events:batch", json={"events": [started]}, headers=http.auth(token)
    ).json()["results"][0]
    grpc_batch = await stub.ReportEvents(
        pb.EventBatch(events=[convert.event_from_json(started)]), metadata=_meta(token)
    )
    for again in (rest, rest_batch, convert.result_to_json(grpc_batch.results[0])):
        assert again["duplicate"] is True
        assert _semantic(again) == _semantic(first)
    # The other way round: first over REST, then gRPC (unary and batch) answer with its result.
    over_rest = http.client.post("/internal/v1/task-events", json=progress, headers=http.auth(token)).json()
    assert over_rest["accepted"] is True and int(over_rest["taskVersion"]) == int(first["taskVersion"]) + 1
    unary = convert.result_to_json(await stub.ReportEvent(convert.event_from_json(progress), metadata=_meta(token)))
    batch = await stub.ReportEvents(pb.EventBatch(events=[convert.event_from_json(progress)]), metadata=_meta(token))
    for again in (unary, convert.result_to_json(batch.results[0])):
        assert again["duplicate"] is True and _semantic(again) == _semantic(over_rest)
    # The same eventId with other content is the same conflict on both transports.
    clash = {**progress, "phaseLabel": "page 4"}
    rest_clash = http.client.post("/internal/v1/task-events", json=clash, headers=http.auth(token))
    assert rest_clash.status_code == 409 and rest_clash.json()["error"]["code"] == "EVENT_ID_CONFLICT"
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.ReportEvent(convert.event_from_json(clash), metadata=_meta(token))
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert dict(refused.value.trailing_metadata() or ())["task-status-error-code"] == "EVENT_ID_CONFLICT"
    # And the snapshot saw each event once.
    snap = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    assert snap["taskVersion"] == over_rest["taskVersion"]
    parse = next(s for s in snap["steps"] if s["stepId"] == "02_parse")
    assert parse["progress"]["current"] == 3 and parse["phaseLabel"] == "page 3"


async def test_rejections_keep_their_stable_codes_over_grpc(http: Http, stub: pb_grpc.TaskEventsStub) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    ctx = activate(http, task_id)
    token = ctx["executionToken"]

    async def refusal(event: pb.Event, metadata: Any) -> tuple[grpc.StatusCode, str]:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ReportEvent(event, metadata=metadata)
        return info.value.code(), dict(info.value.trailing_metadata() or ()).get("task-status-error-code", "")

    ok = convert.event_from_json(_body("STEP_STARTED", 1))
    assert await refusal(ok, ()) == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
    assert await refusal(ok, _meta("not-a-token")) == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
    unknown_type = convert.event_from_json(_body("STEP_EXPLODED", 1))
    assert await refusal(unknown_type, _meta(token)) == (grpc.StatusCode.INVALID_ARGUMENT, "VALIDATION_FAILED")
    not_json = convert.event_from_json(_body("STEP_STARTED", 1))
    not_json.data.schema = "x.v1"
    not_json.data.value_json = "{not json"
    assert await refusal(not_json, _meta(token)) == (grpc.StatusCode.INVALID_ARGUMENT, "VALIDATION_FAILED")
    too_long = convert.event_from_json(_body("STEP_STARTED", 1, phaseLabel="x" * 500))
    assert await refusal(too_long, _meta(token)) == (grpc.StatusCode.INVALID_ARGUMENT, "VALIDATION_FAILED")
    assert (await stub.ReportEvent(ok, metadata=_meta(token))).accepted
    regress = convert.event_from_json(_body("STEP_PROGRESS", 1))
    assert await refusal(regress, _meta(token)) == (grpc.StatusCode.FAILED_PRECONDITION, "SOURCE_SEQ_REGRESSION")
    other_producer = convert.event_from_json(_body("STEP_PROGRESS", 5, producerId="someone-else"))
    assert await refusal(other_producer, _meta(token)) == (grpc.StatusCode.PERMISSION_DENIED, "PRODUCER_MISMATCH")
    # In a batch, each item is decided on its own, with the REST codes.
    batch = await stub.ReportEvents(
        pb.EventBatch(events=[regress, convert.event_from_json(_body("STEP_PROGRESS", 6))]), metadata=_meta(token)
    )
    assert [r.accepted for r in batch.results] == [False, True]
    assert batch.results[0].error.code == "SOURCE_SEQ_REGRESSION"


async def test_a_stream_binds_short_numbers_that_die_with_it(http: Http, stub: pb_grpc.TaskEventsStub) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    ctx = activate(http, task_id)
    worker = _meta(http.service_token("document-parser", "WORKER"))

    def event(request_id: int, ref: int, event_type: str, seq: int, **fields: Any) -> pb.StreamRequest:
        compact = convert.event_from_json(_body(event_type, seq, **fields))
        return pb.StreamRequest(request_id=request_id, event=pb.StreamEvent(ref=ref, event=compact))

    requests = [
        pb.StreamRequest(request_id=1, bind=pb.Bind(execution_token=ctx["executionToken"])),
        event(2, 1, "STEP_STARTED", 1),
        event(3, 1, "STEP_PROGRESS", 2, progress={"current": 1, "total": 4}),
        pb.StreamRequest(request_id=4, heartbeat=pb.StreamHeartbeat(ref=1, heartbeat_seq=1)),
        event(5, 9, "STEP_PROGRESS", 3),
    ]
    responses = [r async for r in stub.Stream(iter(requests), metadata=worker)]
    assert [r.request_id for r in responses] == [1, 2, 3, 4, 5]
    assert responses[0].bound.ref == 1 and responses[0].bound.execution_id == ctx["executionId"]
    assert responses[1].event.accepted and responses[2].event.accepted
    assert int(responses[2].event.task_version) == int(responses[1].event.task_version) + 1
    assert responses[3].heartbeat.accepted and responses[3].heartbeat.execution_id == ctx["executionId"]
    assert responses[4].error.code == "NOT_FOUND"  # never bound on this stream
    # A new stream (a reconnect) knows no numbers: the execution must be bound again.
    again = [
        event(1, 1, "STEP_PROGRESS", 3, progress={"current": 2, "total": 4}),
        pb.StreamRequest(request_id=2, bind=pb.Bind(execution_token=ctx["executionToken"])),
        event(3, 1, "STEP_PROGRESS", 3, progress={"current": 2, "total": 4}),
    ]
    responses = [r async for r in stub.Stream(iter(again), metadata=worker)]
    assert responses[0].error.code == "NOT_FOUND" and "bind" in responses[0].error.message
    assert responses[1].bound.ref == 1 and responses[2].event.accepted
    snap = http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json()
    assert next(s for s in snap["steps"] if s["stepId"] == "02_parse")["progress"]["current"] == 2
    # A rejected event comes back as its result and the stream goes on; binding takes execution tokens only.
    more = [
        pb.StreamRequest(request_id=1, bind=pb.Bind(execution_token=ctx["executionToken"])),
        event(2, 1, "STEP_PROGRESS", 2),  # sourceSeq 2 was taken above
        pb.StreamRequest(request_id=3, bind=pb.Bind(execution_token=http.service_token("x", "WORKER"))),
        pb.StreamRequest(request_id=4, bind=pb.Bind(execution_token="garbage")),
        event(5, 1, "STEP_PROGRESS", 4, progress={"current": 3, "total": 4}),
    ]
    responses = [r async for r in stub.Stream(iter(more), metadata=worker)]
    assert not responses[1].event.accepted and responses[1].event.error.code == "SOURCE_SEQ_REGRESSION"
    assert responses[2].error.code == "VALIDATION_FAILED" and responses[3].error.code == "UNAUTHENTICATED"
    assert responses[4].event.accepted
    # Streams need a WORKER service token.
    coordinator = _meta(http.service_token("coordinator-1", "COORDINATOR"))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        _ = [r async for r in stub.Stream(iter(requests[:1]), metadata=coordinator)]
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_heartbeat_batches_over_grpc(http: Http, stub: pb_grpc.TaskEventsStub) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    ctx = activate(http, task_id)
    assert (
        http.client.post(
            "/internal/v1/task-events", json=_body("STEP_STARTED", 1), headers=http.auth(ctx["executionToken"])
        ).status_code
        == 200
    )
    worker = _meta(http.service_token("document-parser", "WORKER"))
    beats = pb.HeartbeatBatch(
        heartbeats=[
            convert.heartbeat_from_json({"heartbeatSeq": 1, "executionHandle": ctx["executionHandle"]}),
            convert.heartbeat_from_json({"heartbeatSeq": 1, "executionHandle": "no-such-handle-123"}),
        ]
    )
    result = await stub.RecordHeartbeats(beats, metadata=worker)
    assert [r.accepted for r in result.results] == [True, False] and result.received_at


async def test_heartbeats_ride_in_an_events_batch_over_grpc(http: Http, stub: pb_grpc.TaskEventsStub) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    ctx = activate(http, task_id)
    started = convert.event_from_json(_body("STEP_STARTED", 1, executionHandle=ctx["executionHandle"]))
    beat = convert.heartbeat_from_json({"heartbeatSeq": 2, "executionHandle": ctx["executionHandle"]})
    worker = _meta(http.service_token("document-parser", "WORKER"))
    reply = await stub.ReportEvents(pb.EventBatch(events=[started], heartbeats=[beat]), metadata=worker)
    assert [r.accepted for r in reply.results] == [True]
    assert reply.HasField("heartbeats") and [r.accepted for r in reply.heartbeats.results] == [True]
    plain = await stub.ReportEvents(pb.EventBatch(events=[started]), metadata=worker)
    assert plain.results[0].duplicate and not plain.HasField("heartbeats")
    # As on REST: an execution's own token carries no worker's heartbeats, and an empty batch is no batch.
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.ReportEvents(
            pb.EventBatch(events=[started], heartbeats=[beat]), metadata=_meta(ctx["executionToken"])
        )
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.aio.AioRpcError) as empty:
        await stub.ReportEvents(pb.EventBatch(), metadata=worker)
    assert dict(empty.value.trailing_metadata() or ())["task-status-error-code"] == "VALIDATION_FAILED"


async def _open_stream(stub: pb_grpc.TaskEventsStub, token: str) -> tuple[Any, Any]:
    """A stream fed one request at a time: (send, the call)."""
    import asyncio

    queue: asyncio.Queue[pb.StreamRequest | None] = asyncio.Queue()

    async def requests() -> AsyncIterator[pb.StreamRequest]:
        while (item := await queue.get()) is not None:
            yield item

    call = stub.Stream(requests(), metadata=_meta(token))
    return queue, call


async def test_a_stream_stops_when_its_credential_is_revoked(
    http: Http, stub: pb_grpc.TaskEventsStub, engine: Any
) -> None:
    """REST refuses a revoked credential within seconds; an open stream must stop with it."""
    import time

    from status.infra.tokens import RevokedCredentials

    task_id = create_workflow(http)["tasks"][0]["taskId"]
    ctx = activate(http, task_id)
    token = http.service_token("document-parser", "WORKER")
    queue, call = await _open_stream(stub, token)
    await queue.put(pb.StreamRequest(request_id=1, bind=pb.Bind(execution_token=ctx["executionToken"])))
    assert (await call.read()).bound.ref == 1
    RevokedCredentials.revoke(engine, token, "rotated")
    beat = {"executionHandle": ctx["executionHandle"], "heartbeatSeq": 1}
    deadline = time.monotonic() + 20
    while (
        http.client.post(
            "/internal/v1/task-heartbeats:batch", json={"heartbeats": [beat]}, headers=http.auth(token)
        ).status_code
        != 401
    ):
        assert time.monotonic() < deadline, "REST never refused the revoked credential"
    # Now the stream, opened before the revocation, refuses too: heartbeats and new binds alike.
    await queue.put(pb.StreamRequest(request_id=2, heartbeat=pb.StreamHeartbeat(ref=1, heartbeat_seq=2)))
    with pytest.raises(grpc.aio.AioRpcError) as stopped:
        await call.read()
    assert stopped.value.code() == grpc.StatusCode.UNAUTHENTICATED
    await queue.put(None)


async def test_an_execution_token_that_expires_on_a_stream_is_refused_as_on_rest(
    http: Http, stub: pb_grpc.TaskEventsStub, app_client: TestClient
) -> None:
    import asyncio
    import dataclasses
    from datetime import timedelta

    task_id = create_workflow(http)["tasks"][0]["taskId"]
    ctx = activate(http, task_id)
    service = app_client.app.state.api.service  # type: ignore[attr-defined]
    claims = service._tokens.verify(ctx["executionToken"], service.now())
    soon = service.now().replace(microsecond=0) + timedelta(seconds=2)
    short = service._tokens.issue(dataclasses.replace(claims, expires_at=soon))
    queue, call = await _open_stream(stub, http.service_token("document-parser", "WORKER"))
    await queue.put(pb.StreamRequest(request_id=1, bind=pb.Bind(execution_token=short)))
    assert (await call.read()).bound.ref == 1
    started = convert.event_from_json(_body("STEP_STARTED", 1))
    await queue.put(pb.StreamRequest(request_id=2, event=pb.StreamEvent(ref=1, event=started)))
    assert (await call.read()).event.accepted
    while service.now() <= soon:  # the token's own expiry: a moment on the clock, not an event
        await asyncio.sleep(0.1)
    progress = convert.event_from_json(_body("STEP_PROGRESS", 2, progress={"current": 1}))
    await queue.put(pb.StreamRequest(request_id=3, event=pb.StreamEvent(ref=1, event=progress)))
    refused = await call.read()
    assert refused.error.code == "TOKEN_EXPIRED"
    rest = http.client.post(
        "/internal/v1/task-events", json=_body("STEP_PROGRESS", 2, progress={"current": 1}), headers=http.auth(short)
    )
    assert rest.status_code == 403 and rest.json()["error"]["code"] == "TOKEN_EXPIRED"
    await queue.put(None)


# What a binding's answer carries per call: a fresh handle and token, and the versions of then.
_PER_CALL = ("status", "created", "executionHandle", "executionToken", "expiresAt", "taskVersion", "stepVersion")


def _shown(result: dict[str, Any]) -> dict[str, Any]:
    """A binding's answer without what each call hands out anew, and without REST's nulls (the
    protobuf mapping leaves an unset field out); its STARTED's without whether it was the first."""
    shown = {k: v for k, v in result.items() if v is not None and k not in _PER_CALL}
    if "startedEvent" in shown:
        started = _semantic(shown["startedEvent"])
        shown["startedEvent"] = {k: v for k, v in started.items() if v is not None and k not in _PER_CALL}
    return shown


async def test_bindings_over_grpc_answer_as_rest_executions_bind(http: Http, stub: pb_grpc.TaskEventsStub) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    other = create_workflow(http)["tasks"][0]["taskId"]
    started = {"eventId": f"evt-{uuid.uuid4().hex}", "occurredAt": datetime.now(UTC).isoformat(), "sourceSeq": 1}
    items = [
        {
            "activate": {
                "taskId": task_id,
                "stepId": "02_parse",
                "attempt": 1,
                "producerId": "document-parser",
                "heartbeatTimeoutSeconds": 60,
                "temporalActivity": {"namespace": "default", "workflowId": "wf-1", "runId": "run-1", "activityId": "1"},
                "startedEvent": started,
            }
        },
        {"activate": {"taskId": task_id, "stepId": "99_missing", "attempt": 1, "producerId": "document-parser"}},
        {
            "register": {
                "taskId": other,
                "clientStepKey": "page-1",
                "operationCode": "PAGE.OCR",
                "producerId": "document-parser",
            }
        },
    ]
    reply = await stub.BindExecutions(
        convert.bind_batch_from_json({"items": items}),
        metadata=_meta(http.service_token("document-parser", "COORDINATOR", "WORKER")),
    )
    over_grpc = [convert.bind_result_to_json(r) for r in reply.results]
    response = http.client.post(
        "/internal/v1/executions:bind",
        json={"items": items},
        headers=http.auth(http.service_token("document-parser", "COORDINATOR", "WORKER")),
    )
    assert response.status_code == 200, response.text
    over_rest = response.json()["results"]
    assert [r["status"] for r in over_grpc] == [201, 404, over_rest[2]["status"]]
    assert [r["status"] for r in over_rest] == [200, 404, over_grpc[2]["status"]]  # the same binding, again
    assert over_grpc[0]["startedEvent"]["accepted"] and over_rest[0]["startedEvent"]["duplicate"]
    assert [_shown(r) for r in over_grpc] == [_shown(r) for r in over_rest]
    assert over_grpc[1]["error"]["code"] == "UNKNOWN_STEP"
    # What the service refuses as a whole is refused alike, with the stable code in the metadata.
    worker = _meta(http.service_token("document-parser", "WORKER"))
    for malformed in (pb.BindBatch(), pb.BindBatch(items=[pb.BindItem()])):  # nothing; an item of no kind
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.BindExecutions(malformed, metadata=worker)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert dict(refused.value.trailing_metadata() or ())["task-status-error-code"] == "VALIDATION_FAILED"
    with pytest.raises(grpc.aio.AioRpcError) as anonymous:
        await stub.BindExecutions(convert.bind_batch_from_json({"items": items[:1]}))
    assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_a_pass_over_grpc_binds_with_the_events_and_answers_as_rest(
    http: Http, stub: pb_grpc.TaskEventsStub
) -> None:
    """ReportEvents with bindings: each bound first with its own events, then the batch's events,
    each answered as the same request over REST answers it."""
    credential = http.service_token("document-parser", "COORDINATOR", "WORKER")
    answers = []
    for over in ("grpc", "rest"):
        tasks = [create_workflow(http)["tasks"][0]["taskId"] for _ in range(2)]
        earlier = activate(http, tasks[1])
        short = {
            "taskId": tasks[0],
            "stepId": "02_parse",
            "attempt": 1,
            "producerId": "document-parser",
            "startedEvent": {"eventId": f"evt-{uuid.uuid4().hex}", "occurredAt": datetime.now(UTC).isoformat()},
            "events": [_body("STEP_PROGRESS", 2, progress={"current": 1}), _body("STEP_COMPLETED", 3)],
        }
        body = {
            "bindings": [{"activate": short}, {"activate": {**short, "stepId": "99_missing", "events": []}}],
            "events": [_body("STEP_STARTED", 1, executionHandle=earlier["executionHandle"])],
        }
        if over == "grpc":
            reply = await stub.ReportEvents(
                pb.EventBatch(
                    bindings=convert.bind_items_from_json(body["bindings"]),
                    events=[convert.event_from_json(e) for e in body["events"]],
                ),
                metadata=_meta(credential),
            )
            bound = [convert.bind_result_to_json(r) for r in reply.bindings]
            results = [convert.result_to_json(r) for r in reply.results]
        else:
            response = http.client.post("/internal/v1/task-events:batch", json=body, headers=http.auth(credential))
            assert response.status_code == 200, response.text
            bound, results = response.json()["bindings"], response.json()["results"]
        assert [b["status"] for b in bound] == [201, 404]
        assert [e["lifecycleStatus"] for e in bound[0]["events"]] == ["RUNNING", "SUCCEEDED"]
        assert [r["lifecycleStatus"] for r in results] == ["RUNNING"]
        answers.append([_outline(b) for b in bound] + [_outline(r) for r in results])
    assert answers[0] == answers[1]


def _outline(answer: dict[str, Any]) -> Any:
    """What an answer decided, without the ids and times of its own call."""
    if "status" not in answer:  # an event's
        return answer["accepted"], answer.get("lifecycleStatus"), (answer.get("error") or {}).get("code")
    started = answer.get("startedEvent")
    return (
        answer["status"],
        (answer.get("error") or {}).get("code"),
        None if started is None else _outline(started),
        [_outline(e) for e in answer.get("events", [])],
    )


async def test_a_batch_refused_for_its_riding_heartbeat_commits_none_of_its_events_over_grpc(
    http: Http, stub: pb_grpc.TaskEventsStub
) -> None:
    """As on REST: the whole batch is parsed before any of it is applied."""
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    ctx = activate(http, task_id)

    def snapshot() -> dict[str, Any]:
        return dict(http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json())

    before = snapshot()
    started = convert.event_from_json(_body("STEP_STARTED", 1, executionHandle=ctx["executionHandle"]))
    beat = convert.heartbeat_from_json(
        {"heartbeatSeq": 1, "executionHandle": ctx["executionHandle"], "observedAt": "0999-06-01T00:00:00Z"}
    )
    worker = _meta(http.service_token("document-parser", "WORKER"))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.ReportEvents(pb.EventBatch(events=[started], heartbeats=[beat]), metadata=worker)
    assert dict(refused.value.trailing_metadata() or ())["task-status-error-code"] == "VALIDATION_FAILED"
    after = snapshot()
    assert after["taskVersion"] == before["taskVersion"] and after["steps"] == before["steps"]


def _count(name: str, **labels: str) -> float:
    from status.infra.metrics import REGISTRY

    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_grpc_is_counted_timed_and_logged_as_rest_is(
    http: Http, stub: pb_grpc.TaskEventsStub, app_client: TestClient
) -> None:
    """Issue 29 item 6: every metric and the change log see gRPC as they see REST (transport label)."""
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    ctx = activate(http, task_id)
    token = ctx["executionToken"]
    operation = ctx["operationCode"]
    before = {
        "accepted": _count("task_status_events_total", result="accepted", code="", transport="grpc"),
        "rejected": _count(
            "task_status_events_total", result="rejected", code="SOURCE_SEQ_REGRESSION", transport="grpc"
        ),
        "single": _count("task_status_ingest_seconds_count", transport="grpc", shape="single"),
        "batch": _count("task_status_ingest_seconds_count", transport="grpc", shape="batch"),
        "beats": _count("task_status_heartbeats_total", result="accepted", transport="grpc"),
        "by_op": _count("task_status_rejections_by_operation_total", operation=operation, code="SOURCE_SEQ_REGRESSION"),
        "failed": _count("task_status_step_failures_total", operation=operation, code="OCR_DOWN"),
    }
    changes = app_client.app.state.api.changes  # type: ignore[attr-defined]
    sample, changes.sample = changes.sample, 1.0
    try:
        with structlog.testing.capture_logs() as lines:
            await stub.ReportEvent(convert.event_from_json(_body("STEP_STARTED", 1)), metadata=_meta(token))
            with pytest.raises(grpc.aio.AioRpcError):
                await stub.ReportEvent(convert.event_from_json(_body("STEP_PROGRESS", 1)), metadata=_meta(token))
            beat = convert.heartbeat_from_json({"heartbeatSeq": 1, "executionHandle": ctx["executionHandle"]})
            worker = _meta(http.service_token("document-parser", "WORKER"))
            await stub.RecordHeartbeats(pb.HeartbeatBatch(heartbeats=[beat]), metadata=worker)
            failed = _body(
                "STEP_FAILED",
                3,
                error={"category": "DEPENDENCY", "code": "OCR_DOWN", "userMessage": "down", "retryable": True},
            )
            batch = await stub.ReportEvents(
                pb.EventBatch(
                    events=[convert.event_from_json(_body("STEP_PROGRESS", 2)), convert.event_from_json(failed)]
                ),
                metadata=_meta(token),
            )
    finally:
        changes.sample = sample
    assert [r.accepted for r in batch.results] == [True, True]
    assert _count("task_status_events_total", result="accepted", code="", transport="grpc") == before["accepted"] + 3
    assert (
        _count("task_status_events_total", result="rejected", code="SOURCE_SEQ_REGRESSION", transport="grpc")
        == before["rejected"] + 1
    )
    assert _count("task_status_ingest_seconds_count", transport="grpc", shape="single") == before["single"] + 1
    assert _count("task_status_ingest_seconds_count", transport="grpc", shape="batch") == before["batch"] + 1
    assert _count("task_status_heartbeats_total", result="accepted", transport="grpc") == before["beats"] + 1
    assert (
        _count("task_status_rejections_by_operation_total", operation=operation, code="SOURCE_SEQ_REGRESSION")
        == before["by_op"] + 1
    )
    assert _count("task_status_step_failures_total", operation=operation, code="OCR_DOWN") == before["failed"] + 1
    accepted = [line for line in lines if line["event"] == "event accepted"]
    assert [line["eventType"] for line in accepted] == ["STEP_STARTED", "STEP_PROGRESS", "STEP_FAILED"]
    assert {line["transport"] for line in accepted} == {"grpc"} and accepted[0]["executionId"] == ctx["executionId"]
    (rejected,) = [line for line in lines if line["event"] == "event rejected"]
    assert (rejected["code"], rejected["transport"]) == ("SOURCE_SEQ_REGRESSION", "grpc")


def test_rest_batches_are_timed_and_counted_by_transport(http: Http) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    ctx = activate(http, task_id)
    batches = _count("task_status_ingest_seconds_count", transport="http", shape="batch")
    accepted = _count("task_status_events_total", result="accepted", code="", transport="http")
    answer = http.client.post(
        "/internal/v1/task-events:batch",
        json={"events": [_body("STEP_STARTED", 1), _body("STEP_PROGRESS", 2)]},
        headers=http.auth(ctx["executionToken"]),
    )
    assert answer.status_code == 200, answer.text
    assert _count("task_status_ingest_seconds_count", transport="http", shape="batch") == batches + 1
    assert _count("task_status_events_total", result="accepted", code="", transport="http") == accepted + 2
