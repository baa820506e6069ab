"""Whether Temporal has already timed an attempt out when its activity returns.

An activity that returns after its heartbeat or start-to-close timeout has no result in Temporal:
the server timed the attempt out (and may run it again) and refuses the late completion. Reporting
STEP_COMPLETED then would show a success Temporal never recorded, for the whole retry interval or,
on the last attempt, for good. The worker cannot see the server's timer, so this decides only when
the deadline has certainly passed, from what the worker does know; anything closer is reported as
it ended and left to the service, which ends such an attempt TIMED_OUT when Temporal starts the next.
"""

from __future__ import annotations

from dataclasses import dataclass

# Past the deadline by this much, the server's timer has fired (its timer queue runs in milliseconds)
# before the completion, sent after this decision, can reach it.
MARGIN_SECONDS = 0.5
# The SDK sends an attempt's first heartbeat at once and later ones at most every 0.8 × the
# heartbeat timeout, so a later beat may reach the server up to that long after the call.
THROTTLE_FRACTION = 0.8


@dataclass(frozen=True)
class Beats:
    """An attempt's heartbeat calls, on the worker's monotonic clock."""

    started: float
    count: int = 0
    last: float | None = None


def past_temporal_deadline(
    now: float, beats: Beats, *, heartbeat_timeout: float | None, start_to_close: float | None
) -> bool:
    """True only when the server has certainly timed the attempt out by ``now`` (monotonic seconds).

    The worker's start of the attempt is after the server's, so a start-to-close measured from it is
    never early; a heartbeat deadline is measured from the latest moment the last beat can have
    been sent (the call itself for an attempt's first beat, which is never held back).
    """
    if start_to_close and now - beats.started > start_to_close + MARGIN_SECONDS:
        return True
    if not heartbeat_timeout:
        return False
    if beats.count == 0 or beats.last is None:
        sent_by = beats.started
    elif beats.count == 1:
        sent_by = beats.last
    else:
        sent_by = beats.last + THROTTLE_FRACTION * heartbeat_timeout
    return now - sent_by > heartbeat_timeout + MARGIN_SECONDS
