"""The hot path's multi-row INSERT (status/infra/inserts.py) on every engine."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa

from status.app.records import ActivityRecord
from status.infra import tables as t
from status.infra.inserts import Inserter


def _activity(execution_id: str, activity_id: str) -> ActivityRecord:
    return ActivityRecord(execution_id, "task-1", "default", "wf", "run", activity_id)


def test_keep_existing_skips_stored_keys_and_keeps_their_rows(engine: sa.Engine) -> None:
    stored, fresh = uuid.uuid4().hex[:26], uuid.uuid4().hex[:26]
    insert = Inserter(t.task_step_temporal, keep_existing=True)
    with engine.begin() as conn:
        insert(conn, [_activity(stored, "first")])
        # A retried binding writes the same execution again beside a new one: one statement,
        # the stored row untouched, the new one written.
        insert(conn, [_activity(stored, "second"), _activity(fresh, "new")])
        rows = dict(
            conn.execute(
                sa.select(t.task_step_temporal.c.execution_id, t.task_step_temporal.c.activity_id).where(
                    t.task_step_temporal.c.execution_id.in_([stored, fresh])
                )
            ).all()
        )
    assert rows == {stored: "first", fresh: "new"}


def test_without_keep_existing_a_stored_key_is_an_error(engine: sa.Engine) -> None:
    stored = uuid.uuid4().hex[:26]
    insert = Inserter(t.task_step_temporal)
    with engine.connect() as conn:
        insert(conn, [_activity(stored, "first")])
        with pytest.raises(sa.exc.IntegrityError):
            insert(conn, [_activity(stored, "second")])
        conn.rollback()
