"""Workflow aggregates folded from task changes (design D8.15): what the projector runs.

Task commits append to ``workflow_change`` (insert-only) and never lock the
workflow.  A pass claims change rows with ``SKIP LOCKED``, recomputes each
touched workflow's aggregate from its tasks' committed state, and when the
aggregate changed bumps the workflow's own ``workflowVersion`` and writes
outbox rows for the workflow channel and the workflow owner's summary channel
— all in one unit of work, so a crash re-folds the same changes, and its commit
wakes the relays like any other commit that wrote outbox rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from status.app import outbox
from status.app.ports import Database, UnitOfWork
from status.domain.aggregate import fold
from status.domain.clock import now_ms, utcnow
from status.domain.lifecycle import Lifecycle


class WorkflowFold:
    def __init__(self, db: Database, clock: Callable[[], datetime] = utcnow) -> None:
        self.db = db
        self.clock = clock

    def fold_changes(self, batch_size: int) -> tuple[int, int]:
        """Fold one batch of changes: (change rows claimed, workflows that got a new version)."""

        def work(uow: UnitOfWork) -> tuple[int, int]:
            changes = uow.workflows.claim_changes(batch_size)
            if not changes:
                return 0, 0
            bumped = sum(1 for workflow_id in sorted({w for _, w in changes}) if self._fold(uow, workflow_id))
            uow.workflows.delete_changes([change_id for change_id, _ in changes])
            uow.commit()
            return len(changes), bumped

        return self.db.run(work)

    def _fold(self, uow: UnitOfWork, workflow_id: str) -> bool:
        found = uow.workflows.lock(workflow_id)
        if found is None:
            return False
        current, _ = found
        lifecycle, health, aggregate = fold(uow.workflows.task_states_of(workflow_id))
        if aggregate == current.aggregate and lifecycle is current.lifecycle and health is current.health:
            return False
        now = now_ms(self.clock())
        workflow = replace(
            current,
            lifecycle=lifecycle,
            health=health,
            aggregate=aggregate,
            version=current.version + 1,
            started_at=current.started_at or (now if lifecycle is not Lifecycle.PENDING else None),
            finished_at=now if lifecycle.terminal else None,
            updated_at=now,
        )
        uow.workflows.update_aggregate(workflow)
        rows = outbox.workflow_messages(workflow, [workflow.owner_id], now, must_deliver=workflow.lifecycle.terminal)
        uow.log.insert_outbox(rows)
        return True
