"""A heartbeat judged against its step attempt (design D8.6): pure decisions, the stored row passed in.

A heartbeat is no event: it moves no version and publishes nothing, and the worker sends the
next one whatever this one got. So a refusal here is a reason in the answer, never an error
raised, and the one beat that must change what users see — the first from an execution shown
STALE — is handed to the event path (``RECOVER``), which moves it back to HEALTHY exactly once.

The trap is the sequence. A worker may send the same beat twice (a retried request); the repeat
is answered as accepted, not as a regression, and a beat older than one already recorded is
refused, never written over a newer one: ``last_seq`` is the attempt's newest, as the batch has
moved it so far.

A batch's beats are decided in two ways. The guarded write re-checks the usual case in the
database itself, row by row, without a prior read or lock; only the rest are judged here against
rows locked for it. Which beats may take the guarded write is itself judged here
(``takes_guarded_write``), from rows read without a lock: the write re-checks them, so a row that
changed since the read only costs the batch a second, careful pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from status.domain.errors import ErrorCode
from status.domain.lifecycle import Health, Lifecycle


class BeatRow(Protocol):
    """What a heartbeat is judged against: its step attempt's stored columns."""

    @property
    def execution_id(self) -> str | None: ...
    @property
    def superseded(self) -> bool: ...
    @property
    def lifecycle_status(self) -> str: ...
    @property
    def health(self) -> str: ...
    @property
    def last_heartbeat_seq(self) -> int: ...


class BeatOutcome(Enum):
    ACCEPTED = "ACCEPTED"  # recorded: the attempt is running and was heard
    DUPLICATE = "DUPLICATE"  # this sequence number was recorded before: accepted, nothing written
    REFUSED = "REFUSED"  # not recorded; ``reason`` says why
    RECOVER = "RECOVER"  # the attempt is shown STALE: the event path makes it HEALTHY again


@dataclass(frozen=True)
class BeatVerdict:
    outcome: BeatOutcome
    reason: ErrorCode | None = None
    health: str | None = None  # the attempt's health, where the answer tells it


ACCEPTED = BeatVerdict(BeatOutcome.ACCEPTED, health=Health.HEALTHY.value)


def judge_beat(execution_id: str, heartbeat_seq: int, row: BeatRow | None, last_seq: int) -> BeatVerdict:
    """Heartbeat ``heartbeat_seq`` of ``execution_id`` against its attempt's ``row`` (None: the
    attempt is gone) and the newest sequence recorded for it (``last_seq``)."""
    if row is None:
        return BeatVerdict(BeatOutcome.REFUSED, ErrorCode.UNKNOWN_STEP)
    if row.execution_id != execution_id:
        return BeatVerdict(BeatOutcome.REFUSED, ErrorCode.STALE_EXECUTION)
    if row.superseded:
        return BeatVerdict(BeatOutcome.REFUSED, ErrorCode.STALE_ATTEMPT)
    lifecycle = Lifecycle(row.lifecycle_status)
    if lifecycle.terminal:
        return BeatVerdict(BeatOutcome.REFUSED, ErrorCode.TERMINAL_STATE)
    if lifecycle is not Lifecycle.RUNNING:
        return BeatVerdict(BeatOutcome.REFUSED, ErrorCode.INVALID_TRANSITION)
    if heartbeat_seq == last_seq:
        return BeatVerdict(BeatOutcome.DUPLICATE, health=row.health)
    if heartbeat_seq < last_seq:
        return BeatVerdict(BeatOutcome.REFUSED, ErrorCode.SOURCE_SEQ_REGRESSION, row.health)
    if row.health == Health.STALE.value:
        return BeatVerdict(BeatOutcome.RECOVER)
    return ACCEPTED


def takes_guarded_write(execution_id: str, heartbeat_seq: int, row: BeatRow | None) -> bool:
    """Whether a beat, judged against its attempt's ``row`` as last read, is one the guarded write
    takes: accepted on its own and the attempt HEALTHY (the write's condition; a DEGRADED attempt's
    beat is accepted too, but judged under the lock)."""
    return (
        row is not None
        and row.health == Health.HEALTHY.value
        and judge_beat(execution_id, heartbeat_seq, row, row.last_heartbeat_seq).outcome is BeatOutcome.ACCEPTED
    )
