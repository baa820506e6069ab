"""The gRPC wire contract: generated modules match the .proto, and messages round-trip to the
REST JSON shapes the plugin reads."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from task_status_wire import convert

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
