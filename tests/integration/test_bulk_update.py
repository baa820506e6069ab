"""A group's multi-row UPDATE (status/infra/stores/bulk.py) on every engine: each row gets its own
changed columns and keeps every other one as the database holds it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime

import pytest
import sqlalchemy as sa

from status.infra.stores import bulk
from status.infra.tables import Timestamp

BEFORE = datetime(2026, 12, 5, 10, 0, 0)
LATER = datetime(2026, 12, 5, 10, 0, 1, 250000)


@pytest.fixture
def probe(engine: sa.Engine) -> Iterator[sa.Table]:
    table = sa.Table(
        f"bulk_probe_{uuid.uuid4().hex[:8]}",
        sa.MetaData(),
        sa.Column("id", sa.String(16), primary_key=True),
        sa.Column("label", sa.String(64), nullable=True),
        sa.Column("count", sa.Integer, nullable=False),
        sa.Column("beat_at", Timestamp, nullable=True),  # moved outside the group, never by it
        sa.Column("updated_at", Timestamp, nullable=False),
    )
    table.create(engine)
    with engine.begin() as conn:
        conn.execute(
            sa.insert(table),
            [
                {"id": f"r{i}", "label": f"old{i}", "count": i, "beat_at": BEFORE, "updated_at": BEFORE}
                for i in range(4)
            ],
        )
    yield table
    table.drop(engine)


def _rows(engine: sa.Engine, table: sa.Table) -> dict[str, tuple[object, ...]]:
    with engine.connect() as conn:
        return {row[0]: tuple(row[1:]) for row in conn.execute(sa.select(table).order_by(table.c.id))}


def test_rows_that_change_the_same_columns(engine: sa.Engine, probe: sa.Table) -> None:
    with engine.begin() as conn:
        statements = bulk.update_rows(
            conn,
            probe,
            ["id"],
            [
                ({"id": "r0"}, {"count": 10, "label": None, "updated_at": LATER}),  # NULL is a value here
                ({"id": "r1"}, {"count": 11, "label": "new1", "updated_at": LATER}),
            ],
        )
    assert statements in (1, 2)  # 2: SQLite before 3.33 writes a row at a time
    assert _rows(engine, probe) == {
        "r0": (None, 10, BEFORE, LATER),
        "r1": ("new1", 11, BEFORE, LATER),
        "r2": ("old2", 2, BEFORE, BEFORE),
        "r3": ("old3", 3, BEFORE, BEFORE),
    }


def test_rows_that_change_different_columns_keep_the_others(engine: sa.Engine, probe: sa.Table) -> None:
    with engine.begin() as conn:
        bulk.update_rows(
            conn,
            probe,
            ["id"],
            [
                ({"id": "r0"}, {"count": 10, "updated_at": LATER}),
                ({"id": "r1"}, {"label": "new1", "updated_at": LATER}),
                ({"id": "r2"}, {"label": None, "count": 12, "updated_at": LATER}),
                ({"id": "r3"}, {}),  # nothing changed: not written
            ],
        )
    assert _rows(engine, probe) == {
        "r0": ("old0", 10, BEFORE, LATER),
        "r1": ("new1", 1, BEFORE, LATER),
        "r2": (None, 12, BEFORE, LATER),
        "r3": ("old3", 3, BEFORE, BEFORE),
    }


def test_nothing_changed_is_no_statement(engine: sa.Engine, probe: sa.Table) -> None:
    with engine.begin() as conn:
        assert bulk.update_rows(conn, probe, ["id"], [({"id": "r0"}, {}), ({"id": "r1"}, {})]) == 0
    assert _rows(engine, probe)["r0"] == ("old0", 0, BEFORE, BEFORE)
