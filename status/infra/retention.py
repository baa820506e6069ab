"""Bounded purges behind the observer's retention (design D8.16, D14.1): the statements, per table.

Every purge walks its table in date order from a watermark (``retention_watermark``): the date
of the last row it removed, so a pass starts where the last one ended instead of scanning the
rows the last one deleted (InnoDB keeps delete-marked rows in the index until its purge thread
catches up).  A batch is one short transaction: read at most ``batch`` keys, delete exactly
those keys (still dated before the cutoff), move the watermark.  The scan starts a little
before the watermark (``SLACK``): a transaction that took its timestamp before the watermark
moved but committed after is still found.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from status.domain.lifecycle import TERMINAL
from status.infra import tables as t

SLACK = timedelta(minutes=5)


@dataclass(frozen=True)
class Aged:
    """A table purged by age: the column that dates a row, and the row's whole key."""

    table: sa.Table
    dated_by: str
    key: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.table.name


def _aged(table: sa.Table, dated_by: str) -> Aged:
    return Aged(table, dated_by, tuple(c.name for c in table.primary_key.columns))


AGED = {
    a.name: a
    for a in (
        _aged(t.task_event_dedup, "created_at"),
        _aged(t.task_event_log, "committed_at"),
        _aged(t.user_notification, "created_at"),
        _aged(t.task_correction, "created_at"),
    )
}


def watermark(conn: sa.Connection, name: str) -> datetime | None:
    wm = t.retention_watermark
    return conn.execute(sa.select(wm.c.position).where(wm.c.name == name)).scalar_one_or_none()


def _advance(conn: sa.Connection, name: str, position: datetime, now: datetime) -> None:
    wm = t.retention_watermark
    updated = conn.execute(
        sa.update(wm).where(wm.c.name == name, wm.c.position < position).values(position=position, updated_at=now)
    ).rowcount
    if not updated and watermark(conn, name) is None:
        conn.execute(sa.insert(wm).values(name=name, position=position, updated_at=now))


def watermarks(engine: sa.Engine) -> dict[str, datetime]:
    wm = t.retention_watermark
    with engine.connect() as conn:
        return {name: position for name, position in conn.execute(sa.select(wm.c.name, wm.c.position))}


def oldest_kept(engine: sa.Engine, name: str, cutoff: datetime) -> datetime | None:
    """The date of the oldest row of ``name`` still kept though dated before ``cutoff`` (None when
    every such row is gone): how far retention is behind (one index probe from the watermark)."""
    aged = AGED[name]
    column = aged.table.c[aged.dated_by]
    with engine.connect() as conn:
        start = watermark(conn, aged.name)
        where = [column < cutoff] + ([column >= start - SLACK] if start is not None else [])
        oldest: datetime | None = conn.execute(sa.select(sa.func.min(column)).where(*where)).scalar()
    return oldest


def table_sizes(engine: sa.Engine) -> dict[str, tuple[int, int]]:
    """(rows, bytes of data and indexes) of the service's tables, as the server estimates them
    (MySQL/MariaDB's statistics: no table is scanned); empty on SQLite."""
    if engine.dialect.name != "mysql":
        return {}
    query = sa.text(
        "SELECT table_name, table_rows, data_length + index_length FROM information_schema.tables"
        " WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE'"
    )
    with engine.connect() as conn:
        return {
            str(name): (int(rows or 0), int(size or 0))
            for name, rows, size in conn.execute(query)
            if str(name) in t.metadata.tables
        }


def _oldest_first(conn: sa.Connection, aged: Aged, cutoff: datetime, batch: int, columns: Sequence[Any]) -> list[Any]:
    table, column = aged.table, aged.table.c[aged.dated_by]
    start = watermark(conn, aged.name)
    where = [column < cutoff]
    if start is not None:
        where.append(column >= start - SLACK)
    order = [column, *(table.c[k] for k in aged.key)]
    return list(conn.execute(sa.select(*columns).where(*where).order_by(*order).limit(batch)).mappings())


def oldest_rows(engine: sa.Engine, name: str, cutoff: datetime, batch: int) -> list[dict[str, Any]]:
    """The next at most ``batch`` whole rows of ``name`` past ``cutoff``, oldest first (to archive)."""
    aged = AGED[name]
    with engine.connect() as conn:
        return [dict(r) for r in _oldest_first(conn, aged, cutoff, batch, list(aged.table.c))]


def delete_rows(
    engine: sa.Engine, name: str, rows: Sequence[Mapping[str, Any]], cutoff: datetime, now: datetime
) -> int:
    """Delete exactly these rows (by their whole key, and only while still dated before ``cutoff``)
    and move the watermark to the newest of them, in one transaction."""
    if not rows:
        return 0
    aged = AGED[name]
    table = aged.table
    key = sa.tuple_(*(table.c[k] for k in aged.key))
    keys = [tuple(row[k] for k in aged.key) for row in rows]
    with engine.begin() as conn:
        deleted = int(conn.execute(sa.delete(table).where(key.in_(keys), table.c[aged.dated_by] < cutoff)).rowcount)
        _advance(conn, name, max(row[aged.dated_by] for row in rows), now)
    return deleted


def purge_older(engine: sa.Engine, name: str, cutoff: datetime, batch: int, now: datetime) -> int:
    """Delete at most ``batch`` rows of ``name`` dated before ``cutoff`` (nothing kept elsewhere)."""
    aged = AGED[name]
    with engine.connect() as conn:
        rows = _oldest_first(conn, aged, cutoff, batch, [aged.table.c[c] for c in (*aged.key, aged.dated_by)])
    return delete_rows(engine, name, rows, cutoff, now)


def purge_terminal_tasks(engine: sa.Engine, cutoff: datetime, batch: int, now: datetime) -> int:
    """Delete at most ``batch`` tasks that ended and were not touched since ``cutoff``, with
    everything that exists only for them: steps, execution handles, Temporal activity refs, ACL
    rows and external references (their events, dedup results, notifications and corrections
    have windows of their own).  Walks each terminal lifecycle along the (lifecycle, updated_at)
    index from its own watermark."""
    task, step = t.task, t.task_step
    purged = 0
    for lifecycle in sorted(TERMINAL):
        name = f"task:{lifecycle.value}"
        with engine.begin() as conn:
            start = watermark(conn, name)
            where = [task.c.lifecycle_status == lifecycle.value, task.c.updated_at < cutoff]
            if start is not None:
                where.append(task.c.updated_at >= start - SLACK)
            rows = conn.execute(
                sa.select(task.c.id, task.c.updated_at)
                .where(*where)
                .order_by(task.c.updated_at, task.c.id)
                .limit(batch - purged)
                .with_for_update()
            ).all()
            if not rows:
                continue
            ids = [r.id for r in rows]
            executions = [e for e in conn.scalars(sa.select(step.c.execution_id).where(step.c.task_id.in_(ids))) if e]
            if executions:
                conn.execute(
                    sa.delete(t.task_execution_handle).where(t.task_execution_handle.c.execution_id.in_(executions))
                )
                conn.execute(sa.delete(t.task_step_temporal).where(t.task_step_temporal.c.execution_id.in_(executions)))
            for child in (step, t.task_acl, t.task_external_ref):
                conn.execute(sa.delete(child).where(child.c.task_id.in_(ids)))
            purged += int(conn.execute(sa.delete(task).where(task.c.id.in_(ids))).rowcount)
            _advance(conn, name, max(r.updated_at for r in rows), now)
        if purged >= batch:
            break
    return purged


def purge_finished_workflows(engine: sa.Engine, cutoff: datetime, batch: int) -> int:
    """Delete at most ``batch`` workflows that ended before ``cutoff`` and have no task left."""
    wf = t.workflow
    with engine.begin() as conn:
        ids = list(
            conn.scalars(
                sa.select(wf.c.id)
                .where(
                    wf.c.lifecycle_status.in_([lc.value for lc in TERMINAL]),
                    wf.c.updated_at < cutoff,
                    ~sa.exists().where(t.task.c.workflow_id == wf.c.id),
                )
                .limit(batch)
            )
        )
        if ids:
            conn.execute(sa.delete(t.workflow_change).where(t.workflow_change.c.workflow_id.in_(ids)))
            conn.execute(sa.delete(wf).where(wf.c.id.in_(ids)))
    return len(ids)


def purge_expired_grants(engine: sa.Engine, now: datetime) -> int:
    with engine.begin() as conn:
        return int(conn.execute(sa.delete(t.realtime_grant).where(t.realtime_grant.c.expires_at < now)).rowcount)


def restore_rows(engine: sa.Engine, name: str, rows: Iterable[Mapping[str, Any]], now: datetime) -> tuple[int, int]:
    """Put archived rows (as ``archive.archived_rows`` reads them) back into ``name``: (restored,
    already there).  Idempotent by the table's key, in batches of 500.  The table's retention
    watermark moves back to the oldest restored row, so the next retention pass sees them again
    (archives them anew, to the same files, and deletes them): nothing restored stays for good."""
    aged = AGED[name]
    table = aged.table
    restored = present = 0
    oldest: datetime | None = None
    batch: list[dict[str, Any]] = []

    def flush() -> None:
        nonlocal restored, present
        if not batch:
            return
        key = sa.tuple_(*(table.c[k] for k in aged.key))
        with engine.begin() as conn:
            held = {
                tuple(r)
                for r in conn.execute(
                    sa.select(*(table.c[k] for k in aged.key)).where(
                        key.in_([tuple(row[k] for k in aged.key) for row in batch])
                    )
                )
            }
            missing = [row for row in batch if tuple(row[k] for k in aged.key) not in held]
            if missing:
                conn.execute(sa.insert(table), missing)
        restored += len(missing)
        present += len(batch) - len(missing)
        batch.clear()

    for archived in rows:
        row = _decoded(table, archived)
        batch.append(row)
        moment = row[aged.dated_by]
        oldest = moment if oldest is None or moment < oldest else oldest
        if len(batch) >= 500:
            flush()
    flush()
    if oldest is not None and restored:
        wm = t.retention_watermark
        with engine.begin() as conn:
            conn.execute(
                sa.update(wm).where(wm.c.name == name, wm.c.position > oldest).values(position=oldest, updated_at=now)
            )
    return restored, present


def _decoded(table: sa.Table, archived: Mapping[str, Any]) -> dict[str, Any]:
    """An archived row's values as the table's columns take them (instants were written as ISO 8601 UTC)."""
    row: dict[str, Any] = {}
    for column in table.c:
        value = archived.get(column.name)
        if value is not None and isinstance(column.type, sa.DateTime) and isinstance(value, str):
            value = datetime.fromisoformat(value.removesuffix("Z"))
        row[column.name] = value
    return row
