"""Keyset-pagination cursors (newest first): an opaque token of the last row's time and id."""

from __future__ import annotations

import base64
import json
from datetime import datetime

from status.domain.errors import Invalid


def encode_cursor(created_at: datetime, key: str) -> str:
    raw = json.dumps([created_at.isoformat(), key]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The (time, id) a cursor continues after; a cursor that is not one of ours is VALIDATION_FAILED."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, key = json.loads(raw)
        key = str(key)
        key.encode("utf-8")  # a lone surrogate (a tampered cursor) is no key of ours
        return datetime.fromisoformat(created), key
    except (ValueError, TypeError) as exc:
        raise Invalid("cursor is not valid") from exc
