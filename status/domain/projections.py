"""Projections (design D8.12, D9): whitelisted views built from validated current state.

Nothing here forwards producer JSON: each builder picks named fields from the
current state, so a producer can't leak a field into a wider audience.
Versions travel as decimal strings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import overload

from status.domain import shapes
from status.domain.eta import DurationStats, Estimate, pending_estimate, step_estimate, task_estimate
from status.domain.lifecycle import EventType, Health, Lifecycle
from status.domain.model import Progress, StepState, TaskState, WorkflowState
from status.domain.notices import Notice
from status.domain.rules import ms_between, task_timing
from status.domain.stepset import StepSet

SCHEMA_VERSION = 1


class Projection:
    USER_SUMMARY = "USER_SUMMARY"
    TASK_DETAIL = "TASK_DETAIL"
    WORKFLOW_SUMMARY = "WORKFLOW_SUMMARY"
    PROJECT_BROADCAST = "PROJECT_BROADCAST"
    TENANT_BROADCAST = "TENANT_BROADCAST"
    SYSTEM_BROADCAST = "SYSTEM_BROADCAST"
    USER_BROADCAST = "USER_BROADCAST"  # one notice to many users' summary channels (relay: Centrifugo broadcast)
    UNSUBSCRIBE = "UNSUBSCRIBE"  # end a user's subscriptions to a channel (relay: Centrifugo unsubscribe)
    USER_NOTIFICATION = "USER_NOTIFICATION"  # hint on a user's channel: a durable notification was created


@overload
def iso(ts: datetime) -> str: ...
@overload
def iso(ts: datetime | None) -> str | None: ...
def iso(ts: datetime | None) -> str | None:
    """UTC timestamps with milliseconds, e.g. 2026-09-21T07:10:18.156Z."""
    if ts is None:
        return None
    if ts.tzinfo is not None:  # stored timestamps are naive UTC; an aware one is shown in UTC too
        ts = ts.astimezone(UTC).replace(tzinfo=None)
    # isoformat is several times cheaper than strftime, and projections format every timestamp they show.
    return ts.isoformat(timespec="milliseconds") + "Z"


def user_channel(tenant_id: str, user_id: str) -> str:
    return f"task_user:{tenant_id}/{user_id}"


def detail_channel(tenant_id: str, task_id: str) -> str:
    return f"task_detail:{tenant_id}/{task_id}"


def workflow_channel(tenant_id: str, workflow_id: str) -> str:
    return f"workflow_summary:{tenant_id}/{workflow_id}"


def project_channel(tenant_id: str, project_id: str) -> str:
    return f"task_project:{tenant_id}/{project_id}"


def shared_channel(tenant_id: str, principal_type: str, principal_id: str) -> str:
    """Summaries of the tasks granted to a PROJECT or ROLE, for its members (subscribed by their connection)."""
    return f"task_shared:{tenant_id}/{principal_type.lower()}.{principal_id}"


def tenant_channel(tenant_id: str) -> str:
    return f"task_tenant:{tenant_id}"


SYSTEM_CHANNEL = "task_system:public"


def _progress(progress: Progress | None) -> shapes.Progress | None:
    if progress is None:
        return None
    return {"current": progress.current, "total": progress.total, "unit": progress.unit, "percent": progress.percent}


Steps = StepSet | Iterable[StepState]
# operationCode → past durations of that operation for the task's type (status.domain.eta)
History = Mapping[str, DurationStats | None]


def _task_eta(task: TaskState, steps: StepSet, history: History | None, now: datetime) -> Estimate | None:
    """The task's estimate: its running attempts, then its pending steps counted per operation (a
    task with a thousand pending steps costs as much as one with three operations)."""
    if history is None or task.lifecycle.terminal:
        return None
    running = [step_estimate(s, history.get(s.operation_code), now) for s in steps.active_current()]
    pending = [(count, history.get(op)) for op, count in steps.pending_ops.items()]
    return task_estimate(task.lifecycle, running, [(count, pending_estimate(stats)) for count, stats in pending])


def _step_listed(task: TaskState, step: StepState, history: History | None, now: datetime) -> shapes.StepDetail:
    """A step attempt as a detail state lists it, with its estimate while the task and it go on."""
    if history is None or task.lifecycle.terminal or step.lifecycle.terminal:
        return _step_detail(step)
    stats = history.get(step.operation_code)
    if step.lifecycle is Lifecycle.PENDING:
        return _pending_detail(step, stats)
    return _step_detail(step, step_estimate(step, stats, now))


def _needs_action(task: TaskState, steps: StepSet) -> bool:
    """Unfinished, with a step that failed and waits for the user (WAIT_FOR_USER)."""
    return not task.lifecycle.terminal and bool(steps.waiting)


def _silent_since(task: TaskState, steps: StepSet) -> str | None:
    """While a task is STALE: since when its silent executor last proved alive (for "no heartbeat for 40 s")."""
    if task.health is not Health.STALE:
        return None
    seen = [s.last_heartbeat_at or s.started_at or s.activated_at for s in steps.stale_current()]
    known = [t for t in seen if t is not None]
    return iso(min(known)) if known else None


def _as_set(steps: Steps) -> StepSet:
    return steps if isinstance(steps, StepSet) else StepSet.of(steps)


def task_progress(steps: Steps, lifecycle: Lifecycle | None = None) -> shapes.TaskProgress:
    """Progress over the KNOWN steps (their count is fixed up front, so it never goes backwards);
    ``addedSteps`` counts the steps registered while running and ``addedCompletedSteps`` those of
    them that succeeded, shown beside it. A SUCCEEDED task is done: 100 %, though a known step it
    never needed did not run (``completedSteps`` still counts what ran)."""
    step_set = _as_set(steps)
    done = step_set.known_done[0]
    running = [s for s in step_set.active_current() if s.lifecycle is Lifecycle.RUNNING and s.step_kind == "KNOWN"]
    partial = sum((s.progress.percent or 0) / 100 for s in running if s.progress)
    total = len(step_set.known)
    percent = round(100 * (done + partial) / total, 2) if total else None
    if lifecycle is Lifecycle.SUCCEEDED:
        percent = 100.0
    return {
        "completedSteps": done,
        "totalSteps": total,
        "percent": percent,
        "addedSteps": step_set.added,
        "addedCompletedSteps": step_set.added_done[0],
    }


def _step_detail(step: StepState, estimate: Estimate | None = None) -> shapes.StepDetail:
    """A step attempt as detail messages list it: what the step says, plus its estimate (which
    moves with time, so it is added fresh every time)."""
    seen = _SEEN_STEPS.get(id(step))
    if seen is not None and seen[0] is step:
        shown = seen[1]
    else:
        shown = _step_shown(step)
        if len(_SEEN_STEPS) >= SEEN_STEPS_KEPT:
            _SEEN_STEPS.pop(next(iter(_SEEN_STEPS)), None)  # the oldest
        _SEEN_STEPS[id(step)] = (step, shown)
    return {**shown, **estimate.to_json()} if estimate else shown


def _pending_detail(step: StepState, stats: DurationStats | None) -> shapes.StepDetail:
    """A step not started yet, with its estimate: its operation's typical duration, which time
    passing does not move. Most steps of a long task wait, and each of its messages lists them
    all: the listing is kept with the step's, for as long as the operation's statistics are the
    same object (the duration history replaces them when it reads or learns more)."""
    seen = _SEEN_PENDING.get(id(step))
    if seen is not None and seen[0] is step and seen[1] is stats:
        return seen[2]
    listed = _step_detail(step, pending_estimate(stats))
    if len(_SEEN_PENDING) >= SEEN_STEPS_KEPT:
        _SEEN_PENDING.pop(next(iter(_SEEN_PENDING)), None)  # the oldest
    _SEEN_PENDING[id(step)] = (step, stats, listed)
    return listed


# Every message of a task lists its steps again, while an event changes one of them at most.
# Step states are frozen (a change is a new object), so what a step shows is kept for the steps
# seen last, by the object itself (held here, so its id is not reused while it is kept); a task's
# next message builds only the steps that changed. Messages are encoded, never changed.
SEEN_STEPS_KEPT = 8192
_SEEN_STEPS: dict[int, tuple[StepState, shapes.StepDetail]] = {}
_SEEN_PENDING: dict[int, tuple[StepState, DurationStats | None, shapes.StepDetail]] = {}


def _step_shown(step: StepState) -> shapes.StepDetail:
    error: shapes.StepError | None = None
    if step.error is not None:
        # diagnosticsRef stays server-side (design D5: for operators only).
        error = {
            "category": step.error.category,
            "code": step.error.code,
            "retryable": step.error.retryable,
            "userMessage": step.error.user_message or None,
        }
    return {
        "stepId": step.step_id,
        "attempt": step.attempt,
        "executionId": step.execution_id,
        "operationCode": step.operation_code,
        "displayName": step.display_name,
        "kind": step.step_kind,
        "parentExecutionId": step.parent_execution_id,
        "lifecycleStatus": step.lifecycle.value,
        "businessStatus": step.business_status,
        "health": step.health.value,
        "stepVersion": str(step.version),
        "activatedAt": iso(step.activated_at),
        "startedAt": iso(step.started_at),
        "finishedAt": iso(step.finished_at),
        # The producer's measure; a step ended for it (its run closed, Temporal's record) by the wall clock.
        "durationMs": step.duration_ms
        if step.duration_ms is not None or step.finished_at is None
        else ms_between(step.started_at, step.finished_at),
        # As a task says it: the producer's monotonic measure, or the service's wall-clock estimate.
        "durationSource": "PRODUCER_MONOTONIC" if step.duration_ms is not None else "WALL_CLOCK_ESTIMATE",
        "progress": _progress(step.progress),
        "phaseCode": step.phase_code,
        "phaseLabel": step.phase_label,
        "data": {"schema": step.data_schema, "value": step.state_data} if step.data_schema else None,
        "error": error,
        "failurePolicy": step.failure_policy,
        # While STALE: when the executor last proved alive, so a UI can say how long it has been silent.
        "lastHeartbeatAt": iso(step.last_heartbeat_at or step.started_at) if step.health is Health.STALE else None,
        "staleSince": iso(step.stale_since),
    }


def _task_core(task: TaskState, now: datetime) -> shapes.TaskFacts:
    return {
        "taskVersion": str(task.version),
        "title": task.title,
        "productId": task.product_id,
        "taskType": task.task_type,
        "lifecycleStatus": task.lifecycle.value,
        "businessStatus": task.business_status,
        "health": task.health.value,
        # Temporal reports the owning run stuck since then (health STALE while it is).
        "stuckSince": iso(task.stuck_since),
        # Why it ended so, when its ending said (a cancel's or a timeout's reason; a failure's is in failure).
        "endReason": task.end_reason,
        "createdAt": iso(task.created_at),
        "startedAt": iso(task.started_at),
        "finishedAt": iso(task.finished_at),
        "asOf": iso(now),
        **task_timing(task, now),
        # The projection of TASK_FAILED's error (design D6.1): never its diagnosticsRef.
        "failure": {
            "category": task.failure.category,
            "code": task.failure.code,
            "userMessage": task.failure.user_message or None,
            "retryable": task.failure.retryable,
            "failedStepId": task.failed_step_id,
        }
        if task.failure
        else None,
        "failedStepId": task.failed_step_id,
    }


def task_snapshot(task: TaskState, steps: Steps, now: datetime, history: History | None = None) -> shapes.TaskSnapshot:
    """The full detail state (GET /api/tasks/{id}): every step attempt."""
    step_set = _as_set(steps)
    return _state(task, step_set, step_set.all(), now, history)


def _state(
    task: TaskState,
    steps: StepSet,
    shown: Sequence[StepState],
    now: datetime,
    history: History | None,
    common: shapes.TaskCore | None = None,
) -> shapes.TaskSnapshot:
    return {
        "workflowId": task.workflow_id,
        "taskId": task.task_id,
        **(common if common is not None else _common(task, steps, now, history)),
        "summary": {"schema": task.summary_schema, "value": task.summary_data} if task.summary_schema else None,
        "steps": [_step_listed(task, s, history, now) for s in shown],
    }


NO_ESTIMATE: shapes.Estimate = {}


def _common(task: TaskState, steps: StepSet, now: datetime, history: History | None) -> shapes.TaskCore:
    """What the summary and the detail state both say of a task, in the order both list it."""
    overall = _task_eta(task, steps, history, now)
    estimate = overall.to_json() if overall else NO_ESTIMATE
    return {
        **_task_core(task, now),
        **estimate,
        "silentSince": _silent_since(task, steps),
        "needsAction": _needs_action(task, steps),
        "progress": task_progress(steps, task.lifecycle),
    }


def user_summary(
    task: TaskState, steps: Steps, now: datetime, notice: Notice | None = None, history: History | None = None
) -> shapes.TaskSummaryMessage:
    """USER_SUMMARY: list-level state; no step data, no results, no diagnostics."""
    step_set = _as_set(steps)
    return _summary(task, step_set, notice, _common(task, step_set, now, history))


def _summary(
    task: TaskState, steps: StepSet, notice: Notice | None, common: shapes.TaskCore
) -> shapes.TaskSummaryMessage:
    running = steps.running()
    current = running[-1] if running else None
    return {
        "kind": "task.summary",
        "schemaVersion": SCHEMA_VERSION,
        "workflowId": task.workflow_id,
        "taskId": task.task_id,
        **common,
        "currentStep": {
            "stepId": current.step_id,
            "operationCode": current.operation_code,
            "displayName": current.display_name,
            "phaseLabel": current.phase_label,
            "progress": _progress(current.progress),
        }
        if current
        else None,
        "notice": notice.to_json() if notice else None,
    }


def task_detail(
    task: TaskState,
    steps: Steps,
    now: datetime,
    trigger: shapes.TriggerEvent | None,
    history: History | None = None,
) -> shapes.TaskDetailMessage:
    """TASK_DETAIL: the task state plus the event that produced this version.

    Its steps are the task's attempts up to ``DETAIL_WINDOW``; a larger task
    shows its unfinished and most recently changed attempts and says how many
    it left out (``stepCount``, ``stepsOmitted``), so a message's size and cost
    stay bounded however many steps an agent registers; the snapshot API
    returns them all.
    """
    return _detail(task, _as_set(steps), now, trigger, history)


def _detail(
    task: TaskState,
    steps: StepSet,
    now: datetime,
    trigger: shapes.TriggerEvent | None,
    history: History | None,
    common: shapes.TaskCore | None = None,
) -> shapes.TaskDetailMessage:
    shown, omitted = steps.window()
    state = _state(task, steps, shown, now, history, common)
    return {
        "kind": "task.detail",
        "schemaVersion": SCHEMA_VERSION,
        "workflowId": task.workflow_id,
        "taskId": task.task_id,
        "taskVersion": str(task.version),
        "triggerEvent": trigger,
        "state": {**state, "stepCount": len(steps), "stepsOmitted": omitted},
    }


def trigger_event(
    event_id: str,
    event_type: EventType,
    step: StepState | None,
    committed_at: datetime,
    *,
    reported: bool,
    duration_ms: int | None = None,
    with_data: bool = False,
) -> shapes.TriggerEvent:
    """``triggerEvent``: the event a change committed, as its detail message names it. A report
    (``reported``) also says its duration and, ``with_data``, the data it gave its step (``step``
    as the change left it); an operator's correction says neither."""
    trigger: shapes.TriggerEvent = {
        "eventId": event_id,
        "eventType": event_type.value,
        "stepId": step.step_id if step else None,
        "operationCode": step.operation_code if step else None,
        "committedAt": iso(committed_at),
    }
    if reported:
        trigger["durationMs"] = duration_ms
        trigger["data"] = (
            {"schema": step.data_schema, "value": step.state_data}
            if step is not None and with_data and step.data_schema is not None
            else None
        )
    return trigger


def summary_and_detail(
    task: TaskState,
    steps: StepSet,
    now: datetime,
    notice: Notice | None,
    trigger: shapes.TriggerEvent | None,
    history: History | None = None,
) -> tuple[shapes.TaskSummaryMessage, shapes.TaskDetailMessage]:
    """``user_summary`` and ``task_detail`` of one change, what they share built once (the task's
    core, its estimate, its progress: half of what each costs). They may hold the same inner
    values: messages are encoded, never changed."""
    common = _common(task, steps, now, history)
    return _summary(task, steps, notice, common), _detail(task, steps, now, trigger, history, common)


def task_removed(task: TaskState) -> shapes.TaskRemovedMessage:
    """A tombstone: the principal no longer sees the task (ACL revoked)."""
    return {
        "kind": "task.removed",
        "schemaVersion": SCHEMA_VERSION,
        "workflowId": task.workflow_id,
        "taskId": task.task_id,
        "taskVersion": str(task.version),
    }


def project_broadcast(task: TaskState, steps: Steps, now: datetime) -> shapes.TaskProjectMessage:
    """PROJECT_BROADCAST: aggregate progress only; no titles of personal inputs, no results, no errors' text."""
    return {
        "kind": "task.project",
        "schemaVersion": SCHEMA_VERSION,
        "workflowId": task.workflow_id,
        "taskId": task.task_id,
        "taskVersion": str(task.version),
        "taskType": task.task_type,
        "lifecycleStatus": task.lifecycle.value,
        "health": task.health.value,
        "progress": task_progress(steps, task.lifecycle),
        "asOf": iso(now),
    }


def workflow_summary(workflow: WorkflowState, now: datetime) -> shapes.WorkflowSummaryMessage:
    """WORKFLOW_SUMMARY: the aggregate with its own workflowVersion (never a taskVersion)."""
    return {
        "kind": "workflow.summary",
        "schemaVersion": SCHEMA_VERSION,
        "workflowId": workflow.workflow_id,
        "taskId": None,
        "workflowVersion": str(workflow.version),
        "title": workflow.title,
        "workflowType": workflow.workflow_type,
        "lifecycleStatus": workflow.lifecycle.value,
        "health": workflow.health.value,
        "taskCount": workflow.task_count,
        "aggregate": workflow.aggregate,
        "createdAt": iso(workflow.created_at),
        "startedAt": iso(workflow.started_at),
        "finishedAt": iso(workflow.finished_at),
        "asOf": iso(now),
    }


def system_broadcast(message_id: str, level: str, text: str, now: datetime) -> shapes.SystemNoticeMessage:
    """Broadcast notices (system, tenant, project, user fan-out): service text only, never task data."""
    return {
        "kind": "system.notice",
        "schemaVersion": SCHEMA_VERSION,
        "workflowId": None,
        "taskId": None,
        "id": message_id,
        "level": level,
        "text": text,
        "asOf": iso(now),
    }
