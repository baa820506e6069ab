"""What one transaction of the plugin's outbox file writes, as rows for a few statements.

The writer thread's reports (``Writes``) and what the sender learnt from answers (``Settled``)
each go with one statement per kind of row, whatever their number: SQLite's driver lets go of
the GIL for every row a statement steps through, and each of those hand-offs lands on the
worker's other threads (docs/architecture.md, "The plugin's sender").
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any


class Writes:
    """What queued for the file since its last transaction, as three statements' rows: executions
    recorded, events (in report order) and each execution's next sequence (only its latest) —
    and, rarely, executions that ended without an ending of their own (``ended``): their rows go
    now if nothing of them waits. Order inside the transaction does not matter to its outcome:
    the executions are inserted first, so their sequences' UPDATE finds them."""

    __slots__ = ("ended", "events", "executions", "sequences")

    def __init__(self) -> None:
        self.executions: list[tuple[str, str, int, float]] = []
        # (execution key, seq, body as stored, body, whether it ends its execution)
        self.events: list[tuple[str, int, str, dict[str, Any], bool]] = []
        self.sequences: dict[str, tuple[int, int]] = {}
        self.ended: list[str] = []

    def __bool__(self) -> bool:
        return bool(self.executions or self.events or self.sequences)

    def apply(self, db: sqlite3.Connection) -> int:
        """Write them; the row id of the first event (the others follow it, in order)."""
        for part in parts(self.executions, 4):
            db.execute(
                "INSERT OR IGNORE INTO execution (key, binding, attempt, next_seq, created_at) VALUES "
                + ", ".join(["(?, ?, ?, 1, ?)"] * len(part)),
                [value for row in part for value in row],
            )
        first_id = 0
        for part in parts(self.events, 3):
            # One statement's rows take consecutive ids (the transaction holds the file's write
            # lock): its last one, less the others, is its first.
            last = db.execute(
                "INSERT INTO event (execution_key, seq, body) VALUES " + ", ".join(["(?, ?, ?)"] * len(part)),
                [value for key, seq, text, _, _ in part for value in (key, seq, text)],
            ).lastrowid
            first_id = first_id or int(last or 0) - len(part) + 1
        for part in parts(list(self.sequences.items()), 5):
            cases = " ".join(["WHEN ? THEN ?"] * len(part))
            db.execute(
                f"UPDATE execution SET next_seq = CASE key {cases} END,"
                f" finished = MAX(finished, CASE key {cases} END)"
                f" WHERE key IN ({', '.join(['?'] * len(part))})",
                [value for key, (next_seq, _) in part for value in (key, next_seq)]
                + [value for key, (_, finished) in part for value in (key, finished)]
                + [key for key, _ in part],
            )
        for part in parts(self.ended, 1):
            db.execute(
                f"DELETE FROM execution WHERE key IN ({', '.join(['?'] * len(part))})"
                " AND finished = 1 AND key NOT IN (SELECT execution_key FROM event)",
                part,
            )
        return first_id

    def then(self, newer: Writes) -> Writes:
        """These writes (which failed) followed by ``newer``: an execution's newer sequence wins."""
        merged = Writes()
        merged.executions = self.executions + newer.executions
        merged.events = self.events + newer.events
        merged.sequences = {**self.sequences, **newer.sequences}
        merged.ended = self.ended + newer.ended
        return merged


# SQLite before 3.32 binds at most 999 values to a statement.
MAX_VALUES = 999


def parts(rows: Sequence[Any], values_per_row: int) -> Iterator[Sequence[Any]]:
    """``rows`` in parts whose statements bind at most ``MAX_VALUES`` values."""
    size = MAX_VALUES // values_per_row
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


class Settled:
    """What answers said since the file's last transaction: handles handed out, events delivered,
    events refused for good (their ``undeliverable`` rows, rendered when they were said)."""

    __slots__ = ("bound", "delivered", "refused")

    def __init__(self) -> None:
        self.bound: list[tuple[str, str, str]] = []
        self.delivered: list[int] = []
        self.refused: list[tuple[str, str, str, str, float, str, str]] = []

    def __bool__(self) -> bool:
        return bool(self.bound or self.delivered)

    def apply(self, db: sqlite3.Connection) -> None:
        for part in parts(self.bound, 5):
            cases = " ".join(["WHEN ? THEN ?"] * len(part))
            db.execute(
                f"UPDATE execution SET execution_handle = CASE key {cases} END, execution_id = CASE key {cases} END"
                f" WHERE key IN ({', '.join(['?'] * len(part))})",
                [value for key, handle, _ in part for value in (key, handle)]
                + [value for key, _, execution_id in part for value in (key, execution_id)]
                + [key for key, _, _ in part],
            )
        if not self.delivered:
            return
        if self.refused:
            db.executemany(
                "INSERT INTO undeliverable (execution_key, event_id, body, reason, refused_at, binding, attempt)"
                " VALUES (?, ?, ?, ?, ?, (SELECT binding FROM execution WHERE key = ?),"
                " (SELECT attempt FROM execution WHERE key = ?))",
                self.refused,
            )
        for part in parts(self.delivered, 1):
            db.execute(f"DELETE FROM event WHERE id IN ({', '.join(['?'] * len(part))})", part)
        # A finished execution with nothing left to send is done.
        db.execute("DELETE FROM execution WHERE finished = 1 AND key NOT IN (SELECT execution_key FROM event)")

    def then(self, newer: Settled) -> Settled:
        """These (whose transaction failed) followed by ``newer``."""
        merged = Settled()
        merged.bound = self.bound + newer.bound
        merged.delivered = self.delivered + newer.delivered
        merged.refused = self.refused + newer.refused
        return merged
