"""The shapes of what the projections publish and the snapshot API returns: each written once, here.

These TypedDicts are the contract with clients. ``status.domain.projections`` builds them (mypy
holds every builder to its shape), ``status.api.openapi`` generates their JSON schemas from them,
and a test holds ``web/src/types.ts`` to them field by field (names, optional, nullable) and
validates built messages against the generated schemas. Adding a field: add it here and where it
is built, then regenerate docs/openapi.json and add it to the TypeScript (CONTRIBUTING.md).

A key that may be absent (an estimate, sent only when known) is in a ``total=False`` class.
``Annotated[str, SomeEnum]`` is a string holding one of that
enumeration's values; ``Annotated[T, "text"]`` describes a field in the OpenAPI document.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypedDict

from status.domain.definitions import Severity
from status.domain.lifecycle import EventType, Health, Lifecycle
from status.domain.notices import NoticeKind

Timestamp = Annotated[str, "UTC, milliseconds: 2026-09-21T07:10:18.156Z"]
Version = Annotated[str, "decimal; only goes up (compare as integers, never as floats)"]
DurationSource = Annotated[str, "PRODUCER_MONOTONIC (the producer measured it) or WALL_CLOCK_ESTIMATE"]


class Progress(TypedDict):
    current: float | None
    total: float | None
    unit: str | None
    percent: float | None


class TaskProgress(TypedDict):
    completedSteps: int
    totalSteps: int
    percent: float | None
    addedSteps: Annotated[int, "steps registered while running (not in totalSteps)"]
    addedCompletedSteps: int


class Estimate(TypedDict, total=False):
    """Sent only when known (both keys or neither)."""

    etaMs: Annotated[int, "estimated milliseconds left as of asOf (absent when unknown); clients count down locally"]
    etaConfidence: Annotated[float, "how much to trust etaMs, 0-1"]


class Notice(TypedDict):
    id: Annotated[str, "taskId:taskVersion"]
    type: Annotated[str, NoticeKind]
    level: Annotated[str, Severity]
    title: str
    message: str | None
    operationCode: str | None
    errorCode: str | None
    retryable: bool | None
    requiresAction: bool
    actions: list[str]
    stepId: str | None


class TaskFailure(TypedDict):
    category: str | None
    code: str
    userMessage: str | None
    retryable: bool | None
    failedStepId: str | None


class Timing(TypedDict):
    queueDurationMs: int | None
    runDurationMs: int | None
    totalDurationMs: int | None
    durationSource: DurationSource
    elapsedMs: Annotated[int | None, "elapsed at asOf; clients tick it forward while the task runs"]


class TaskFacts(Timing):
    """What a task's own row says."""

    taskVersion: Version
    title: str | None
    productId: str | None
    taskType: str | None
    lifecycleStatus: Annotated[str, Lifecycle]
    businessStatus: str | None
    health: Annotated[str, Health]
    stuckSince: Annotated[Timestamp | None, "since when Temporal reports the task's run stuck (STALE meanwhile)"]
    endReason: Annotated[str | None, "why it ended so, when its ending said (a failure's is in failure)"]
    createdAt: Timestamp | None
    startedAt: Timestamp | None
    finishedAt: Timestamp | None
    asOf: Annotated[Timestamp, "the server's time the state was computed at"]
    failure: TaskFailure | None
    failedStepId: str | None


class TaskCore(TaskFacts, Estimate):
    """What the summary and the full state both say of a task."""

    silentSince: Annotated[Timestamp | None, "while STALE: when the silent executor last proved alive"]
    needsAction: Annotated[bool, "a step failed and waits for the user"]
    progress: TaskProgress


class CurrentStep(TypedDict):
    stepId: str
    operationCode: str
    displayName: str | None
    phaseLabel: str | None
    progress: Progress | None


class TaskSummaryMessage(TaskCore):
    """``task.summary`` on a user's (or a project's, a role's) channel: no step data, no results."""

    kind: Literal["task.summary"]
    schemaVersion: int
    workflowId: str
    taskId: str
    currentStep: CurrentStep | None
    notice: Notice | None


class StepError(TypedDict):
    category: str | None
    code: str
    retryable: bool | None
    userMessage: Annotated[str | None, "safe to show: redacted and length-limited by the service"]


class StepData(TypedDict):
    schema: str
    value: Any


class StepDetail(Estimate):
    stepId: str
    attempt: int
    executionId: str | None
    operationCode: str
    displayName: str | None
    kind: Annotated[str, "KNOWN or DYNAMIC"]
    parentExecutionId: str | None
    lifecycleStatus: Annotated[str, Lifecycle]
    businessStatus: str | None
    health: Annotated[str, Health]
    stepVersion: Version
    activatedAt: Timestamp | None
    startedAt: Timestamp | None
    finishedAt: Timestamp | None
    durationMs: int | None
    durationSource: DurationSource
    progress: Progress | None
    phaseCode: str | None
    phaseLabel: str | None
    data: StepData | None
    error: StepError | None
    failurePolicy: str | None
    lastHeartbeatAt: Annotated[Timestamp | None, "while STALE: when its executor last proved alive"]
    staleSince: Timestamp | None


class TaskSnapshot(TaskCore):
    """The full state: ``GET /api/tasks/{taskId}`` and batchGet's entries, every step attempt."""

    workflowId: str
    taskId: str
    summary: StepData | None
    steps: list[StepDetail]


class TaskDetailState(TaskSnapshot):
    """``task.detail``'s state: a large task's steps are a window of its attempts."""

    stepCount: Annotated[int, "all attempts of the task"]
    stepsOmitted: Annotated[int, "how many attempts steps leaves out"]


class TriggerFacts(TypedDict, total=False):
    """A report's own facts: absent when the change was not a report (an operator's correction)."""

    durationMs: int | None
    data: Annotated[StepData | None, "the step's data, when the event carried it"]


class TriggerEvent(TriggerFacts):
    """The committed event that produced a ``task.detail``'s version: a timeline entry."""

    eventId: str
    eventType: Annotated[str, EventType]
    stepId: str | None
    operationCode: str | None
    committedAt: Timestamp


class TaskDetailMessage(TypedDict):
    """``task.detail`` on a task's detail channel."""

    kind: Literal["task.detail"]
    schemaVersion: int
    workflowId: str
    taskId: str
    taskVersion: Version
    triggerEvent: TriggerEvent | None
    state: TaskDetailState


class TaskRemovedMessage(TypedDict):
    """A tombstone: the principal no longer sees the task."""

    kind: Literal["task.removed"]
    schemaVersion: int
    workflowId: str
    taskId: str
    taskVersion: Version


class TaskProjectMessage(TypedDict):
    """``task.project``: a project's aggregate view of a task (no titles, results or errors)."""

    kind: Literal["task.project"]
    schemaVersion: int
    workflowId: str
    taskId: str
    taskVersion: Version
    taskType: str | None
    lifecycleStatus: Annotated[str, Lifecycle]
    health: Annotated[str, Health]
    progress: TaskProgress
    asOf: Timestamp


class WorkflowSummaryMessage(TypedDict):
    """``workflow.summary``: the aggregate, with a workflowVersion never compared to task versions."""

    kind: Literal["workflow.summary"]
    schemaVersion: int
    workflowId: str
    taskId: None
    workflowVersion: Version
    title: str | None
    workflowType: str | None
    lifecycleStatus: Annotated[str, Lifecycle]
    health: Annotated[str, Health]
    taskCount: int
    aggregate: dict[str, Any] | None
    createdAt: Timestamp | None
    startedAt: Timestamp | None
    finishedAt: Timestamp | None
    asOf: Timestamp


class SystemNoticeMessage(TypedDict):
    """A broadcast notice (system, tenant, project, user fan-out): the service's text, never task data."""

    kind: Literal["system.notice"]
    schemaVersion: int
    workflowId: None
    taskId: None
    id: str
    level: str
    text: str
    asOf: Timestamp


class WorkflowTasks(TypedDict):
    """``GET /api/workflows/{workflowId}/tasks``: the summary and the tasks the user sees."""

    workflow: WorkflowSummaryMessage
    tasks: list[TaskSummaryMessage]


# Every message published or returned whole, by the name clients know it by.
MESSAGES: tuple[type, ...] = (
    TaskSummaryMessage,
    TaskDetailMessage,
    TaskSnapshot,
    TaskRemovedMessage,
    TaskProjectMessage,
    WorkflowSummaryMessage,
    SystemNoticeMessage,
    WorkflowTasks,
)
