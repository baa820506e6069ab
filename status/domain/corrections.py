"""Admin corrections (seed: "管理员纠错命令"): an operator sets a task's or a step attempt's status.

A correction is never a fake worker report: it is its own command with an operator, a reason and
an audit record of old and new values, and it may do what no report may — move a terminal state
(a task wrongly left FAILED, a step stuck RUNNING after its worker vanished).  It still produces
a new task version and a notice, like any change users must see.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from status.domain.definitions import Severity, StatusDefinitionSet
from status.domain.errors import ErrorCode, Invalid
from status.domain.lifecycle import Health, Lifecycle
from status.domain.model import StepError, StepState, TaskState
from status.domain.rules import Notice, checked_error

MAX_REASON = 500


@dataclass(frozen=True)
class Correction:
    operator_id: str
    reason: str
    lifecycle: Lifecycle | None = None
    business_status: str | None = None
    error: StepError | None = None  # a correction to FAILED may say why, in the seed's shape


@dataclass(frozen=True)
class CorrectionOutcome:
    task: TaskState
    step: StepState | None
    changes: list[dict[str, Any]]  # [{"field", "old", "new"}] of what moved
    notice: Notice


def _target(
    correction: Correction, lifecycle: Lifecycle, business: str, statuses: StatusDefinitionSet
) -> tuple[Lifecycle, str]:
    """The corrected (lifecycle, business status); the business status must mean the lifecycle."""
    if correction.lifecycle is None and correction.business_status is None:
        raise Invalid("a correction sets lifecycleStatus, businessStatus or both")
    if correction.lifecycle is None:
        assert correction.business_status is not None
        known = statuses.statuses.get(correction.business_status)
        if known is None:
            raise Invalid(
                f"business status {correction.business_status!r} is not registered", ErrorCode.UNKNOWN_BUSINESS_STATUS
            )
        return known.lifecycle, known.code
    # previous=None: an operator is not bound by the statuses' allowed_from order.
    status = statuses.resolve(correction.business_status, correction.lifecycle, None)
    return correction.lifecycle, status.code


def apply_correction(
    task: TaskState,
    step: StepState | None,
    correction: Correction,
    *,
    statuses: StatusDefinitionSet,
    other_steps_stale: bool,
    now: datetime,
) -> CorrectionOutcome:
    """Decide a correction of the task (``step`` None) or of one step attempt."""
    if not correction.reason.strip() or len(correction.reason) > MAX_REASON:
        raise Invalid(f"reason must be 1–{MAX_REASON} characters")
    error = checked_error(correction.error)
    before = step if step is not None else task
    lifecycle, business = _target(correction, before.lifecycle, before.business_status, statuses)
    if error is not None and lifecycle is not Lifecycle.FAILED:
        raise Invalid("error may only accompany a correction to FAILED")
    changes = [
        {"field": name, "old": old, "new": new}
        for name, old, new in (
            ("lifecycleStatus", before.lifecycle.value, lifecycle.value),
            ("businessStatus", before.business_status, business),
        )
        if old != new
    ]
    if not changes and error is None:
        raise Invalid("the correction changes nothing")
    finished_at = (before.finished_at or now) if lifecycle.terminal else None
    started_at = before.started_at or (now if lifecycle is not Lifecycle.PENDING else None)
    new_step = None
    if step is not None:
        new_step = replace(
            step,
            lifecycle=lifecycle,
            business_status=business,
            version=step.version + 1,
            started_at=started_at,
            finished_at=finished_at,
            # A step an operator settled is no longer waiting on a silent executor.
            health=Health.HEALTHY if lifecycle.terminal else step.health,
            stale_since=None if lifecycle.terminal else step.stale_since,
            error=(error or step.error) if lifecycle is Lifecycle.FAILED else None,
            updated_at=now,
        )
        health = task.health
        if new_step.health is not Health.STALE and not other_steps_stale and health is Health.STALE:
            health = Health.HEALTHY
        new_task = replace(task, version=task.version + 1, health=health, updated_at=now)
    else:
        failed = lifecycle is Lifecycle.FAILED
        new_task = replace(
            task,
            lifecycle=lifecycle,
            business_status=business,
            version=task.version + 1,
            started_at=started_at,
            finished_at=finished_at,
            failure=(error or task.failure or StepError("UNKNOWN", "ADMIN_CORRECTION", "")) if failed else None,
            failed_step_id=task.failed_step_id if failed else None,
            health=(Health.DEGRADED if task.health is Health.DEGRADED else Health.HEALTHY)
            if lifecycle.terminal
            else task.health,
            updated_at=now,
        )
    what = f"{step.display_name or step.operation_code}" if step is not None else "the task"
    moved = "; ".join(f"{c['field']} {c['old']} → {c['new']}" for c in changes) or "error details"
    notice = Notice(
        f"{task.task_id}:{new_task.version}",
        "CORRECTED",
        Severity.INFO,
        f"{task.title}: status corrected",
        f"An administrator corrected {what}: {moved}.",
        operation_code=step.operation_code if step is not None else None,
        step_id=step.step_id if step is not None else None,
        actions=("VIEW_DETAILS",),
    )
    return CorrectionOutcome(new_task, new_step, changes, notice)
