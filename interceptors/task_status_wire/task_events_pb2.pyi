from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Progress(_message.Message):
    __slots__ = ("current", "total", "unit")
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    current: float
    total: float
    unit: str
    def __init__(self, current: _Optional[float] = ..., total: _Optional[float] = ..., unit: _Optional[str] = ...) -> None: ...

class Data(_message.Message):
    __slots__ = ("schema", "value_json")
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    VALUE_JSON_FIELD_NUMBER: _ClassVar[int]
    schema: str
    value_json: str
    def __init__(self, schema: _Optional[str] = ..., value_json: _Optional[str] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("category", "code", "retryable", "user_message", "diagnostics_ref")
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    USER_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DIAGNOSTICS_REF_FIELD_NUMBER: _ClassVar[int]
    category: str
    code: str
    retryable: bool
    user_message: str
    diagnostics_ref: str
    def __init__(self, category: _Optional[str] = ..., code: _Optional[str] = ..., retryable: _Optional[bool] = ..., user_message: _Optional[str] = ..., diagnostics_ref: _Optional[str] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("event_id", "event_type", "source_seq", "occurred_at", "execution_handle", "workflow_id", "task_id", "task_type", "task_attempt", "step_id", "step_attempt", "execution_id", "operation_code", "producer_id", "business_status", "phase_code", "phase_label", "progress", "duration_ms", "data", "error", "failed_step_id")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_SEQ_FIELD_NUMBER: _ClassVar[int]
    OCCURRED_AT_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_HANDLE_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    TASK_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATION_CODE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    BUSINESS_STATUS_FIELD_NUMBER: _ClassVar[int]
    PHASE_CODE_FIELD_NUMBER: _ClassVar[int]
    PHASE_LABEL_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FAILED_STEP_ID_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    event_type: str
    source_seq: int
    occurred_at: str
    execution_handle: str
    workflow_id: str
    task_id: str
    task_type: str
    task_attempt: int
    step_id: str
    step_attempt: int
    execution_id: str
    operation_code: str
    producer_id: str
    business_status: str
    phase_code: str
    phase_label: str
    progress: Progress
    duration_ms: int
    data: Data
    error: Error
    failed_step_id: str
    def __init__(self, event_id: _Optional[str] = ..., event_type: _Optional[str] = ..., source_seq: _Optional[int] = ..., occurred_at: _Optional[str] = ..., execution_handle: _Optional[str] = ..., workflow_id: _Optional[str] = ..., task_id: _Optional[str] = ..., task_type: _Optional[str] = ..., task_attempt: _Optional[int] = ..., step_id: _Optional[str] = ..., step_attempt: _Optional[int] = ..., execution_id: _Optional[str] = ..., operation_code: _Optional[str] = ..., producer_id: _Optional[str] = ..., business_status: _Optional[str] = ..., phase_code: _Optional[str] = ..., phase_label: _Optional[str] = ..., progress: _Optional[_Union[Progress, _Mapping]] = ..., duration_ms: _Optional[int] = ..., data: _Optional[_Union[Data, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., failed_step_id: _Optional[str] = ...) -> None: ...

class Rejection(_message.Message):
    __slots__ = ("code", "message", "retryable")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    retryable: bool
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., retryable: _Optional[bool] = ...) -> None: ...

class EventResult(_message.Message):
    __slots__ = ("event_id", "accepted", "duplicate", "stale", "task_id", "step_id", "operation_code", "task_version", "step_version", "lifecycle_status", "business_status", "task_lifecycle_status", "committed_at", "error")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATION_CODE_FIELD_NUMBER: _ClassVar[int]
    TASK_VERSION_FIELD_NUMBER: _ClassVar[int]
    STEP_VERSION_FIELD_NUMBER: _ClassVar[int]
    LIFECYCLE_STATUS_FIELD_NUMBER: _ClassVar[int]
    BUSINESS_STATUS_FIELD_NUMBER: _ClassVar[int]
    TASK_LIFECYCLE_STATUS_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    accepted: bool
    duplicate: bool
    stale: bool
    task_id: str
    step_id: str
    operation_code: str
    task_version: str
    step_version: str
    lifecycle_status: str
    business_status: str
    task_lifecycle_status: str
    committed_at: str
    error: Rejection
    def __init__(self, event_id: _Optional[str] = ..., accepted: _Optional[bool] = ..., duplicate: _Optional[bool] = ..., stale: _Optional[bool] = ..., task_id: _Optional[str] = ..., step_id: _Optional[str] = ..., operation_code: _Optional[str] = ..., task_version: _Optional[str] = ..., step_version: _Optional[str] = ..., lifecycle_status: _Optional[str] = ..., business_status: _Optional[str] = ..., task_lifecycle_status: _Optional[str] = ..., committed_at: _Optional[str] = ..., error: _Optional[_Union[Rejection, _Mapping]] = ...) -> None: ...

class EventBatch(_message.Message):
    __slots__ = ("events", "heartbeats", "bindings")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEATS_FIELD_NUMBER: _ClassVar[int]
    BINDINGS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[Event]
    heartbeats: _containers.RepeatedCompositeFieldContainer[Heartbeat]
    bindings: _containers.RepeatedCompositeFieldContainer[BindItem]
    def __init__(self, events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., heartbeats: _Optional[_Iterable[_Union[Heartbeat, _Mapping]]] = ..., bindings: _Optional[_Iterable[_Union[BindItem, _Mapping]]] = ...) -> None: ...

class EventBatchResult(_message.Message):
    __slots__ = ("results", "heartbeats", "bindings")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEATS_FIELD_NUMBER: _ClassVar[int]
    BINDINGS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[EventResult]
    heartbeats: HeartbeatBatchResult
    bindings: _containers.RepeatedCompositeFieldContainer[BindResult]
    def __init__(self, results: _Optional[_Iterable[_Union[EventResult, _Mapping]]] = ..., heartbeats: _Optional[_Union[HeartbeatBatchResult, _Mapping]] = ..., bindings: _Optional[_Iterable[_Union[BindResult, _Mapping]]] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("heartbeat_seq", "observed_at", "execution_handle", "execution_token", "execution_id", "completes_elsewhere")
    HEARTBEAT_SEQ_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_AT_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_HANDLE_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    COMPLETES_ELSEWHERE_FIELD_NUMBER: _ClassVar[int]
    heartbeat_seq: int
    observed_at: str
    execution_handle: str
    execution_token: str
    execution_id: str
    completes_elsewhere: bool
    def __init__(self, heartbeat_seq: _Optional[int] = ..., observed_at: _Optional[str] = ..., execution_handle: _Optional[str] = ..., execution_token: _Optional[str] = ..., execution_id: _Optional[str] = ..., completes_elsewhere: _Optional[bool] = ...) -> None: ...

class HeartbeatResult(_message.Message):
    __slots__ = ("execution_id", "accepted", "health", "reason", "expires_at", "execution_token")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_TOKEN_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    accepted: bool
    health: str
    reason: str
    expires_at: str
    execution_token: str
    def __init__(self, execution_id: _Optional[str] = ..., accepted: _Optional[bool] = ..., health: _Optional[str] = ..., reason: _Optional[str] = ..., expires_at: _Optional[str] = ..., execution_token: _Optional[str] = ...) -> None: ...

class HeartbeatBatch(_message.Message):
    __slots__ = ("heartbeats",)
    HEARTBEATS_FIELD_NUMBER: _ClassVar[int]
    heartbeats: _containers.RepeatedCompositeFieldContainer[Heartbeat]
    def __init__(self, heartbeats: _Optional[_Iterable[_Union[Heartbeat, _Mapping]]] = ...) -> None: ...

class HeartbeatBatchResult(_message.Message):
    __slots__ = ("results", "received_at")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_AT_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[HeartbeatResult]
    received_at: str
    def __init__(self, results: _Optional[_Iterable[_Union[HeartbeatResult, _Mapping]]] = ..., received_at: _Optional[str] = ...) -> None: ...

class Bind(_message.Message):
    __slots__ = ("execution_token",)
    EXECUTION_TOKEN_FIELD_NUMBER: _ClassVar[int]
    execution_token: str
    def __init__(self, execution_token: _Optional[str] = ...) -> None: ...

class Bound(_message.Message):
    __slots__ = ("ref", "execution_id", "task_id", "step_id")
    REF_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    ref: int
    execution_id: str
    task_id: str
    step_id: str
    def __init__(self, ref: _Optional[int] = ..., execution_id: _Optional[str] = ..., task_id: _Optional[str] = ..., step_id: _Optional[str] = ...) -> None: ...

class StreamEvent(_message.Message):
    __slots__ = ("ref", "event")
    REF_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    ref: int
    event: Event
    def __init__(self, ref: _Optional[int] = ..., event: _Optional[_Union[Event, _Mapping]] = ...) -> None: ...

class StreamHeartbeat(_message.Message):
    __slots__ = ("ref", "heartbeat_seq", "observed_at")
    REF_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_SEQ_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_AT_FIELD_NUMBER: _ClassVar[int]
    ref: int
    heartbeat_seq: int
    observed_at: str
    def __init__(self, ref: _Optional[int] = ..., heartbeat_seq: _Optional[int] = ..., observed_at: _Optional[str] = ...) -> None: ...

class StreamRequest(_message.Message):
    __slots__ = ("request_id", "bind", "event", "heartbeat")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    BIND_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    bind: Bind
    event: StreamEvent
    heartbeat: StreamHeartbeat
    def __init__(self, request_id: _Optional[int] = ..., bind: _Optional[_Union[Bind, _Mapping]] = ..., event: _Optional[_Union[StreamEvent, _Mapping]] = ..., heartbeat: _Optional[_Union[StreamHeartbeat, _Mapping]] = ...) -> None: ...

class StreamResponse(_message.Message):
    __slots__ = ("request_id", "bound", "event", "heartbeat", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    BOUND_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    bound: Bound
    event: EventResult
    heartbeat: HeartbeatResult
    error: Rejection
    def __init__(self, request_id: _Optional[int] = ..., bound: _Optional[_Union[Bound, _Mapping]] = ..., event: _Optional[_Union[EventResult, _Mapping]] = ..., heartbeat: _Optional[_Union[HeartbeatResult, _Mapping]] = ..., error: _Optional[_Union[Rejection, _Mapping]] = ...) -> None: ...

class TemporalActivity(_message.Message):
    __slots__ = ("namespace", "workflow_id", "run_id", "activity_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ACTIVITY_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    workflow_id: str
    run_id: str
    activity_id: str
    def __init__(self, namespace: _Optional[str] = ..., workflow_id: _Optional[str] = ..., run_id: _Optional[str] = ..., activity_id: _Optional[str] = ...) -> None: ...

class StartedEvent(_message.Message):
    __slots__ = ("event_id", "occurred_at", "source_seq")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    OCCURRED_AT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_SEQ_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    occurred_at: str
    source_seq: int
    def __init__(self, event_id: _Optional[str] = ..., occurred_at: _Optional[str] = ..., source_seq: _Optional[int] = ...) -> None: ...

class Activation(_message.Message):
    __slots__ = ("task_id", "step_id", "attempt", "producer_id", "heartbeat_interval_seconds", "heartbeat_timeout_seconds", "temporal_activity", "started_event", "events")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TEMPORAL_ACTIVITY_FIELD_NUMBER: _ClassVar[int]
    STARTED_EVENT_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    step_id: str
    attempt: int
    producer_id: str
    heartbeat_interval_seconds: int
    heartbeat_timeout_seconds: int
    temporal_activity: TemporalActivity
    started_event: StartedEvent
    events: _containers.RepeatedCompositeFieldContainer[Event]
    def __init__(self, task_id: _Optional[str] = ..., step_id: _Optional[str] = ..., attempt: _Optional[int] = ..., producer_id: _Optional[str] = ..., heartbeat_interval_seconds: _Optional[int] = ..., heartbeat_timeout_seconds: _Optional[int] = ..., temporal_activity: _Optional[_Union[TemporalActivity, _Mapping]] = ..., started_event: _Optional[_Union[StartedEvent, _Mapping]] = ..., events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ...) -> None: ...

class Registration(_message.Message):
    __slots__ = ("task_id", "client_step_key", "operation_code", "producer_id", "attempt", "parent_execution_id", "display_name", "failure_policy", "heartbeat_interval_seconds", "heartbeat_timeout_seconds", "temporal_activity", "started_event", "events")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_STEP_KEY_FIELD_NUMBER: _ClassVar[int]
    OPERATION_CODE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    PARENT_EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    FAILURE_POLICY_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TEMPORAL_ACTIVITY_FIELD_NUMBER: _ClassVar[int]
    STARTED_EVENT_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    client_step_key: str
    operation_code: str
    producer_id: str
    attempt: int
    parent_execution_id: str
    display_name: str
    failure_policy: str
    heartbeat_interval_seconds: int
    heartbeat_timeout_seconds: int
    temporal_activity: TemporalActivity
    started_event: StartedEvent
    events: _containers.RepeatedCompositeFieldContainer[Event]
    def __init__(self, task_id: _Optional[str] = ..., client_step_key: _Optional[str] = ..., operation_code: _Optional[str] = ..., producer_id: _Optional[str] = ..., attempt: _Optional[int] = ..., parent_execution_id: _Optional[str] = ..., display_name: _Optional[str] = ..., failure_policy: _Optional[str] = ..., heartbeat_interval_seconds: _Optional[int] = ..., heartbeat_timeout_seconds: _Optional[int] = ..., temporal_activity: _Optional[_Union[TemporalActivity, _Mapping]] = ..., started_event: _Optional[_Union[StartedEvent, _Mapping]] = ..., events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ...) -> None: ...

class BindItem(_message.Message):
    __slots__ = ("activate", "register")
    ACTIVATE_FIELD_NUMBER: _ClassVar[int]
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    activate: Activation
    register: Registration
    def __init__(self, activate: _Optional[_Union[Activation, _Mapping]] = ..., register: _Optional[_Union[Registration, _Mapping]] = ...) -> None: ...

class BindBatch(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[BindItem]
    def __init__(self, items: _Optional[_Iterable[_Union[BindItem, _Mapping]]] = ...) -> None: ...

class BindResult(_message.Message):
    __slots__ = ("status", "error", "workflow_id", "task_id", "step_id", "operation_code", "step_attempt", "execution_id", "producer_id", "heartbeat_interval_seconds", "heartbeat_timeout_seconds", "execution_token", "execution_handle", "task_version", "step_version", "created", "expires_at", "started_event", "events")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATION_CODE_FIELD_NUMBER: _ClassVar[int]
    STEP_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_HANDLE_FIELD_NUMBER: _ClassVar[int]
    TASK_VERSION_FIELD_NUMBER: _ClassVar[int]
    STEP_VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_EVENT_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    status: int
    error: Rejection
    workflow_id: str
    task_id: str
    step_id: str
    operation_code: str
    step_attempt: int
    execution_id: str
    producer_id: str
    heartbeat_interval_seconds: int
    heartbeat_timeout_seconds: int
    execution_token: str
    execution_handle: str
    task_version: str
    step_version: str
    created: bool
    expires_at: str
    started_event: EventResult
    events: _containers.RepeatedCompositeFieldContainer[EventResult]
    def __init__(self, status: _Optional[int] = ..., error: _Optional[_Union[Rejection, _Mapping]] = ..., workflow_id: _Optional[str] = ..., task_id: _Optional[str] = ..., step_id: _Optional[str] = ..., operation_code: _Optional[str] = ..., step_attempt: _Optional[int] = ..., execution_id: _Optional[str] = ..., producer_id: _Optional[str] = ..., heartbeat_interval_seconds: _Optional[int] = ..., heartbeat_timeout_seconds: _Optional[int] = ..., execution_token: _Optional[str] = ..., execution_handle: _Optional[str] = ..., task_version: _Optional[str] = ..., step_version: _Optional[str] = ..., created: _Optional[bool] = ..., expires_at: _Optional[str] = ..., started_event: _Optional[_Union[EventResult, _Mapping]] = ..., events: _Optional[_Iterable[_Union[EventResult, _Mapping]]] = ...) -> None: ...

class BindBatchResult(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[BindResult]
    def __init__(self, results: _Optional[_Iterable[_Union[BindResult, _Mapping]]] = ...) -> None: ...
