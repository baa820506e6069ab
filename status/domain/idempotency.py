"""What a request sent again under an id already answered gets (design D8.1): its first answer.

The service keeps each answer with a fingerprint of what was asked. The same content again is
that answer, marked a duplicate — one change however often it is sent; other content under the
same id is refused with the caller's conflict code, never applied as something new.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from status.domain.errors import Conflict, ErrorCode


def first_answer(
    fingerprint: str, first: tuple[str, Mapping[str, Any]] | None, *, name: str, conflict: ErrorCode
) -> dict[str, Any] | None:
    """The first answer to a request whose ``name`` (eventId, correctionId) was answered before
    (``first``: that answer's fingerprint and result), or None for a new request."""
    if first is None:
        return None
    first_fingerprint, answer = first
    if first_fingerprint != fingerprint:
        raise Conflict(f"{name} was already used with different content", conflict)
    return {**answer, "duplicate": True}
