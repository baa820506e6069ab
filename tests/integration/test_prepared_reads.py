"""Reads compiled once and run through the driver (status/infra/prepared.py) give, on every engine,
the rows ``Connection.execute`` gives: timestamps as datetimes, JSON as values, NULLs kept, the
``IN`` list of every length."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
import sqlalchemy as sa

from status.infra.prepared import PreparedRead, listed
from status.infra.tables import Timestamp

AT = datetime(2026, 12, 6, 1, 2, 3, 456000)


@pytest.fixture
def probe(engine: sa.Engine) -> Iterator[sa.Table]:
    table = sa.Table(
        f"prepared_probe_{uuid.uuid4().hex[:8]}",
        sa.MetaData(),
        sa.Column("id", sa.String(16), primary_key=True),
        sa.Column("tenant", sa.String(16), nullable=False),
        sa.Column("at", Timestamp, nullable=True),
        sa.Column("doc", sa.JSON, nullable=True),
        sa.Column("n", sa.Integer, nullable=False),
    )
    table.create(engine)
    with engine.begin() as conn:
        conn.execute(
            sa.insert(table),
            [
                {
                    "id": f"r{i}",
                    "tenant": "t1" if i % 2 else "t2",
                    "at": AT if i % 3 else None,
                    "doc": {"i": i, "tags": ["a", "100%"]} if i % 4 else None,
                    "n": i,
                }
                for i in range(7)
            ],
        )
    yield table
    table.drop(engine)


@pytest.mark.parametrize("wanted", [[], ["r1"], ["r0", "r3", "r6"], [f"r{i}" for i in range(7)], ["r2", "nope"]])
def test_a_prepared_read_gives_what_execute_gives(engine: sa.Engine, probe: sa.Table, wanted: list[str]) -> None:
    def build(n: int) -> sa.Select[Any]:
        query = sa.select(probe.c.id, probe.c.at, probe.c.doc, probe.c.n).where(probe.c.tenant == sa.bindparam("_t"))
        return query.where(listed(probe.c.id, n)).order_by(probe.c.id)

    prepared = PreparedRead(build)
    with engine.connect() as conn:
        for tenant in ("t1", "t2"):
            expected = [tuple(row) for row in conn.execute(build(len(wanted)), {"_t": tenant, **_in(wanted)})]
            got = prepared.rows(conn, {"_t": tenant}, wanted)
            assert got == expected
            assert got == prepared.rows(conn, {"_t": tenant}, wanted)  # compiled once, the same again
    assert all(isinstance(row[1], datetime) for row in got if row[1] is not None)


def _in(values: list[str]) -> dict[str, str]:
    return {f"_in{i}": value for i, value in enumerate(values)}
