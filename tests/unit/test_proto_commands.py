"""The gRPC mapping against REST's: the same event, sent as a REST body or as its protobuf message,
is the same command, or the same refusal in the same words (``status.api.proto_commands``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from task_status_wire import convert
from task_status_wire import task_events_pb2 as pb

from status.api import proto_commands
from status.api.gate import parse_body
from status.api.report_models import BindBatchIn, EventBatchIn, EventIn, HeartbeatBatchIn
from status.domain.errors import DomainError, ErrorCode

FULL: dict[str, Any] = {
    "eventId": "evt-1",
    "eventType": "STEP_FAILED",
    "sourceSeq": 7,
    "occurredAt": "2026-11-30T10:00:00+02:00",
    "executionHandle": "h-123456789",
    "workflowId": "wf_1",
    "taskId": "tsk_1",
    "taskType": "document",
    "taskAttempt": 1,
    "stepId": "02_parse",
    "stepAttempt": 2,
    "executionId": "exe_1",
    "operationCode": "DOCUMENT.PARSE",
    "producerId": "parser",
    "businessStatus": "PARSING",
    "phaseCode": "ocr.page",
    "phaseLabel": "Reading page 3",
    "progress": {"current": 3.0, "total": 8.0, "unit": "page"},
    "durationMs": 18240,
    "data": {"schema": "document.parse.v1", "value": {"pages": [1, 2], "ok": False, "note": None}},
    "error": {
        "category": "BUSINESS_INPUT",
        "code": "BAD",
        "retryable": False,
        "userMessage": "Convert it",
        "diagnosticsRef": "log:1",
    },
    "failedStepId": "02_parse",
}
MINIMAL = {"eventId": "e", "eventType": "STEP_STARTED", "sourceSeq": 1, "occurredAt": "2026-11-30T10:00:00Z"}


@dataclass(frozen=True)
class Refused:
    code: ErrorCode
    message: str


def _outcome(parse: Any) -> Any:
    """The command(s), or the refusal."""
    try:
        return parse()
    except DomainError as err:
        return Refused(err.code, err.message)


def _rest(body: dict[str, Any]) -> Any:
    return _outcome(lambda: parse_body(json.dumps(body).encode(), EventIn).command())


def _grpc(body: dict[str, Any]) -> Any:
    return _outcome(lambda: proto_commands.report_event(convert.event_from_json(body)))


def test_every_field_of_the_message_is_read_in_the_rest_models_order() -> None:
    read = [name for _, name, _ in proto_commands._EVENT_FIELDS]
    assert sorted(read) == sorted(pb.Event.DESCRIPTOR.fields_by_camelcase_name)
    assert read == [f.alias for f in EventIn.model_fields.values() if f.alias in read]
    assert set(FULL) == set(read)


@pytest.mark.parametrize("body", [FULL, MINIMAL], ids=["full", "minimal"])
def test_an_event_is_the_same_command_either_way(body: dict[str, Any]) -> None:
    rest = _rest(body)
    assert not isinstance(rest, Refused), rest
    assert _grpc(body) == rest


# One mistake at a time, in each field the message carries (and in each nested object's).
MISTAKES = [
    ("eventId", ""),
    ("eventId", "has space"),
    ("eventId", "x" * 129),
    ("eventType", ""),
    ("eventType", "E" * 65),
    ("sourceSeq", -1),
    ("sourceSeq", 2**62 + 1),
    ("occurredAt", ""),
    ("occurredAt", "yesterday"),
    ("occurredAt", "0001-01-01T00:30:00+01:00"),
    ("occurredAt", "0999-12-31T23:59:59Z"),
    ("executionHandle", "short"),
    ("taskAttempt", 0),
    ("taskAttempt", 10_001),
    ("stepAttempt", 0),
    ("stepId", "a\tb"),
    ("operationCode", "lower.case"),
    ("businessStatus", "B" * 65),
    ("phaseCode", "-starts-with-dash"),
    ("phaseLabel", "L" * 129),
    ("durationMs", -5),
    ("failedStepId", ""),
    ("progress", {"current": -1.0}),
    ("progress", {"current": 1e16}),
    ("progress", {"current": 1.0, "total": -2.0}),
    ("progress", {"current": 1.0, "unit": ""}),
    ("data", {"schema": "", "value": 1}),
    ("data", {"schema": "s", "value": json.loads("[" * 19 + "]" * 19)}),
    ("error", {"category": "", "code": "C"}),
    ("error", {"category": "C", "code": "x" * 129}),
    ("error", {"category": "C", "code": "C", "userMessage": "m" * 513}),
    ("error", {"category": "C", "code": "C", "diagnosticsRef": "d" * 256}),
]


@pytest.mark.parametrize(("field", "value"), MISTAKES, ids=[f"{f}-{i}" for i, (f, _) in enumerate(MISTAKES)])
def test_a_mistake_is_the_same_refusal_either_way(field: str, value: Any) -> None:
    body = FULL | {field: value}
    rest = _rest(body)
    assert isinstance(rest, Refused), f"REST took {field}={value!r}"
    assert rest.code is ErrorCode.VALIDATION_FAILED
    assert _grpc(body) == rest


def test_data_one_level_too_deep_is_refused_either_way_and_at_the_limit_taken() -> None:
    # The value sits at level 3 of a single event's body: 18 nested lists reach the limit of 20.
    def nested(levels: int) -> dict[str, Any]:
        return FULL | {"data": {"schema": "s", "value": json.loads("[" * levels + "]" * levels)}}

    assert not isinstance(_grpc(nested(18)), Refused)
    assert isinstance(_grpc(nested(19)), Refused)
    batch = {"events": [MINIMAL, nested(16)]}  # batch → events → event → data → value: level 5
    assert not isinstance(_grpc_batch(batch), Refused)
    assert isinstance(_grpc_batch({"events": [MINIMAL, nested(17)]}), Refused)
    assert isinstance(_rest_batch({"events": [MINIMAL, nested(17)]}), Refused)


def test_a_lone_surrogate_in_data_is_refused_either_way() -> None:
    # REST's JSON parser refuses it as it reads the bytes; a message's JSON text is read later.
    body = FULL | {"data": {"schema": "s", "value": "\ud800"}}
    assert _rest(body).code is _grpc(body).code is ErrorCode.VALIDATION_FAILED


def test_data_that_is_not_json_is_refused_not_failed() -> None:
    for text in ("{", "[" * 100_000):
        msg = convert.event_from_json(MINIMAL)
        msg.data.schema = "s"
        msg.data.value_json = text
        with pytest.raises(DomainError) as caught:
            proto_commands.report_event(msg)
        assert caught.value.code is ErrorCode.VALIDATION_FAILED


def _rest_batch(body: dict[str, Any]) -> Any:
    return _outcome(lambda: parse_body(json.dumps(body).encode(), EventBatchIn).commands())


def _grpc_batch(body: dict[str, Any]) -> Any:
    msg = pb.EventBatch(
        events=[convert.event_from_json(e) for e in body.get("events", [])],
        heartbeats=[convert.heartbeat_from_json(h) for h in body.get("heartbeats", [])],
        bindings=convert.bind_items_from_json(body.get("bindings", [])),
    )
    return _outcome(lambda: proto_commands.event_batch(msg))


BEAT = {"heartbeatSeq": 3, "observedAt": "2026-11-30T10:00:01Z", "executionHandle": "h-123456789"}


@pytest.mark.parametrize(
    "body",
    [
        {"events": [MINIMAL, FULL]},
        {"heartbeats": [BEAT, BEAT | {"executionToken": "t" * 40, "completesElsewhere": True}]},
        {"events": [FULL], "heartbeats": [BEAT | {"executionId": "exe_1"}]},
    ],
    ids=["events", "heartbeats", "both"],
)
def test_a_batch_is_the_same_commands_either_way(body: dict[str, Any]) -> None:
    rest = _rest_batch(body)
    assert not isinstance(rest, Refused), rest
    assert _grpc_batch(body) == rest


@pytest.mark.parametrize(
    "body",
    [
        {"events": [MINIMAL, FULL | {"stepAttempt": 0}]},
        {"events": [MINIMAL, FULL | {"progress": {"current": -1.0}}]},
        {"events": [MINIMAL], "heartbeats": [BEAT, BEAT | {"heartbeatSeq": -1}]},
        {"heartbeats": [BEAT | {"observedAt": "soon"}]},
        {"heartbeats": [BEAT | {"executionHandle": "short"}]},
    ],
)
def test_a_mistake_in_a_batch_names_its_place_either_way(body: dict[str, Any]) -> None:
    rest = _rest_batch(body)
    assert isinstance(rest, Refused)
    assert _grpc_batch(body) == rest


def test_a_batch_too_long_or_empty_is_the_same_refusal_either_way() -> None:
    events = [MINIMAL | {"eventId": f"e{i}"} for i in range(501)]
    for body in ({"events": events}, {}, {"heartbeats": [BEAT] * 2001}):
        rest = _rest_batch(body)
        assert rest.code is ErrorCode.VALIDATION_FAILED
        assert _grpc_batch(body) == rest
    assert not isinstance(_grpc_batch({"events": events[:500]}), Refused)


def test_a_heartbeat_batch_is_bounded_as_rest_bounds_it() -> None:
    beat = convert.heartbeat_from_json(BEAT)
    for count in (0, 2001):
        with pytest.raises(DomainError) as caught:
            proto_commands.heartbeat_batch(pb.HeartbeatBatch(heartbeats=[beat] * count))
        rest = _outcome(lambda n=count: parse_body(json.dumps({"heartbeats": [BEAT] * n}).encode(), HeartbeatBatchIn))
        assert Refused(caught.value.code, caught.value.message) == rest
    beats = proto_commands.heartbeat_batch(pb.HeartbeatBatch(heartbeats=[convert.heartbeat_from_json(BEAT)]))
    rest = parse_body(json.dumps({"heartbeats": [BEAT]}).encode(), HeartbeatBatchIn)
    assert beats == [h.command() for h in rest.heartbeats]


# Whatever a producer puts in the fields a message can carry, both transports agree.
_KEYISH = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=140)
_INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
_INSTANTS = st.sampled_from(
    [
        "2026-11-30T10:00:00Z",
        "2026-11-30T10:00:00.123456+14:00",
        "2026-11-30",
        "2026-11-30 10:00:00",
        "1700000000",
        "9999-12-31T23:59:59-01:00",
        "1000-01-01T00:00:00+00:01",
        "2026-13-01T00:00:00Z",
        "",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    event_id=_KEYISH,
    event_type=_KEYISH,
    source_seq=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    occurred_at=_INSTANTS,
    step_attempt=st.none() | _INT32,
    operation_code=st.none() | _KEYISH,
    phase_code=st.none() | _KEYISH,
    current=st.none() | st.floats(allow_nan=False),
)
def test_any_event_is_parsed_alike_either_way(
    event_id: str,
    event_type: str,
    source_seq: int,
    occurred_at: str,
    step_attempt: int | None,
    operation_code: str | None,
    phase_code: str | None,
    current: float | None,
) -> None:
    body: dict[str, Any] = {
        "eventId": event_id,
        "eventType": event_type,
        "sourceSeq": source_seq,
        "occurredAt": occurred_at,
    }
    optional = {"stepAttempt": step_attempt, "operationCode": operation_code, "phaseCode": phase_code}
    body |= {k: v for k, v in optional.items() if v is not None}
    if current is not None:
        body["progress"] = {"current": current}
    assert _grpc(body) == _rest(body)


# ------------------------------------------------------------------ bindings

TEMPORAL = {"namespace": "default", "workflowId": "wf-1", "runId": "0a1b-2c", "activityId": "3"}
STARTED = {"eventId": "e-start", "occurredAt": "2026-11-30T10:00:00+01:00", "sourceSeq": 2}
ACTIVATE = {
    "taskId": "tsk_1",
    "stepId": "02_parse",
    "attempt": 2,
    "producerId": "parser",
    "heartbeatIntervalSeconds": 10,
    "heartbeatTimeoutSeconds": 30,
    "temporalActivity": TEMPORAL,
    "startedEvent": STARTED,
}
REGISTER = {
    "taskId": "tsk_1",
    "clientStepKey": "page-3",
    "operationCode": "DOCUMENT.OCR",
    "producerId": "ocr",
    "attempt": 1,
    "parentExecutionId": "exe_0",
    "displayName": "Page 3",
    "failurePolicy": "CONTINUE_WITH_WARNING",
    "heartbeatIntervalSeconds": 5,
    "heartbeatTimeoutSeconds": 20,
    "temporalActivity": TEMPORAL,
    "startedEvent": {"eventId": "e-1", "occurredAt": "2026-11-30T10:00:00Z"},
}


# Events sent with their binding: an event's body without its execution handle.
RIDING = MINIMAL | {"eventId": "e-done", "eventType": "STEP_COMPLETED", "sourceSeq": 3}
FULL_RIDING = {k: v for k, v in FULL.items() if k != "executionHandle"}


def _rest_bind(body: dict[str, Any]) -> Any:
    return _outcome(lambda: [item.command() for item in parse_body(json.dumps(body).encode(), BindBatchIn).items])


def _grpc_bind(body: dict[str, Any]) -> Any:
    return _outcome(lambda: proto_commands.bind_batch(convert.bind_batch_from_json(body)))


@pytest.mark.parametrize(
    "items",
    [
        [{"activate": ACTIVATE}],
        [{"register": REGISTER}],
        [{"activate": {"taskId": "t", "stepId": "s", "attempt": 1, "producerId": "p"}}],
        [{"register": {"taskId": "t", "clientStepKey": "k", "operationCode": "OP", "producerId": "p"}}],
        [{"activate": ACTIVATE}, {"register": REGISTER}] * 3,
        [{"activate": ACTIVATE | {"events": [RIDING, FULL_RIDING]}}, {"register": REGISTER | {"events": [RIDING]}}],
    ],
    ids=["activate", "register", "activate-minimal", "register-minimal", "mixed", "with-events"],
)
def test_bindings_are_the_same_commands_either_way(items: list[dict[str, Any]]) -> None:
    rest = _rest_bind({"items": items})
    assert not isinstance(rest, Refused), rest
    assert _grpc_bind({"items": items}) == rest


BIND_MISTAKES = [
    {"activate": ACTIVATE | {"producerId": "has space"}},
    {"activate": {k: v for k, v in ACTIVATE.items() if k != "taskId"}},
    {"activate": {k: v for k, v in ACTIVATE.items() if k != "attempt"}},
    {"activate": ACTIVATE | {"heartbeatIntervalSeconds": 0}},
    {"activate": ACTIVATE | {"heartbeatTimeoutSeconds": 86_401}},
    {"activate": ACTIVATE | {"temporalActivity": TEMPORAL | {"runId": "not/a/run"}}},
    {"activate": ACTIVATE | {"temporalActivity": {k: v for k, v in TEMPORAL.items() if k != "namespace"}}},
    {"activate": ACTIVATE | {"startedEvent": STARTED | {"occurredAt": "later"}}},
    {"activate": ACTIVATE | {"startedEvent": STARTED | {"sourceSeq": -1}}},
    {"activate": ACTIVATE | {"startedEvent": {"occurredAt": "2026-11-30T10:00:00Z"}}},
    {"register": REGISTER | {"operationCode": "lower"}},
    {"register": REGISTER | {"failurePolicy": "SOMETIMES"}},
    {"register": REGISTER | {"displayName": "d" * 129}},
    {"register": REGISTER | {"attempt": 10_001}},
    {"register": {k: v for k, v in REGISTER.items() if k != "clientStepKey"}},
    {"activate": ACTIVATE | {"events": [RIDING | {"executionHandle": "h-123456789"}]}},
    {"activate": ACTIVATE | {"events": [RIDING, RIDING | {"sourceSeq": -1}]}},
    {"register": REGISTER | {"events": [RIDING | {"progress": {"current": -1.0}}]}},
    {"register": REGISTER | {"events": [RIDING] * 101}},
    {},
]


@pytest.mark.parametrize("item", BIND_MISTAKES, ids=[str(i) for i in range(len(BIND_MISTAKES))])
def test_a_binding_mistake_is_the_same_refusal_either_way(item: dict[str, Any]) -> None:
    body = {"items": [{"activate": ACTIVATE}, item]}
    rest = _rest_bind(body)
    assert isinstance(rest, Refused), f"REST took {item}"
    assert rest.code is ErrorCode.VALIDATION_FAILED
    assert _grpc_bind(body) == rest


def test_a_zero_attempt_is_refused_either_way() -> None:
    # A message cannot tell 0 from "not sent" (proto3: no presence), so it is named missing.
    body = {"items": [{"activate": ACTIVATE | {"attempt": 0}}]}
    assert _rest_bind(body).code is _grpc_bind(body).code is ErrorCode.VALIDATION_FAILED


def test_a_bind_batch_empty_or_too_long_is_the_same_refusal_either_way() -> None:
    for items in ([], [{"activate": ACTIVATE}] * 101):
        rest = _rest_bind({"items": items})
        assert rest.code is ErrorCode.VALIDATION_FAILED
        assert _grpc_bind({"items": items}) == rest
    assert not isinstance(_grpc_bind({"items": [{"activate": ACTIVATE}] * 100}), Refused)


@pytest.mark.parametrize(
    "body",
    [
        {"bindings": [{"activate": ACTIVATE | {"events": [RIDING]}}]},
        {"bindings": [{"register": REGISTER}], "events": [FULL], "heartbeats": [BEAT]},
    ],
    ids=["bindings", "all"],
)
def test_a_batch_with_bindings_is_the_same_commands_either_way(body: dict[str, Any]) -> None:
    rest = _rest_batch(body)
    assert not isinstance(rest, Refused), rest
    assert rest[0] and rest[0][0].events == tuple(e.command() for e in _events_of(body))
    assert _grpc_batch(body) == rest


def _events_of(body: dict[str, Any]) -> list[Any]:
    item = body["bindings"][0]
    return [
        parse_body(json.dumps(e).encode(), EventIn)
        for e in (item.get("activate") or item["register"]).get("events", [])
    ]


def test_a_mistake_in_a_batchs_binding_names_its_place_either_way() -> None:
    for body in (
        {"bindings": [{"activate": ACTIVATE}, {"register": REGISTER | {"events": [RIDING | {"sourceSeq": -1}]}}]},
        {"bindings": [{"activate": ACTIVATE}] * 101},
    ):
        rest = _rest_batch(body)
        assert isinstance(rest, Refused) and rest.code is ErrorCode.VALIDATION_FAILED
        assert rest.message.startswith("bindings")
        assert _grpc_batch(body) == rest


def test_a_request_carries_at_most_500_events_however_spread_the_same_either_way() -> None:
    """Riding events count with the batch's own: what one transaction decides stays bounded."""
    full = [{"activate": ACTIVATE | {"events": [RIDING] * 100}}] * 5  # 500 events riding
    assert not isinstance(_rest_batch({"bindings": full}), Refused)
    assert not isinstance(_rest_bind({"items": full}), Refused)
    for parse_rest, parse_grpc, body in (
        (_rest_batch, _grpc_batch, {"bindings": full, "events": [FULL]}),
        (_rest_bind, _grpc_bind, {"items": [*full, {"register": REGISTER | {"events": [RIDING]}}]}),
    ):
        rest = parse_rest(body)
        assert isinstance(rest, Refused) and rest.code is ErrorCode.VALIDATION_FAILED
        assert "at most 500 events" in rest.message
        assert parse_grpc(body) == rest
