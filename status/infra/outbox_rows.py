"""The outbox row's format, written and read here only: one row per change.

A change's messages — those of one aggregate version — are stored as one row: its payload
lists each message once with the channels that show it,

    {"messages": [{"projection": "USER_SUMMARY", "channels": ["task_user:t/u1", ...], "data": {...}},
                  {"projection": "TASK_DETAIL", "channels": ["task_detail:t/x"], "data": {...}}]}

so a summary seen by many users and groups is written once, not once per channel, and the
relay publishes every channel of it (docs/architecture.md, "The outbox"). The row is
``must_deliver`` when any of its messages is; its partition is its home channel's (the owner's
summary channel, ``status.domain.messages.Aggregate``), so one relay publishes an owner's
changes — and so each aggregate's versions — in commit order.

Rows written before this format held one channel each (``projection`` the message's own);
``unpack`` reads both, so a relay drains what an API of the earlier version left behind.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import orjson

from status.domain.messages import Aggregate, Message

# A row holding a change's messages (any other value: a row of the earlier format, one channel).
PACKED = "MESSAGES"
# Home channels are spread over this many partitions; one relay at a time publishes a
# partition, so a home channel's rows leave in commit order however many relays run.
OUTBOX_PARTITIONS = 16
# The earlier format's rows whose payload was not the message itself.
_LEGACY_FANOUT = "USER_FANOUT"  # {"channels": [...], "data": {...}}


def partition_of(channel: str) -> int:
    return zlib.crc32(channel.encode()) % OUTBOX_PARTITIONS


class OutboxRecord(NamedTuple):
    """One change's outbox row (its fields: ``task_outbox``'s columns, as the Inserter takes them)."""

    aggregate_type: str
    aggregate_id: str
    aggregate_version: int
    channel: str
    projection: str
    must_deliver: bool
    event_id: str | None
    payload: dict[str, Any]
    status: str
    available_at: datetime
    created_at: datetime
    publish_key: str
    partition_no: int


def pack(messages: Sequence[Message]) -> list[OutboxRecord]:
    """One row per aggregate version, its messages in the order given, each with a fresh random
    publish key (see ``status.infra.tables.task_outbox``)."""
    changes: dict[Aggregate, list[Message]] = {}
    for message in messages:
        changes.setdefault(message.aggregate, []).append(message)
    rows = []
    for aggregate, same in changes.items():
        first = same[0]
        rows.append(
            OutboxRecord(
                aggregate_type=aggregate.kind,
                aggregate_id=aggregate.id,
                aggregate_version=aggregate.version,
                channel=aggregate.home,
                projection=PACKED,
                must_deliver=any(m.must_deliver for m in same),
                event_id=next((m.event_id for m in same if m.event_id), None),
                payload={
                    "messages": [{"projection": m.projection, "channels": m.channels, "data": m.payload} for m in same]
                },
                status="PENDING",
                available_at=first.created_at,
                created_at=first.created_at,
                publish_key=os.urandom(16).hex(),
                partition_no=partition_of(aggregate.home),
            )
        )
    return rows


@dataclass(frozen=True)
class StoredMessage:
    """One message of a stored row: its projection, its channels and its data as JSON text."""

    projection: str
    channels: tuple[str, ...]
    data: str


def unpack(projection: str, channel: str, payload: str) -> tuple[StoredMessage, ...]:
    """A row's messages, from its ``projection``, ``channel`` and stored payload text; none when
    the payload cannot be read (the relay marks such a row DEAD)."""
    try:
        return _unpack(projection, channel, payload)
    except (ValueError, KeyError, TypeError):
        return ()


def _unpack(projection: str, channel: str, payload: str) -> tuple[StoredMessage, ...]:
    if projection == PACKED:
        return tuple(
            StoredMessage(m["projection"], tuple(m["channels"]), orjson.dumps(m["data"]).decode())
            for m in orjson.loads(payload)["messages"]
        )
    if projection == _LEGACY_FANOUT:
        fanout = orjson.loads(payload)
        return (StoredMessage("USER_BROADCAST", tuple(fanout["channels"]), orjson.dumps(fanout["data"]).decode()),)
    return (StoredMessage(projection, (channel,), payload),)
