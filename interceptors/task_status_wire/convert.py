"""The plugin's queued REST bodies as messages of ``task_events.proto``, and the service's answers
back to the JSON shapes of the REST API.

The service reads an ``Event`` or ``Heartbeat`` message straight into its command
(``status.api.proto_commands``), checked by REST's own field types.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format

from task_status_wire import task_events_pb2 as pb

# proto field → REST field, for the plain optional scalars of Event
_EVENT_SCALARS = {
    "execution_handle": "executionHandle",
    "workflow_id": "workflowId",
    "task_id": "taskId",
    "task_type": "taskType",
    "task_attempt": "taskAttempt",
    "step_id": "stepId",
    "step_attempt": "stepAttempt",
    "execution_id": "executionId",
    "operation_code": "operationCode",
    "producer_id": "producerId",
    "business_status": "businessStatus",
    "phase_code": "phaseCode",
    "phase_label": "phaseLabel",
    "duration_ms": "durationMs",
    "failed_step_id": "failedStepId",
}
_ERROR_SCALARS = {"retryable": "retryable", "user_message": "userMessage", "diagnostics_ref": "diagnosticsRef"}
_RESULT_SCALARS = {
    "task_id": "taskId",
    "step_id": "stepId",
    "operation_code": "operationCode",
    "task_version": "taskVersion",
    "step_version": "stepVersion",
    "lifecycle_status": "lifecycleStatus",
    "business_status": "businessStatus",
    "task_lifecycle_status": "taskLifecycleStatus",
    "committed_at": "committedAt",
}


def event_from_json(body: dict[str, Any]) -> pb.Event:
    msg = pb.Event(
        event_id=body["eventId"],
        event_type=body["eventType"],
        source_seq=int(body["sourceSeq"]),
        occurred_at=str(body["occurredAt"]),
    )
    for field, name in _EVENT_SCALARS.items():
        if body.get(name) is not None:
            setattr(msg, field, body[name])
    if body.get("progress") is not None:
        progress = body["progress"]
        msg.progress.current = float(progress["current"])
        if progress.get("total") is not None:
            msg.progress.total = float(progress["total"])
        if progress.get("unit") is not None:
            msg.progress.unit = progress["unit"]
    if body.get("data") is not None:
        msg.data.schema = body["data"]["schema"]
        msg.data.value_json = json.dumps(body["data"].get("value"), separators=(",", ":"))
    if body.get("error") is not None:
        error = body["error"]
        msg.error.category = error["category"]
        msg.error.code = error["code"]
        for field, name in _ERROR_SCALARS.items():
            if error.get(name) is not None:
                setattr(msg.error, field, error[name])
    return msg


def result_to_proto(result: dict[str, Any]) -> pb.EventResult:
    msg = pb.EventResult(
        event_id=result.get("eventId", ""),
        accepted=bool(result.get("accepted")),
        duplicate=bool(result.get("duplicate")),
        stale=bool(result.get("stale")),
    )
    for field, name in _RESULT_SCALARS.items():
        if result.get(name) is not None:
            setattr(msg, field, str(result[name]))
    if result.get("error"):
        err = result["error"]
        msg.error.code = err["code"]
        msg.error.message = err.get("message", "")
        msg.error.retryable = bool(err.get("retryable"))
    return msg


def result_to_json(msg: pb.EventResult) -> dict[str, Any]:
    result: dict[str, Any] = {"eventId": msg.event_id, "accepted": msg.accepted}
    if msg.HasField("error"):
        result["error"] = {"code": msg.error.code, "message": msg.error.message, "retryable": msg.error.retryable}
        return result
    result |= {"duplicate": msg.duplicate, "stale": msg.stale}
    for field, name in _RESULT_SCALARS.items():
        result[name] = getattr(msg, field) if msg.HasField(field) else None
    return result


def heartbeat_from_json(body: dict[str, Any]) -> pb.Heartbeat:
    msg = pb.Heartbeat(heartbeat_seq=int(body["heartbeatSeq"]))
    for field, name in (
        ("observed_at", "observedAt"),
        ("execution_handle", "executionHandle"),
        ("execution_token", "executionToken"),
        ("execution_id", "executionId"),
        ("completes_elsewhere", "completesElsewhere"),
    ):
        if body.get(name) is not None:
            setattr(msg, field, body[name])
    return msg


def heartbeat_result_to_proto(result: dict[str, Any]) -> pb.HeartbeatResult:
    msg = pb.HeartbeatResult(
        execution_id=result.get("executionId") or "",
        accepted=bool(result.get("accepted")),
        health=result.get("health") or "",
    )
    if result.get("reason") is not None:
        msg.reason = result["reason"]
    if result.get("expiresAt") is not None:
        msg.expires_at = result["expiresAt"]
    if result.get("executionToken") is not None:
        msg.execution_token = result["executionToken"]
    return msg


def heartbeat_result_to_json(msg: pb.HeartbeatResult) -> dict[str, Any]:
    return {
        "executionId": msg.execution_id,
        "accepted": msg.accepted,
        "health": msg.health,
        "reason": msg.reason if msg.HasField("reason") else None,
    } | {
        name: getattr(msg, field)
        for name, field in (("expiresAt", "expires_at"), ("executionToken", "execution_token"))
        if msg.HasField(field)
    }


# Bindings: the messages' JSON mapping (lowerCamelCase names) is REST's shape, field for field, so
# the protobuf library's own mapping converts them; unknown names fail rather than vanish.
def bind_batch_from_json(body: dict[str, Any]) -> pb.BindBatch:
    return json_format.ParseDict(body, pb.BindBatch())


def bind_results_to_proto(results: list[dict[str, Any]]) -> pb.BindBatchResult:
    return json_format.ParseDict({"results": results}, pb.BindBatchResult())


def bind_result_to_json(msg: pb.BindResult) -> dict[str, Any]:
    # Fields without presence (a rejection's ``retryable``, a result's ``accepted``) are printed at
    # their default too, as REST sends them; unset optional ones stay out (REST's nulls).
    return json_format.MessageToDict(msg, always_print_fields_with_no_presence=True)
