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

The payload is stored compressed (``payload_zstd``: zstd frames, in base64 text): a row
carries its projections' full states — 8 KB of JSON for a 10-step task, 26 KB for a 30-step
one, mostly the same keys and steps — which the database parsed, checked and stored with every
change; compressed, a twentieth of that, for 8 us of the API's CPU a row (docs/benchmarks.md).
Base64 text, not a binary column: a transaction's statements are joined as text (write_batch),
which raw bytes would not survive.

Rows written before held their JSON in ``payload`` (and, earlier still, one channel each:
``projection`` the message's own); ``unpack`` reads them all, so a relay drains what an API of
an earlier version left behind.
"""

from __future__ import annotations

import base64
import os
import threading
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import orjson
import sqlalchemy as sa
import zstandard

from status.domain.messages import Aggregate, Message
from status.infra.db import json_text

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
    payload_zstd: str
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
                payload_zstd=compressed(
                    {
                        "messages": [
                            {"projection": m.projection, "channels": m.channels, "data": m.payload} for m in same
                        ]
                    }
                ),
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


# Compression level 1: zstd's fastest; higher levels shrink a payload by a few percent more, for
# more of the API's CPU than the bytes they save cost the database.
_LEVEL = 1
# zstd's (de)compressors are not safe to share between threads; the API writes from several.
_codecs = threading.local()


def compressed(payload: dict[str, Any]) -> str:
    """A row's payload as stored: its JSON (as JSON columns hold it, ``status.infra.db.json_text``)
    in a zstd frame, in base64."""
    text = json_text(payload).encode()
    compressor = getattr(_codecs, "compressor", None)
    if compressor is None:
        compressor = _codecs.compressor = zstandard.ZstdCompressor(level=_LEVEL)
    return base64.b64encode(compressor.compress(text)).decode("ascii")


def _expanded(stored: str) -> bytes:
    decompressor = getattr(_codecs, "decompressor", None)
    if decompressor is None:
        decompressor = _codecs.decompressor = zstandard.ZstdDecompressor()
    return decompressor.decompress(base64.b64decode(stored, validate=True))


def stored_columns(outbox: sa.Table) -> tuple[sa.ColumnElement[Any], ...]:
    """What ``unpack`` reads of a row, in its order (the JSON as stored text, not decoded)."""
    return (
        outbox.c.projection,
        outbox.c.channel,
        sa.type_coerce(outbox.c.payload, sa.Text).label("payload"),
        outbox.c.payload_zstd,
    )


def unpack(projection: str, channel: str, payload: str | None, payload_zstd: str | None) -> tuple[StoredMessage, ...]:
    """A row's messages, from its ``stored_columns``; none when the payload cannot be read (the
    relay marks such a row DEAD)."""
    try:
        if payload_zstd is not None:  # a change's row, as this version writes them
            return _messages(orjson.loads(_expanded(payload_zstd)))
        if payload is None:
            return ()
        return _earlier(projection, channel, payload)
    except (ValueError, KeyError, TypeError, zstandard.ZstdError):
        return ()


def _messages(payload: dict[str, Any]) -> tuple[StoredMessage, ...]:
    return tuple(
        StoredMessage(m["projection"], tuple(m["channels"]), orjson.dumps(m["data"]).decode())
        for m in payload["messages"]
    )


def _earlier(projection: str, channel: str, payload: str) -> tuple[StoredMessage, ...]:
    """A row an earlier version wrote, its JSON uncompressed."""
    if projection == PACKED:
        return _messages(orjson.loads(payload))
    if projection == _LEGACY_FANOUT:
        fanout = orjson.loads(payload)
        return (StoredMessage("USER_BROADCAST", tuple(fanout["channels"]), orjson.dumps(fanout["data"]).decode()),)
    return (StoredMessage(projection, (channel,), payload),)
