"""The outbox as its subscribers will see it: one entry per (message, channel) of the stored rows.

A change is stored as one row holding each of its messages once (``status.infra.outbox_rows``);
tests that ask "what goes to this channel?" read it through here, as the relay expands it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
import sqlalchemy as sa

from status.domain.clock import utcnow
from status.domain.messages import Aggregate, Message
from status.infra import tables as t
from status.infra.outbox_rows import stored_columns, unpack

ot = t.task_outbox


@dataclass(frozen=True)
class Publication:
    row_id: int
    aggregate_type: str
    aggregate_id: str
    aggregate_version: int
    channel: str
    projection: str
    payload: dict[str, Any]
    must_deliver: bool
    status: str
    event_id: str | None


def publications(
    conn: sa.Connection,
    aggregate_id: str | None = None,
    *,
    projection: str | None = None,
    channel: str | None = None,
    version: int | None = None,
) -> list[Publication]:
    """What the outbox holds, in row order, narrowed to an aggregate, projection, channel or version."""
    query = sa.select(
        ot.c.id,
        ot.c.aggregate_type,
        ot.c.aggregate_id,
        ot.c.aggregate_version,
        *stored_columns(ot),
        ot.c.must_deliver,
        ot.c.status,
        ot.c.event_id,
    ).order_by(ot.c.id)
    if aggregate_id is not None:
        query = query.where(ot.c.aggregate_id == aggregate_id)
    if version is not None:
        query = query.where(ot.c.aggregate_version == version)
    found = []
    for row in conn.execute(query):
        for message in unpack(row.projection, row.channel, row.payload, row.payload_zstd):
            if projection is not None and message.projection != projection:
                continue
            payload = orjson.loads(message.data)
            for each in message.channels:
                if channel is None or each == channel:
                    found.append(
                        Publication(
                            row.id,
                            row.aggregate_type,
                            row.aggregate_id,
                            row.aggregate_version,
                            each,
                            message.projection,
                            payload,
                            bool(row.must_deliver),
                            row.status,
                            row.event_id,
                        )
                    )
    return found


def message(
    aggregate_id: str,
    version: int,
    channel: str,
    projection: str = "USER_SUMMARY",
    payload: dict[str, Any] | None = None,
    *,
    must_deliver: bool = False,
    created_at: datetime | None = None,
) -> Message:
    """One message of a task change to one channel (its home), as a writer would stage it."""
    return Message(
        Aggregate("TASK", aggregate_id, version, channel),
        (channel,),
        projection,
        payload if payload is not None else {},
        must_deliver,
        None,
        created_at or utcnow(),
    )
