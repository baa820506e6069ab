"""gRPC messages straight to the commands REST builds: no dict and no request model between.

The trap: two transports, one contract. A message must be refused exactly where the REST body
saying the same would be, with the same words, or a producer's mistake depends on how it sent it.
So nothing here restates a limit: each field is checked by the type its REST model declares
(``status.api.report_models``: length, pattern, range), read from that model once at import, and a
drift test sends the same events both ways (``tests/unit/test_proto_commands.py``). What the
REST gate checks beyond the model, a free-form value's storability, is checked at the depth the
REST body holds it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from annotated_types import MaxLen, MinLen
from google.protobuf.message import Message
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from task_status_wire import task_events_pb2 as pb

from status.api.gate import check_storable, refusal
from status.api.models import ErrorIn, utc_instant
from status.api.report_models import (
    UNBOUND_IDENTITY,
    ActivateItemIn,
    BindBatchIn,
    DataIn,
    EventBatchIn,
    EventIn,
    HeartbeatBatchIn,
    HeartbeatIn,
    ProgressIn,
    RegisterItemIn,
    StartedEventIn,
    TemporalActivityIn,
    check_request_events,
)
from status.app import commands as c
from status.domain.errors import Invalid
from status.domain.model import Progress, StepError
from status.domain.rules import DataBody

# A value at this depth of a single event's REST body: event → data → value.
_DATA_VALUE_DEPTH = 3


class _Fields:
    """One model's field types as validators of a single value: ``check("eventId", v)`` is ``v`` as
    the model would hold it, or the refusal REST gives (``eventId: <pydantic's message>``)."""

    def __init__(self, model: type[BaseModel], prefix: str = "") -> None:
        # The models refuse NaN and infinities (status.api.models.Body); a bare type would take them.
        config = ConfigDict(allow_inf_nan=False)
        self._checks: dict[str, tuple[str, Callable[[Any], Any]]] = {}
        for name, info in model.model_fields.items():
            alias = info.alias or name
            adapter: TypeAdapter[Any] = TypeAdapter(info.rebuild_annotation(), config=config)
            self._checks[alias] = (prefix + alias, adapter.validator.validate_python)

    def check(self, alias: str, value: Any, at: str = "") -> Any:
        """``at``: where the model's object sits in the request (``events.3.`` in a batch)."""
        where, validate = self._checks[alias]
        try:
            return validate(value)
        except ValidationError as exc:
            raise refusal(exc, at + where) from exc


def _length(model: type[BaseModel], name: str) -> Callable[..., None]:
    """A check of how many items a list field of ``model`` holds, worded as REST words it (the
    items themselves are read one by one, by their own fields)."""
    bounds = [m for m in model.model_fields[name].metadata if isinstance(m, MinLen | MaxLen)]
    validate = TypeAdapter(Annotated[list[Any], *bounds]).validator.validate_python

    def check(items: Sequence[Any], at: str = "") -> None:
        try:
            validate([None] * len(items))
        except ValidationError as exc:
            raise refusal(exc, at + name) from exc

    return check


_EVENT = _Fields(EventIn)
_PROGRESS = _Fields(ProgressIn, "progress.")
_DATA = _Fields(DataIn, "data.")
_ERROR = _Fields(ErrorIn, "error.")
_HEARTBEAT = _Fields(HeartbeatIn)
_BATCH_EVENTS = _length(EventBatchIn, "events")
_BATCH_HEARTBEATS = _length(EventBatchIn, "heartbeats")
_HEARTBEATS = _length(HeartbeatBatchIn, "heartbeats")
_ACTIVATE = _Fields(ActivateItemIn)
_REGISTER = _Fields(RegisterItemIn)
_TEMPORAL = _Fields(TemporalActivityIn)
_STARTED = _Fields(StartedEventIn)
_BIND_ITEMS = _length(BindBatchIn, "items")
_BATCH_BINDINGS = _length(EventBatchIn, "bindings")
_BOUND_EVENTS = _length(ActivateItemIn, "events")


def report_event(msg: pb.Event, at: str = "") -> c.ReportEvent:
    """The event as the command REST's ``EventIn.command()`` gives for the same event (``at``: its
    path in the request, ``events.3.`` in a batch)."""
    sent = {"event_id": msg.event_id, "event_type": msg.event_type, "source_seq": msg.source_seq}
    sent["occurred_at"] = msg.occurred_at
    sent.update((descriptor.name, value) for descriptor, value in msg.ListFields())
    fields: dict[str, Any] = {}
    for field, name, read in _EVENT_FIELDS:
        if field in sent:
            value = sent[field]
            fields[field] = _EVENT.check(name, value, at) if read is None else read(value, at)
    fields["occurred_at"] = utc_instant(fields["occurred_at"])
    return c.ReportEvent(**fields)


def _progress(msg: pb.Progress, at: str) -> Progress:
    check = _PROGRESS.check
    return Progress(
        check("current", msg.current, at),
        check("total", msg.total, at) if msg.HasField("total") else None,
        check("unit", msg.unit, at) if msg.HasField("unit") else None,
    )


def _data(msg: pb.Data, at: str) -> DataBody:
    schema = _DATA.check("schema", msg.schema, at)
    try:
        value = json.loads(msg.value_json) if msg.value_json else None
    except RecursionError as exc:
        raise Invalid("the request body nests too deeply") from exc
    except ValueError as exc:
        raise Invalid(f"{at}data.value_json is not JSON") from exc
    check_storable(value, at.count(".") + _DATA_VALUE_DEPTH)
    return DataBody(schema, value)


def _error(msg: pb.Error, at: str) -> StepError:
    check = _ERROR.check

    def optional(field: str, name: str) -> Any:
        return check(name, getattr(msg, field), at) if msg.HasField(field) else None

    return StepError(
        check("category", msg.category, at),
        check("code", msg.code, at),
        optional("user_message", "userMessage") or "",
        optional("retryable", "retryable"),
        optional("diagnostics_ref", "diagnosticsRef"),
    )


# The fields of Event in the REST model's order (so the first mistake named is REST's first),
# each with what reads it: None for a scalar checked by its REST type, else the nested object's.
_EVENT_FIELDS: tuple[tuple[str, str, Callable[[Any, str], Any] | None], ...] = (
    ("event_id", "eventId", None),
    ("event_type", "eventType", None),
    ("source_seq", "sourceSeq", None),
    ("occurred_at", "occurredAt", None),
    ("execution_handle", "executionHandle", None),
    ("workflow_id", "workflowId", None),
    ("task_id", "taskId", None),
    ("task_type", "taskType", None),
    ("task_attempt", "taskAttempt", None),
    ("step_id", "stepId", None),
    ("step_attempt", "stepAttempt", None),
    ("execution_id", "executionId", None),
    ("operation_code", "operationCode", None),
    ("producer_id", "producerId", None),
    ("business_status", "businessStatus", None),
    ("phase_code", "phaseCode", None),
    ("phase_label", "phaseLabel", None),
    ("progress", "progress", _progress),
    ("duration_ms", "durationMs", None),
    ("data", "data", _data),
    ("error", "error", _error),
    ("failed_step_id", "failedStepId", None),
)


def heartbeat(
    heartbeat_seq: int,
    observed_at: str | None = None,
    *,
    execution_handle: str | None = None,
    execution_token: str | None = None,
    execution_id: str | None = None,
    completes_elsewhere: bool = False,
    at: str = "",
) -> c.Heartbeat:
    """A heartbeat as REST's ``HeartbeatIn.command()`` gives it (a batch's, or a stream's whose
    execution token its ref stands for)."""

    def check(name: str, value: Any) -> Any:
        return None if value is None else _HEARTBEAT.check(name, value, at)

    observed = check("observedAt", observed_at)
    return c.Heartbeat(
        check("heartbeatSeq", heartbeat_seq),
        None if observed is None else utc_instant(observed),
        check("executionHandle", execution_handle),
        check("executionToken", execution_token),
        check("executionId", execution_id),
        completes_elsewhere,
    )


def _heartbeat(msg: pb.Heartbeat, at: str) -> c.Heartbeat:
    def present(field: str) -> Any:
        return getattr(msg, field) if msg.HasField(field) else None

    return heartbeat(
        msg.heartbeat_seq,
        present("observed_at"),
        execution_handle=present("execution_handle"),
        execution_token=present("execution_token"),
        execution_id=present("execution_id"),
        completes_elsewhere=msg.completes_elsewhere,
        at=at,
    )


def event_batch(
    msg: pb.EventBatch,
) -> tuple[list[c.ActivateStep | c.RegisterExecution], list[c.ReportEvent], list[c.Heartbeat]]:
    """Every binding, event and riding heartbeat as its command, or the request's refusal: all of
    it is read before any of it is applied (as ``EventBatchIn.commands``)."""
    _BATCH_BINDINGS(msg.bindings)
    _BATCH_EVENTS(msg.events)
    _BATCH_HEARTBEATS(msg.heartbeats)
    if not msg.events and not msg.heartbeats and not msg.bindings:  # EventBatchIn's own rule, in its words
        raise Invalid("(body): Value error, a batch carries bindings, events, heartbeats or some of them")
    bindings = _bindings(msg.bindings, "bindings")
    events = [report_event(e, f"events.{i}.") for i, e in enumerate(msg.events)]
    heartbeats = [_heartbeat(h, f"heartbeats.{i}.") for i, h in enumerate(msg.heartbeats)]
    _request_events(bindings, len(events))
    return bindings, events, heartbeats


def heartbeat_batch(msg: pb.HeartbeatBatch) -> list[c.Heartbeat]:
    _HEARTBEATS(msg.heartbeats)
    return [_heartbeat(h, f"heartbeats.{i}.") for i, h in enumerate(msg.heartbeats)]


def bind_batch(msg: pb.BindBatch) -> list[c.ActivateStep | c.RegisterExecution]:
    """Every binding as REST's ``BindItemIn.command()`` gives it, or the request's refusal."""
    _BIND_ITEMS(msg.items)
    bindings = _bindings(msg.items, "items")
    _request_events(bindings, 0)
    return bindings


def _request_events(bindings: Sequence[c.ActivateStep | c.RegisterExecution], own: int) -> None:
    """The request-wide bound on events, after every field was read (as REST's model checks it)."""
    try:
        check_request_events(sum(len(cmd.events) for cmd in bindings), own)
    except ValueError as exc:
        raise Invalid(f"(body): Value error, {exc}") from exc


def _bindings(items: Sequence[pb.BindItem], name: str) -> list[c.ActivateStep | c.RegisterExecution]:
    commands: list[c.ActivateStep | c.RegisterExecution] = []
    for i, item in enumerate(items):
        kind = item.WhichOneof("kind")
        if kind == "activate":
            commands.append(_activation(item.activate, f"{name}.{i}.activate."))
        elif kind == "register":
            commands.append(_registration(item.register, f"{name}.{i}.register."))
        else:
            raise Invalid(f"{name}.{i}: Value error, an item is either activate or register")
    return commands


class _Sent:
    """A binding message's fields as its REST body holds them: only those set (a scalar without
    presence at its default is absent, as in the message's JSON mapping), each checked by the REST
    model's type; an absent field the model requires is refused as REST refuses it."""

    def __init__(self, msg: Message, fields: _Fields, at: str) -> None:
        self._sent = {descriptor.name: value for descriptor, value in msg.ListFields()}
        self._fields = fields
        self._at = at

    def required(self, field: str, name: str) -> Any:
        if field not in self._sent:
            raise Invalid(f"{self._at}{name}: Field required")
        return self._fields.check(name, self._sent[field], self._at)

    def optional(self, field: str, name: str, default: Any = None) -> Any:
        if field not in self._sent:
            return default
        return self._fields.check(name, self._sent[field], self._at)

    def nested(self, field: str, read: Callable[[Any, str], Any]) -> Any:
        return read(self._sent[field], f"{self._at}{_alias(field)}.") if field in self._sent else None


def _alias(field: str) -> str:
    head, *rest = field.split("_")
    return head + "".join(part.title() for part in rest)


def _activation(msg: pb.Activation, at: str) -> c.ActivateStep:
    sent = _Sent(msg, _ACTIVATE, at)
    return c.ActivateStep(
        attempt=sent.required("attempt", "attempt"),
        producer_id=sent.required("producer_id", "producerId"),
        heartbeat_interval_seconds=sent.optional("heartbeat_interval_seconds", "heartbeatIntervalSeconds"),
        heartbeat_timeout_seconds=sent.optional("heartbeat_timeout_seconds", "heartbeatTimeoutSeconds"),
        temporal_activity=sent.nested("temporal_activity", _temporal_activity),
        started=sent.nested("started_event", _started_event),
        events=_bound_events(msg.events, at),
        task_id=sent.required("task_id", "taskId"),
        step_id=sent.required("step_id", "stepId"),
    )


def _registration(msg: pb.Registration, at: str) -> c.RegisterExecution:
    sent = _Sent(msg, _REGISTER, at)
    return c.RegisterExecution(
        client_step_key=sent.required("client_step_key", "clientStepKey"),
        operation_code=sent.required("operation_code", "operationCode"),
        producer_id=sent.required("producer_id", "producerId"),
        attempt=sent.optional("attempt", "attempt", 1),
        parent_execution_id=sent.optional("parent_execution_id", "parentExecutionId"),
        display_name=sent.optional("display_name", "displayName"),
        failure_policy=sent.optional("failure_policy", "failurePolicy"),
        heartbeat_interval_seconds=sent.optional("heartbeat_interval_seconds", "heartbeatIntervalSeconds"),
        heartbeat_timeout_seconds=sent.optional("heartbeat_timeout_seconds", "heartbeatTimeoutSeconds"),
        temporal_activity=sent.nested("temporal_activity", _temporal_activity),
        started=sent.nested("started_event", _started_event),
        events=_bound_events(msg.events, at),
        task_id=sent.required("task_id", "taskId"),
    )


def _bound_events(events: Sequence[pb.Event], at: str) -> tuple[c.ReportEvent, ...]:
    """A binding's own events, as ``BoundEvents`` reads them (none names an execution handle)."""
    _BOUND_EVENTS(events, at)
    commands = tuple(report_event(e, f"{at}events.{i}.") for i, e in enumerate(events))
    if any(cmd.execution_handle is not None for cmd in commands):
        raise Invalid(f"{at}events: Value error, {UNBOUND_IDENTITY}")
    return commands


def _temporal_activity(msg: pb.TemporalActivity, at: str) -> c.TemporalActivity:
    sent = _Sent(msg, _TEMPORAL, at)
    return c.TemporalActivity(
        sent.required("namespace", "namespace"),
        sent.required("workflow_id", "workflowId"),
        sent.required("run_id", "runId"),
        sent.required("activity_id", "activityId"),
    )


def _started_event(msg: pb.StartedEvent, at: str) -> c.StartedEvent:
    sent = _Sent(msg, _STARTED, at)
    return c.StartedEvent(
        sent.required("event_id", "eventId"),
        utc_instant(sent.required("occurred_at", "occurredAt")),
        sent.optional("source_seq", "sourceSeq", 1),
    )
