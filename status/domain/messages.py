"""What a change tells the world: projections, each to the channels that show it.

A decided change produces messages — its summary to every viewer's and group's channel, its
detail to the task's own channel, a notice's hint, a tombstone, an order to end subscriptions.
Each message names its channels and carries its projection once, however many channels show
it. The outbox stores a change's messages as one row (docs/architecture.md, "The outbox");
the relay publishes every channel of it with the message's full projection and version, so
subscribers see exactly what one row per channel would have given them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Aggregate:
    """The thing whose state a message carries, at the version the change produced."""

    kind: str  # TASK | WORKFLOW | BROADCAST
    id: str
    version: int
    # The channel whose order matters most: the owner's summary channel (a broadcast's own).
    # All of an owner's changes go out through one outbox partition, so that channel gets them
    # in commit order, and each aggregate gets its versions in order on every channel.
    home: str


@dataclass(frozen=True)
class Message:
    """One projection's state for some channels, written with the change that produced it."""

    aggregate: Aggregate
    channels: tuple[str, ...]
    projection: str
    payload: Mapping[str, Any]
    # Never coalesced away by a later version (design D8.14): terminal, new task, new attempt,
    # removal, notice.
    must_deliver: bool
    event_id: str | None
    created_at: datetime
