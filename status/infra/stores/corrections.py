"""Operators' corrections (``task_correction``): the audit record beside the event log."""

from __future__ import annotations

import sqlalchemy as sa

from status.app.records import CorrectionRecord
from status.infra import tables as t


class SqlCorrectionStore:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def insert(self, record: CorrectionRecord) -> None:
        self._conn.execute(sa.insert(t.task_correction).values(record._asdict()))

    def of_task(self, task_id: str) -> list[CorrectionRecord]:
        c = t.task_correction
        columns = [c.c[name] for name in CorrectionRecord._fields]
        rows = self._conn.execute(sa.select(*columns).where(c.c.task_id == task_id).order_by(c.c.task_version))
        return [CorrectionRecord(*row) for row in rows]
