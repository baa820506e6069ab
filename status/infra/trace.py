"""``task-observer trace EVENT_ID``: from an eventId to what it changed and how far it got.

An operator holding an eventId (from a worker's log, a user's report, an "event rejected" line)
sees the task version it committed, the event as logged, whether its dedup result is still held,
and each outbox row it wrote — channel, projection, publish state, attempts, last error.  A
change its own transaction changed again wrote no row (its state travelled in the row of the
task's last change there, design D8.14): the answer then names the task's next row after the
event's version.  Reads only; payloads stay out of the answer (they may hold user data).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from status.infra import tables as t
from status.infra.outbox_rows import stored_columns, unpack

_EVENT_COLUMNS = (
    "tenant_id",
    "event_id",
    "workflow_id",
    "task_id",
    "task_version",
    "step_id",
    "step_attempt",
    "operation_code",
    "execution_id",
    "step_version",
    "task_attempt",
    "producer_id",
    "source_seq",
    "event_type",
    "lifecycle_status",
    "business_status",
    "health",
    "data_schema",
    "error_code",
    "occurred_at",
    "received_at",
    "committed_at",
)
_OUTBOX_COLUMNS = (
    "id",
    "channel",
    "projection",
    "aggregate_type",
    "aggregate_id",
    "aggregate_version",
    "must_deliver",
    "status",
    "attempts",
    "created_at",
    "published_at",
    "last_error",
)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _plain(row: Any, columns: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for column in columns:
        value = row[column]
        out[_camel(column)] = _iso(value) if isinstance(value, datetime) else value
    return out


def _messages(row: Any) -> list[dict[str, Any]]:
    """What an outbox row publishes: each message's projection and channels."""
    return [
        {"projection": m.projection, "channels": list(m.channels)}
        for m in unpack(row["projection"], row["channel"], row["payload"], row["payload_zstd"])
    ]


def _iso(value: datetime | None) -> str | None:
    return value.isoformat(timespec="milliseconds") + "Z" if value is not None else None


def trace_event(engine: sa.Engine, event_id: str, tenant_id: str | None = None) -> list[dict[str, Any]]:
    """One entry per tenant that holds ``event_id`` (ids are unique per tenant)."""
    log, dedup, task, outbox = t.task_event_log, t.task_event_dedup, t.task, t.task_outbox
    with engine.connect() as conn:
        events = {
            e["tenant_id"]: e
            for e in conn.execute(sa.select(log).where(log.c.event_id == event_id)).mappings()
            if tenant_id in (None, e["tenant_id"])
        }
        held = {
            d.tenant_id: d
            for d in conn.execute(
                sa.select(dedup.c.tenant_id, dedup.c.task_id, dedup.c.created_at).where(dedup.c.event_id == event_id)
            )
            if tenant_id in (None, d.tenant_id)
        }
        task_of = {tenant: e["task_id"] for tenant, e in events.items()} | {
            tenant: d.task_id for tenant, d in held.items() if tenant not in events
        }
        tasks = {
            r.id: r
            for r in conn.execute(
                sa.select(task.c.id, task.c.task_type, task.c.version, task.c.lifecycle_status).where(
                    task.c.id.in_(set(task_of.values()))
                )
            )
        }
        columns = [outbox.c[c] for c in _OUTBOX_COLUMNS]
        query = sa.select(*columns, *_stored_only(outbox)).where(outbox.c.event_id == event_id).order_by(outbox.c.id)
        outbox_rows = [_outbox_row(r) for r in conn.execute(query).mappings()]
        carried_by = {
            tenant: _next_row(conn, task_of[tenant], event["task_version"])
            for tenant, event in events.items()
            if not any(r["aggregateId"] == task_of[tenant] for r in outbox_rows)
        }
    found: list[dict[str, Any]] = []
    for tenant, task_id in task_of.items():
        event, current = events.get(tenant), tasks.get(task_id)
        # Outbox rows carry no tenant of their own: those of this event's task and its workflow.
        aggregates = {task_id} | ({event["workflow_id"]} if event is not None else set())
        found.append(
            {
                "tenantId": tenant,
                "taskId": task_id,
                "event": _plain(event, _EVENT_COLUMNS) if event is not None else None,
                "dedupHeld": tenant in held,
                "dedupCreatedAt": _iso(held[tenant].created_at) if tenant in held else None,
                "task": {
                    "taskType": current.task_type,
                    "currentVersion": str(current.version),
                    "lifecycleStatus": current.lifecycle_status,
                }
                if current is not None
                else None,
                "outbox": [r for r in outbox_rows if r["aggregateId"] in aggregates],
                # No row of its own: where its state went (None once published rows were purged).
                **({"carriedBy": carried_by[tenant]} if tenant in carried_by else {}),
            }
        )
    return found


def _outbox_row(row: Any) -> dict[str, Any]:
    return {**_plain(row, _OUTBOX_COLUMNS), "messages": _messages(row)}


def _next_row(conn: sa.Connection, task_id: str, version: int) -> dict[str, Any] | None:
    """The task's first outbox row after ``version``: the one that carried the state of a change
    its transaction changed again (the transaction's last change of the task writes it)."""
    outbox = t.task_outbox
    row = (
        conn.execute(
            sa.select(*(outbox.c[c] for c in _OUTBOX_COLUMNS), outbox.c.event_id, *_stored_only(outbox))
            .where(
                outbox.c.aggregate_type == "TASK",
                outbox.c.aggregate_id == task_id,
                outbox.c.aggregate_version > version,
            )
            .order_by(outbox.c.aggregate_version, outbox.c.id)
            .limit(1)
        )
        .mappings()
        .first()
    )
    return None if row is None else {**_outbox_row(row), "eventId": row["event_id"]}


def _stored_only(outbox: sa.Table) -> list[sa.ColumnElement[Any]]:
    return [c for c in stored_columns(outbox) if c.name not in _OUTBOX_COLUMNS]
