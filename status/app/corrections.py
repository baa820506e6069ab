"""The admin correction command (design D6; domain rules in ``status.domain.corrections``).

ADMIN only, idempotent by ``correctionId``; one transaction writes the corrected task/step, the
event-log record (``ADMIN_CORRECTION``, shown in the timeline), the dedup result, the audit record
(operator, reason, old and new values, time) and the outbox rows carrying a ``CORRECTED`` notice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

from status.app.answers import CorrectionAccepted, correction_reply, stored_correction_answer
from status.app.change import Change, Entry, write_change
from status.app.context import AppContext, content_hash, require
from status.app.group import Group
from status.app.ports import UnitOfWork
from status.app.records import CorrectionRecord
from status.app.shards import run_for
from status.app.views import locked_view
from status.domain import ids
from status.domain.auth import Role, ServicePrincipal
from status.domain.corrections import (
    Correction,
    apply_correction,
    corrected_attempt,
    parse_lifecycle,
    repeated_correction,
)
from status.domain.errors import ErrorCode, NotFound
from status.domain.lifecycle import EventType
from status.domain.model import StepError
from status.domain.projections import iso
from status.domain.reports import check_key


@dataclass(frozen=True)
class Correct:
    task_id: str
    correction_id: str
    operator_id: str
    reason: str
    step_id: str | None = None
    attempt: int | None = None  # default: the step's newest attempt
    lifecycle_status: str | None = None
    business_status: str | None = None
    error: StepError | None = None
    expected_task_version: int | None = None

    def content(self) -> CorrectionContent:
        return {
            "operator": self.operator_id,
            "reason": self.reason,
            "step": [self.step_id, self.attempt],
            "set": [self.lifecycle_status, self.business_status],
            "error": None if self.error is None else vars(self.error),
            "expected": self.expected_task_version,
        }


class CorrectionContent(TypedDict):
    """What a correction's fingerprint hashes (fixed: a repeat after an upgrade hashes the same)."""

    operator: str
    reason: str
    step: list[str | int | None]  # step id, attempt
    set: list[str | None]  # lifecycle, business status
    error: dict[str, object] | None
    expected: int | None


class CorrectionCommands:
    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    def correct(self, caller: ServicePrincipal, cmd: Correct) -> CorrectionAccepted:
        require(caller, Role.ADMIN)
        check_key("correctionId", cmd.correction_id)
        check_key("operatorId", cmd.operator_id, 64)
        lifecycle = parse_lifecycle(cmd.lifecycle_status)
        correction = Correction(cmd.operator_id, cmd.reason, lifecycle, cmd.business_status, cmd.error)
        # Its own namespace of ids: a correction can never collide with a producer's eventId.
        event_id = f"correction:{cmd.correction_id}"
        fingerprint = content_hash({"task": cmd.task_id, **cmd.content()})

        def work(uow: UnitOfWork) -> CorrectionAccepted:
            now = self.ctx.now()
            view, stored = locked_view(
                self.ctx, uow, cmd.task_id, (caller.tenant_id, caller.authority_scope), event_id=event_id
            )
            repeated = stored_correction_answer(repeated_correction(fingerprint, stored))
            if repeated is not None:
                return repeated
            task = view.task
            step = corrected_attempt(
                task, view.steps.all(), cmd.step_id, cmd.attempt, expected_version=cmd.expected_task_version
            )
            defs = self.ctx.definitions_for(uow, task.tenant_id, task.authority_scope)
            outcome = apply_correction(
                task,
                step,
                correction,
                statuses=defs.status_set(task.task_type, task.status_definition_version),
                other_steps_stale=step is not None and view.steps.stale_besides(step.step_id, step.attempt),
                now=now,
            )
            new_task, new_step = outcome.task, outcome.step
            audit = {"operatorId": cmd.operator_id, "reason": cmd.reason, "changes": outcome.changes}
            entry = Entry(
                event_id=event_id,
                event_type=EventType.ADMIN_CORRECTION,
                producer_id=f"admin:{cmd.operator_id}",
                # Unique per task, so repeated corrections of one step never collide.
                source_seq=new_task.version,
                occurred_at=now,
                received_at=now,
                error_code=new_step.error.code if new_step and new_step.error else None,
                payload=audit,
                reported=False,
            )
            change = Change(
                before=task,
                after=new_task,
                view=view,
                entry=entry,
                fingerprint=fingerprint,
                reply=correction_reply(cmd.correction_id, outcome.changes),
                step=new_step,
                before_step=step,
                # The executor's late reports must not overwrite what the operator settled.
                revoke="ADMIN_CORRECTION",
                notice=outcome.notice,
                must_deliver=True,
                broadcast=True,
            )
            group = Group()
            result = write_change(self.ctx, uow, group, change)
            group.flush(uow)
            uow.corrections.insert(
                CorrectionRecord(
                    tenant_id=task.tenant_id,
                    correction_id=cmd.correction_id,
                    task_id=task.task_id,
                    task_version=new_task.version,
                    step_id=new_step.step_id if new_step else None,
                    step_attempt=new_step.attempt if new_step else None,
                    operator_id=cmd.operator_id,
                    credential_id=caller.producer_id,
                    reason=cmd.reason,
                    changes=outcome.changes,
                    created_at=now,
                )
            )
            uow.commit()
            return result

        return run_for(self.ctx.shards, ids.bucket_hint(cmd.task_id), work)

    def corrections_of(self, caller: ServicePrincipal, task_id: str) -> dict[str, Any]:
        """The audit records of a task's corrections (ADMIN; operators and reasons included)."""
        require(caller, Role.ADMIN)
        with self.ctx.shards.reading(ids.bucket_hint(task_id)) as stores:
            owner = stores.tasks.tenancy(task_id)
            if owner is None or owner != (caller.tenant_id, caller.authority_scope):
                raise NotFound(f"task {task_id} does not exist", ErrorCode.UNKNOWN_TASK)
            rows = stores.corrections.of_task(task_id)
            return {
                "taskId": task_id,
                "corrections": [
                    {
                        "correctionId": r.correction_id,
                        "taskVersion": str(r.task_version),
                        "stepId": r.step_id,
                        "attempt": r.step_attempt,
                        "operatorId": r.operator_id,
                        "credentialId": r.credential_id,
                        "reason": r.reason,
                        "changes": r.changes,
                        "correctedAt": iso(r.created_at),
                    }
                    for r in rows
                ],
            }
