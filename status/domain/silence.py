"""Is a silent executor dead, or is it the status service that cannot hear anyone? (seed §17, R7)

When the workers' heartbeats stop arriving across the board — the status API or its database was
unreachable for them — every running step looks silent at once, and marking them STALE would
tell every user that their work may have stopped when only the reporting path did. Pure
decision over a census of the running, heartbeating step attempts, time passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

# With fewer executors than this, and one producer, a silence cannot be told from a dead worker.
MIN_STEPS_FOR_A_FLEET = 5
MIN_SILENCE_SECONDS = 10


@dataclass(frozen=True)
class HeartbeatCensus:
    running: int  # RUNNING, current step attempts that heartbeat
    producers: int  # distinct producers among them
    newest_beat: datetime | None  # the latest heartbeat any of them delivered
    shortest_interval_seconds: int | None  # the shortest heartbeat interval among them


def ingest_silent(census: HeartbeatCensus, now: datetime) -> bool:
    """True when no running executor anywhere has been heard for several heartbeat intervals:
    the reports are not arriving (an outage of the ingest path), rather than one worker gone.
    One silent worker among others that beat is never this: its steps go STALE as they should.
    """
    if census.running == 0 or census.newest_beat is None:
        return False
    if census.producers < 2 and census.running < MIN_STEPS_FOR_A_FLEET:
        return False
    threshold = max(MIN_SILENCE_SECONDS, 3 * (census.shortest_interval_seconds or MIN_SILENCE_SECONDS))
    return (now - census.newest_beat).total_seconds() > threshold
