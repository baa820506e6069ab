"""Workflow projection (SPEC R15, seed §6.1.1): task changes → workflow aggregates.

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
from datetime import datetime

import sqlalchemy as sa

from status.app import outbox
from status.domain.aggregate import fold
from status.domain.lifecycle import Lifecycle
from status.domain.model import WorkflowState
from status.infra import repository as repo
from status.infra import tables as t
from status.infra.uow import UnitOfWork, run_in_transaction

wc = t.workflow_change


class WorkflowProjection:
    def __init__(self, engine: sa.Engine, clock: Callable[[], datetime] = repo.utcnow) -> None:
        self.engine = engine
        self.clock = clock

    def fold_changes(self, batch_size: int) -> tuple[int, int]:
        """Fold one batch of changes: (change rows claimed, workflows that got a new version)."""

        def work(uow: UnitOfWork) -> tuple[int, int]:
            conn = uow.conn
            changes = conn.execute(
                sa.select(wc.c.id, wc.c.workflow_id)
                .order_by(wc.c.id)
                .limit(batch_size)
                .with_for_update(skip_locked=True)
            ).all()
            if not changes:
                return 0, 0
            bumped = sum(1 for workflow_id in sorted({c.workflow_id for c in changes}) if self._fold(conn, workflow_id))
            conn.execute(sa.delete(wc).where(wc.c.id.in_([c.id for c in changes])))
            uow.commit()
            return len(changes), bumped

        return run_in_transaction(self.engine, work)

    def _fold(self, conn: sa.Connection, workflow_id: str) -> bool:
        row = (
            conn.execute(sa.select(t.workflow).where(t.workflow.c.id == workflow_id).with_for_update())
            .mappings()
            .first()
        )
        if row is None:
            return False
        tasks = [
            dict(r)
            for r in conn.execute(
                sa.select(t.task.c.lifecycle_status, t.task.c.health, t.task.c.started_at, t.task.c.finished_at).where(
                    t.task.c.workflow_id == workflow_id
                )
            ).mappings()
        ]
        lifecycle, health, aggregate = fold(tasks)
        if (
            aggregate == (row["aggregate"] or {})
            and lifecycle.value == row["lifecycle_status"]
            and health.value == row["health"]
        ):
            return False
        now = repo.now_ms(self.clock())
        started = row["started_at"] or (now if lifecycle is not Lifecycle.PENDING else None)
        finished = now if lifecycle.terminal else None
        version = int(row["version"]) + 1
        conn.execute(
            sa.update(t.workflow)
            .where(t.workflow.c.id == workflow_id)
            .values(
                lifecycle_status=lifecycle.value,
                health=health.value,
                aggregate=aggregate,
                version=version,
                started_at=started,
                finished_at=finished,
                updated_at=now,
            )
        )
        workflow = repo.workflow_from_row(
            {
                **row,
                "lifecycle_status": lifecycle.value,
                "health": health.value,
                "aggregate": aggregate,
                "version": version,
                "started_at": started,
                "finished_at": finished,
                "updated_at": now,
            }
        )
        self._outbox(conn, workflow, now)
        return True

    @staticmethod
    def _outbox(conn: sa.Connection, workflow: WorkflowState, now: datetime) -> None:
        rows = outbox.workflow_rows(workflow, [workflow.owner_id], now, must_deliver=workflow.lifecycle.terminal)
        repo.insert_outbox(conn, rows)
