"""Where a native SSE stream stands in each of its channels, as its event ids say it.

Centrifugo's uni-directional SSE recovers nothing by itself: a client that reconnects must name,
for each channel, the stream position it had (epoch and offset). A browser's ``EventSource``
keeps one thing across a reconnect: the id of the last event it received, which it sends back as
``Last-Event-ID``. So each message event's id carries the positions of every channel the stream
follows from its connection (the user's summary channel and their groups' shared channels), not
just the one its message came from: whichever event was last, the reconnect can ask for all of
them. Watched details are not among them: a reconnected page sends its watch set again.

The id is opaque to the page (compact JSON, base64url); one that does not decode is no position
(the stream starts afresh, as a first connection does).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from typing import Any

Position = tuple[str, int]  # (epoch, offset)

# An id names at most this many channels (a login's summary channel and its shared channels: 33).
MAX_CHANNELS = 64
MAX_ID_LENGTH = 8192


def encode(positions: Mapping[str, Position]) -> str:
    """The event id for these positions."""
    compact = json.dumps(
        {channel: [epoch, offset] for channel, (epoch, offset) in sorted(positions.items())}, separators=(",", ":")
    )
    return base64.urlsafe_b64encode(compact.encode()).decode().rstrip("=")


def decode(event_id: str | None, channels: Iterable[str]) -> dict[str, Position]:
    """The positions an id names for ``channels`` (the stream's own: an id naming others cannot
    make it recover a channel its login does not hold); {} for an id that does not decode."""
    if not event_id or len(event_id) > MAX_ID_LENGTH:
        return {}
    try:
        raw: Any = json.loads(base64.urlsafe_b64decode(event_id + "=" * (-len(event_id) % 4)))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return {}
    if not isinstance(raw, dict) or len(raw) > MAX_CHANNELS:
        return {}
    wanted = set(channels)
    positions: dict[str, Position] = {}
    for channel, value in raw.items():
        if channel not in wanted or not isinstance(value, list) or len(value) != 2:
            continue
        epoch, offset = value
        if isinstance(epoch, str) and isinstance(offset, int) and not isinstance(offset, bool) and offset >= 0:
            positions[channel] = (epoch, offset)
    return positions


def recovery_request(positions: Mapping[str, Position]) -> dict[str, Any]:
    """The ``subs`` of Centrifugo's connect request that recovers each channel from its position."""
    return {
        channel: {"recover": True, "epoch": epoch, "offset": offset} for channel, (epoch, offset) in positions.items()
    }
