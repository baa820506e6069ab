"""Observer parts over a test's engine, wired as the composition root wires them."""

from __future__ import annotations

import sqlalchemy as sa

from observer.projector import WorkflowProjector
from status.app.projection import WorkflowProjection
from status.infra.probe import RowProbe
from status.infra.uow import SqlDatabase


def projector_for(engine: sa.Engine) -> WorkflowProjector:
    return WorkflowProjector(WorkflowProjection(SqlDatabase(engine)), RowProbe(engine, WorkflowProjector.PROBE))
