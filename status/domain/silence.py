"""Is a silent executor dead, or is it the status service that cannot hear anyone? (design D18R7)

When the workers' heartbeats stop arriving across the board — the status API or its database was
unreachable for them — every running step looks silent at once, and marking them STALE would
tell every user that their work may have stopped when only the reporting path did. Pure
decisions over a census of the running, heartbeating step attempts, time passed in:

* ``stale_cutoff``: in a fleet, a step's silence is its own only when others were heard after its
  deadline, so only deadlines before the newest beat count. This holds from the first second of
  an outage: the steps whose last beat came a little before the newest one reach their deadlines
  before the outage itself can be recognised, and would otherwise go STALE first.
* ``ingest_silent``: no one heard for several intervals — the reporting path is down. The
  reconciler suspends STALE (up to a limit: a fleet that died together is silent too) and gives
  every step a grace period to beat again once heartbeats are back.
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


@dataclass(frozen=True)
class HeartbeatFreshness:
    """How fresh the running executions' heartbeats are at one instant (the freshness objective,
    docs/slo.md): how many heartbeat, how many are past their timeout (silent: STALE, or about to
    be), and per age in seconds how many were heard within it."""

    running: int
    overdue: int
    heard_within: dict[int, int]
    age_sum_seconds: float = 0.0  # of the last beats' ages (executions never heard have none)


def _a_fleet(census: HeartbeatCensus) -> bool:
    return census.producers >= 2 or census.running >= MIN_STEPS_FOR_A_FLEET


def stale_cutoff(census: HeartbeatCensus, now: datetime) -> datetime:
    """The latest heartbeat deadline whose passing may make a step STALE at ``now``.

    A lone executor's silence cannot be told from the reporting path's: its deadline counts as
    soon as it passes. In a fleet, only a deadline the newest beat came after: someone was heard
    when this step should have been, so its silence is its own, not the reporting path's.
    """
    if census.newest_beat is None or not _a_fleet(census):
        return now
    return min(now, census.newest_beat)


def ingest_silent(census: HeartbeatCensus, now: datetime) -> bool:
    """True when no running executor anywhere has been heard for several heartbeat intervals:
    the reports are not arriving (an outage of the ingest path), rather than one worker gone.
    One silent worker among others that beat is never this: its steps go STALE as they should.
    """
    if census.running == 0 or census.newest_beat is None:
        return False
    if not _a_fleet(census):
        return False
    threshold = max(MIN_SILENCE_SECONDS, 3 * (census.shortest_interval_seconds or MIN_SILENCE_SECONDS))
    return (now - census.newest_beat).total_seconds() > threshold
