"""The gRPC wire contract: generated modules match the .proto, and messages round-trip to the
REST JSON shapes the plugin reads."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from hypothesis import given, settings
from hypothesis import strategies as st
from task_status_wire import convert
from task_status_wire import task_events_pb2 as pb

ROOT = Path(__file__).resolve().parents[2] / "interceptors"
GENERATED = ("task_events_pb2.py", "task_events_pb2.pyi", "task_events_pb2_grpc.py")


def test_generated_modules_are_current(tmp_path: Path) -> None:
    (tmp_path / "task_status_wire").mkdir()
    shutil.copy(ROOT / "task_status_wire" / "task_events.proto", tmp_path / "task_status_wire")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I",
            ".",
            "--python_out=.",
            "--pyi_out=.",
            "--grpc_python_out=.",
            "task_status_wire/task_events.proto",
        ],
        cwd=tmp_path,
        check=True,
    )
    for name in GENERATED:
        fresh = (tmp_path / "task_status_wire" / name).read_text()
        assert fresh == (ROOT / "task_status_wire" / name).read_text(), f"run scripts/proto ({name} is stale)"


def test_results_round_trip_between_json_and_protobuf() -> None:
    # Events and heartbeats go the other way into commands: tests/unit/test_proto_commands.py.
    result = {
        "eventId": "e",
        "accepted": True,
        "duplicate": False,
        "stale": False,
        "taskId": "t",
        "stepId": None,
        "operationCode": None,
        "taskVersion": "12",
        "stepVersion": None,
        "lifecycleStatus": "RUNNING",
        "businessStatus": "RUNNING",
        "taskLifecycleStatus": "RUNNING",
        "committedAt": "2026-11-30T10:00:00.000Z",
    }
    assert convert.result_to_json(convert.result_to_proto(result)) == result
    rejected = {"eventId": "e", "accepted": False, "error": {"code": "X", "message": "m", "retryable": True}}
    assert convert.result_to_json(convert.result_to_proto(rejected)) == rejected


def test_a_heartbeat_result_crosses_grpc_with_its_renewal_and_without_one() -> None:
    renewed = {
        "executionId": "exe_1",
        "accepted": True,
        "health": "HEALTHY",
        "reason": None,
        "expiresAt": "2026-12-02T21:00:00Z",
        "executionToken": "eyJ.new.token",
    }
    assert convert.heartbeat_result_to_json(convert.heartbeat_result_to_proto(renewed)) == renewed
    plain = {"executionId": "exe_1", "accepted": False, "health": "", "reason": "TOKEN_EXPIRED"}
    assert convert.heartbeat_result_to_json(convert.heartbeat_result_to_proto(plain)) == plain


# ---------------------------------------------------------------- bindings, against json_format


def _json_of(descriptor: Any, depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    """Bodies of a message type as its JSON mapping reads them: any subset of its fields, at most
    one of each oneof, by JSON name or field name, values of their types, null for unset. A
    binding's events are left out: they are REST's event bodies (``event_from_json``), read apart."""
    plain = {
        FieldDescriptor.TYPE_STRING: st.text(max_size=8),
        FieldDescriptor.TYPE_BOOL: st.booleans(),
        FieldDescriptor.TYPE_INT32: st.integers(-(2**31), 2**31 - 1),
        FieldDescriptor.TYPE_UINT32: st.integers(0, 2**32 - 1),
    }
    fields = [f for f in descriptor.fields if f.message_type is not pb.Event.DESCRIPTOR]
    chosen: dict[str, st.SearchStrategy[Any]] = {}
    for field in fields:
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            value = _json_of(field.message_type, depth + 1) if depth < 3 else st.just({})
        else:
            value = plain[field.type]
        if field.is_repeated:
            value = st.lists(value, max_size=3)
        elif field.has_presence and field.containing_oneof is None:
            value = st.none() | value
        chosen[field.name] = value
    oneofs = {f.name: f.containing_oneof.name for f in descriptor.fields if f.containing_oneof is not None}

    @st.composite
    def body(draw: st.DrawFn) -> dict[str, Any]:
        names = draw(st.sets(st.sampled_from(sorted(chosen)))) if chosen else set()
        taken: set[str] = set()
        result: dict[str, Any] = {}
        for field in fields:
            if field.name not in names:
                continue
            group = oneofs.get(field.name)
            if group is not None:
                if group in taken:
                    continue
                taken.add(group)
            key = field.name if draw(st.booleans()) else field.json_name
            result[key] = draw(chosen[field.name])
        return result

    return body()


@settings(max_examples=200)
@given(body=_json_of(pb.BindBatch.DESCRIPTOR))
def test_a_bind_batch_reads_as_json_format_reads_it(body: dict[str, Any]) -> None:
    assert convert.bind_batch_from_json(body) == json_format.ParseDict(body, pb.BindBatch())


@settings(max_examples=200)
@given(body=_json_of(pb.BindBatchResult.DESCRIPTOR))
def test_bind_results_convert_as_json_format_converts_them(body: dict[str, Any]) -> None:
    reply = convert.bind_results_to_proto(body.get("results") or [])
    assert reply == json_format.ParseDict({"results": body.get("results") or []}, pb.BindBatchResult())
    for result in reply.results:
        printed = json_format.MessageToDict(result, always_print_fields_with_no_presence=True)
        if not printed["events"]:  # as REST: a binding that carried no events answers without them
            del printed["events"]
        assert convert.bind_result_to_json(result) == printed


def test_a_bindings_events_read_as_the_events_of_a_batch() -> None:
    events = [
        {
            "eventId": "e-2",
            "eventType": "STEP_PROGRESS",
            "sourceSeq": 2,
            "occurredAt": "2026-12-07T10:00:00Z",
            "progress": {"current": 1, "total": 2},
            "data": {"schema": "s.v1", "value": {"a": [1]}},
        },
        {"eventId": "e-3", "eventType": "STEP_COMPLETED", "sourceSeq": 3, "occurredAt": "2026-12-07T10:00:01Z"},
    ]
    body = {"items": [{"register": {"taskId": "t", "clientStepKey": "k", "events": events}}]}
    read = convert.bind_batch_from_json(body)
    assert list(read.items[0].register.events) == [convert.event_from_json(e) for e in events]
    assert read.items[0].register.task_id == "t"


def test_an_unknown_name_is_refused_as_json_format_refuses_it() -> None:
    for body in ({"items": [{"activate": {"taskId": "t", "nope": 1}}]}, {"elements": []}):
        with pytest.raises(json_format.ParseError):
            json_format.ParseDict(body, pb.BindBatch())
        with pytest.raises(json_format.ParseError):
            convert.bind_batch_from_json(body)
