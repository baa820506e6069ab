"""Admin corrections (design D6): an operator sets a task's or a step attempt's status.

A correction is never a fake worker report: it is its own command with an operator, a reason and
an audit record of old and new values, and it may do what no report may — move a terminal state
(a task wrongly left FAILED, a step stuck RUNNING after its worker vanished).  It still produces
a new task version and a notice, like any change users must see.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, TypedDict

from status.domain.definitions import Severity, StatusDefinitionSet
from status.domain.errors import Conflict, ErrorCode, Invalid, NotFound
from status.domain.idempotency import first_answer
from status.domain.lifecycle import Health, Lifecycle
from status.domain.model import StepError, StepState, TaskState
from status.domain.notices import Notice, NoticeKind
from status.domain.rules import checked_error

MAX_REASON = 500


@dataclass(frozen=True)
class Correction:
    operator_id: str
    reason: str
    lifecycle: Lifecycle | None = None
    business_status: str | None = None
    error: StepError | None = None  # a correction to FAILED may say why, in the shape of design D6.1


class FieldChange(TypedDict):
    """What a correction moved: a field, its value before and after (audited and answered)."""

    field: str
    old: str | None
    new: str | None


@dataclass(frozen=True)
class CorrectionOutcome:
    task: TaskState
    step: StepState | None
    changes: list[FieldChange]
    notice: Notice


def parse_lifecycle(value: str | None) -> Lifecycle | None:
    """The lifecycle a correction sets (None: it sets the business status alone)."""
    try:
        return None if value is None else Lifecycle(value)
    except ValueError as exc:
        raise Invalid(f"unknown lifecycleStatus {value!r}") from exc


def repeated_correction(fingerprint: str, first: tuple[str, Mapping[str, Any]] | None) -> dict[str, Any] | None:
    """The first answer to a correctionId used before (``first``: its fingerprint and answer),
    marked a duplicate; None for a new one. Other content under the same id is refused
    (IDEMPOTENCY_CONFLICT): an operator's second thought needs a correctionId of its own."""
    return first_answer(fingerprint, first, name="correctionId", conflict=ErrorCode.IDEMPOTENCY_CONFLICT)


def corrected_attempt(
    task: TaskState,
    attempts: Iterable[StepState],
    step_id: str | None,
    attempt: int | None,
    *,
    expected_version: int | None,
) -> StepState | None:
    """The step attempt a correction is about (None: the task itself), from the task's
    ``attempts``: the one named, or the step's newest. Refused, in this order: a task no longer
    at the version the operator saw (VERSION_PRECONDITION_FAILED: someone changed it since), a
    step or attempt the task does not have, an attempt without its step."""
    if expected_version is not None and expected_version != task.version:
        raise Conflict(
            f"the task is at version {task.version}, not {expected_version}", ErrorCode.VERSION_PRECONDITION_FAILED
        )
    if step_id is None:
        if attempt is not None:
            raise Invalid("attempt needs a stepId")
        return None
    named = [s for s in attempts if s.step_id == step_id and (attempt is None or s.attempt == attempt)]
    if not named:
        raise NotFound(f"step {step_id} has no such attempt", ErrorCode.UNKNOWN_STEP)
    return max(named, key=lambda s: s.attempt)


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
    changes: list[FieldChange] = [
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
        NoticeKind.CORRECTED,
        Severity.INFO,
        f"{task.title}: status corrected",
        f"An administrator corrected {what}: {moved}.",
        operation_code=step.operation_code if step is not None else None,
        step_id=step.step_id if step is not None else None,
        actions=("VIEW_DETAILS",),
    )
    return CorrectionOutcome(new_task, new_step, changes, notice)
