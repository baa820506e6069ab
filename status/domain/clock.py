"""Time as the service stores it: naive UTC with millisecond precision (what DATETIME(3) holds)."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    """Naive UTC with millisecond precision: what DATETIME(3) columns hold."""
    now = datetime.now(UTC)
    return now.replace(tzinfo=None, microsecond=now.microsecond // 1000 * 1000)  # one copy, not two


def now_ms(now: datetime) -> datetime:
    """Truncate to milliseconds: what DATETIME(3) stores is what we return."""
    return now.replace(microsecond=(now.microsecond // 1000) * 1000)


def naive_utc(value: datetime) -> datetime:
    """The service's one kind of instant: naive UTC. An aware instant (a caller in process, a
    benchmark) is turned into it at the boundary, so the domain never compares the two kinds."""
    return value if value.tzinfo is None else value.astimezone(UTC).replace(tzinfo=None)
