"""Whether anyone may be following a task's detail channel (docs/architecture.md, "Detail
messages only while watched").

A detail channel is followed only with a detail grant, which expires; the task row keeps until
when the grants given for it may be in use (``followed_until``). The margin covers a follower
whose subscription outlives its token for a while (Centrifugo closes it only some seconds after
the token expired, and the refresh that renews the grant may come late) and the clocks of the
service's processes, which are not the same clock.

A task nobody has ever followed says so (``NEVER_FOLLOWED``, what a new row holds); a row written
before the service kept any of this says nothing (None).
"""

from __future__ import annotations

from datetime import datetime, timedelta

FOLLOW_MARGIN = timedelta(minutes=2)
NEVER_FOLLOWED = datetime(1970, 1, 1, 0, 0, 1)


def followed_until(grant_expires: datetime) -> datetime:
    """Until when a grant expiring at ``grant_expires`` may have its channel followed."""
    return grant_expires + FOLLOW_MARGIN


def followed(until: datetime | None, now: datetime) -> bool:
    """Whether a detail channel said to be followable ``until`` may be followed ``now`` (a row
    that says nothing may be: its changes publish their detail as they always did)."""
    return until is None or until > now


def catch_up_needed(until: datetime | None, now: datetime) -> bool:
    """Whether a grant given ``now`` must publish the task's current detail: changes may have gone
    unpublished while a client could still recover from a position before them. Not while the
    channel is followed (nothing went unpublished since it was last published in full), nor when
    nobody ever followed it (nobody holds a position in it)."""
    return until is None or (until != NEVER_FOLLOWED and until <= now)
