"""Observer parts over a test's engine, wired as the composition root wires them."""

from __future__ import annotations

import sqlalchemy as sa

from observer.projector import WorkflowProjector
from status.app.workflow_fold import WorkflowFold
from status.infra.probe import RowProbe
from status.infra.uow import SqlDatabase


def projector_for(engine: sa.Engine) -> WorkflowProjector:
    return WorkflowProjector(WorkflowFold(SqlDatabase(engine)), RowProbe(engine, WorkflowProjector.PROBE))


def fold_all(engine: sa.Engine) -> None:
    """Every pending workflow change folded, however many other tests left behind (one
    ``run_once`` folds a batch: in a shared database this test's workflow may be past it)."""
    projector = projector_for(engine)
    while True:
        projector.run_once()
        if projector.last_claimed == 0:
            return
