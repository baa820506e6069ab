"""How long each kind of data lives, and the one rule that makes purging dedup entries safe.

design D14.1, D8.16: current state, events, dedup results, published outbox rows, notifications and
corrections have different lives, so each has its own window (``None``: kept forever).  The
windows are not independent: a dedup entry answers a retried event with its first result, so
once it is purged the same event must no longer be accepted — it would be applied again.  The
service therefore refuses events older than ``max_event_age`` (``EVENT_TOO_OLD``), and dedup
entries live at least ``max_event_age + retry_grace``.  Why that is enough:

* an event occurs at ``o`` and is committed at ``c >= o - skew`` (a producer cannot report the
  future past the clock skew the service tolerates: ``EVENT_IN_FUTURE``; its retry carries the
  same ``occurredAt``: the content, and so the fingerprint, is the same);
* its dedup entry is purged no earlier than ``c + dedup >= o + max_event_age + retry_grace``;
* a retry arriving after that instant has ``now - o > max_event_age`` and is refused before it
  can be applied — so a retry is either answered from its dedup entry or refused, never applied
  twice.  The grace covers a retry already in flight (received just inside the age limit)
  while its first attempt's entry ages out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from status.domain.errors import ErrorCode, Invalid


@dataclass(frozen=True)
class RetentionPolicy:
    """Windows per kind of data; ``None`` keeps that data forever."""

    max_event_age: timedelta | None = timedelta(days=6)
    retry_grace: timedelta = timedelta(days=1)
    dedup: timedelta | None = timedelta(days=7)
    events: timedelta | None = timedelta(days=30)
    outbox: timedelta | None = timedelta(days=1)
    terminal_tasks: timedelta | None = timedelta(days=90)
    notifications: timedelta | None = timedelta(days=90)
    corrections: timedelta | None = timedelta(days=365)

    def problems(self) -> list[str]:
        """What makes this policy unsafe (empty when it is safe)."""
        if self.dedup is None:
            return []
        if self.max_event_age is None:
            return ["dedup results are purged but events of any age are accepted: set a maximum event age"]
        needed = self.max_event_age + self.retry_grace
        if self.dedup < needed:
            return [
                f"dedup results must live at least the maximum event age plus the retry grace "
                f"({needed.total_seconds():.0f} s), not {self.dedup.total_seconds():.0f} s"
            ]
        return []


def check_event_age(
    occurred_at: datetime, now: datetime, max_age: timedelta | None, max_skew: timedelta | None = None
) -> None:
    """Refuse an event whose dedup entry may already be purged, or one from further in the future
    than the tolerated clock skew (the argument above holds only for events that are not)."""
    if max_skew is not None and occurred_at - now > max_skew:
        raise Invalid(
            f"occurredAt is ahead of the service's clock by more than {max_skew.total_seconds():.0f} s",
            ErrorCode.EVENT_IN_FUTURE,
        )
    if max_age is not None and now - occurred_at > max_age:
        raise Invalid(
            f"occurredAt is older than the maximum accepted event age ({max_age.total_seconds():.0f} s)",
            ErrorCode.EVENT_TOO_OLD,
        )


def cutoff(now: datetime, window: timedelta | None) -> datetime | None:
    """Rows dated before this instant are past ``window`` (None: nothing is)."""
    return None if window is None else now - window
