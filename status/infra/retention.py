"""Bounded purges behind the observer's retention (R16): the statements, per table."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from status.infra import tables as t

# What retention purges by age, and the column that dates a row.
AGED = {
    "task_event_dedup": (t.task_event_dedup, t.task_event_dedup.c.created_at),
    "task_event_log": (t.task_event_log, t.task_event_log.c.committed_at),
}


def purge_older(engine: sa.Engine, table_name: str, cutoff: datetime, batch: int) -> int:
    """Delete at most ``batch`` rows of ``table_name`` dated before ``cutoff``, by their whole key."""
    table, column = AGED[table_name]
    key = sa.tuple_(*table.primary_key.columns)  # (tenant_id, event_id): the whole key, never a part
    with engine.begin() as conn:
        keys = [
            tuple(r) for r in conn.execute(sa.select(*table.primary_key.columns).where(column < cutoff).limit(batch))
        ]
        if keys:
            conn.execute(sa.delete(table).where(key.in_(keys)))
    return len(keys)


def purge_expired_grants(engine: sa.Engine, now: datetime) -> int:
    with engine.begin() as conn:
        return int(conn.execute(sa.delete(t.realtime_grant).where(t.realtime_grant.c.expires_at < now)).rowcount)
