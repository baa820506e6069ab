"""The plugin's queued REST bodies as messages of ``task_events.proto``, and the service's answers
back to the JSON shapes of the REST API.

The service reads an ``Event`` or ``Heartbeat`` message straight into its command
(``status.api.proto_commands``), checked by REST's own field types.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor

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


def result_to_proto(result: Mapping[str, Any]) -> pb.EventResult:
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


def heartbeat_result_to_proto(result: Mapping[str, Any]) -> pb.HeartbeatResult:
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


# Bindings: the messages' JSON mapping (lowerCamelCase names) is REST's shape, field for field.
# The protobuf library's own mapping (``json_format``) converts in pure Python, a field at a time
# through its generic machinery: a batch's bindings and answers cost more there than the service
# spends deciding them. These read each message type's fields once and convert straight; they
# take the subset these messages use (text, whole numbers, booleans, such messages, repeated
# ones), refuse unknown names as ``json_format`` does, and a test holds them equal to it.
_PLAIN = {
    FieldDescriptor.TYPE_STRING,
    FieldDescriptor.TYPE_BOOL,
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_UINT32,
}
# message type -> JSON name -> (field name, the nested message type or None, repeated, has presence)
_FIELDS: dict[Any, dict[str, tuple[str, Any, bool, bool]]] = {}
_NAMES: dict[Any, dict[str, tuple[str, Any, bool, bool]]] = {}  # the same by field name


def _fields_of(cls: Any) -> dict[str, tuple[str, Any, bool, bool]]:
    found = _FIELDS.get(cls)
    if found is None:
        found = {}
        for field in cls.DESCRIPTOR.fields:
            nested = None
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                nested = getattr(pb, field.message_type.name)
            elif field.type not in _PLAIN:
                raise TypeError(f"{cls.__name__}.{field.name}: a type these converters do not take")
            found[field.json_name] = (field.name, nested, field.is_repeated, field.has_presence)
        _FIELDS[cls] = found
        _NAMES[cls] = {spec[0]: spec for spec in found.values()}
    return found


def _from_json(cls: Any, body: dict[str, Any]) -> Any:
    fields = _fields_of(cls)
    names = _NAMES[cls]
    values: dict[str, Any] = {}
    for name, value in body.items():
        spec = fields.get(name) or names.get(name)  # as json_format: the JSON name or the field's own
        if spec is None:
            raise json_format.ParseError(f'Message type "{cls.DESCRIPTOR.full_name}" has no field named "{name}".')
        if value is None:  # JSON's null: the field stays unset
            continue
        field, nested, repeated, _ = spec
        if nested is not None:
            # An event riding with its binding has its own mapping (its data value is JSON text).
            read = event_from_json if nested is pb.Event else functools.partial(_from_json, nested)
            value = [read(item) for item in value] if repeated else read(value)
        values[field] = value
    return cls(**values)


def _to_json(msg: Any) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for name, (field, nested, repeated, presence) in _fields_of(type(msg)).items():
        if presence and not msg.HasField(field):
            continue
        value = getattr(msg, field)
        if nested is not None:
            value = [_to_json(item) for item in value] if repeated else _to_json(value)
        elif repeated:
            value = list(value)
        body[name] = value
    return body


def bind_batch_from_json(body: dict[str, Any]) -> pb.BindBatch:
    result: pb.BindBatch = _from_json(pb.BindBatch, body)
    return result


def bind_items_from_json(items: list[dict[str, Any]]) -> list[pb.BindItem]:
    return [_from_json(pb.BindItem, item) for item in items]


def bind_results_to_proto(results: list[dict[str, Any]]) -> pb.BindBatchResult:
    result: pb.BindBatchResult = _from_json(pb.BindBatchResult, {"results": results})
    return result


def bind_result_to_json(msg: pb.BindResult) -> dict[str, Any]:
    # Fields without presence (a rejection's ``retryable``, a result's ``accepted``) are printed at
    # their default too, as REST sends them; unset optional ones stay out (REST's nulls), and so
    # do no events (REST sends them when the binding carried some).
    body = _to_json(msg)
    if not body["events"]:
        del body["events"]
    return body
