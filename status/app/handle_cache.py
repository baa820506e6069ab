"""What an execution handle names, kept in memory for the heartbeat path (design D8.6) and for
the order in which a group of events locks its tasks.

A worker names each heartbeat's execution by its handle. Resolving a batch of 1,000 handles read
1,000 handle rows and the tasks' tenancy — PyMySQL decodes every row in Python, about a third of
the API's CPU per heartbeat batch — before the one statement that writes the beats.

Why an entry read once stays exact: a handle row is written when its execution is bound and is
never updated afterwards except for its revocation columns, which the heartbeat path does not read
(what revocation protects — an ended, superseded or corrected attempt — the guarded write checks
on the step row itself: current execution, RUNNING, HEALTHY, not superseded, newer seq). A task's
tenant and authority scope never change either. So, for as long as the rows exist, an entry is
what a read would return now. Rows do go away — retention purges an ended task with its steps
and handles — and then the guarded write takes fewer beats than it was given; that answer is
never used: the batch is decided again from a fresh read
(``HeartbeatCommands.record_heartbeats``), so a cached entry can only ever let a batch be answered
"accepted" when the database took every one of its beats.

A group of events takes from here only which task each handle names, to lock those tasks before
anything else; it reads the handle rows themselves with its locks, revocation and all.

Entries are only added from committed reads (a fresh read's), bounded in number (least
recently used first out), and hold the handle's hash, never the handle itself.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from datetime import datetime

from status.domain.auth import StoredHandle


@dataclass(frozen=True, slots=True)
class KnownHandle:
    """A handle's facts and its task's tenancy: immutable but for the expiry, which heartbeats
    renew (a held expiry older than the row's only sends a beat to a fresh read)."""

    task_id: str
    step_id: str
    attempt: int
    execution_id: str
    producer_id: str
    expires_at: datetime
    tenant_id: str
    authority_scope: str

    @classmethod
    def of(cls, row: StoredHandle, tenant_id: str, authority_scope: str) -> KnownHandle:
        """What a handle row read now says, with its task's tenancy."""
        return cls(
            row.task_id,
            row.step_id,
            row.step_attempt,
            row.execution_id,
            row.producer_id,
            row.expires_at,
            tenant_id,
            authority_scope,
        )

    @property
    def key(self) -> tuple[str, str, int, str]:
        return (self.task_id, self.step_id, self.attempt, self.execution_id)


class HandleCache:
    def __init__(self, capacity: int = 65_536) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[str, KnownHandle] = OrderedDict()
        self._lock = threading.Lock()

    def get_all(self, hashes: list[str]) -> list[KnownHandle] | None:
        """Every one of these handles, in order, or None when any is not held."""
        found: list[KnownHandle] = []
        with self._lock:
            entries = self._entries
            for handle_hash in hashes:
                known = entries.get(handle_hash)
                if known is None:
                    return None
                found.append(known)
            for handle_hash in hashes:
                entries.move_to_end(handle_hash)
        return found

    def extend(self, hashes: list[str], expires_at: datetime) -> None:
        """A heartbeat renewed these handles (their only fact that moves, and only later)."""
        with self._lock:
            for handle_hash in hashes:
                known = self._entries.get(handle_hash)
                if known is not None and known.expires_at < expires_at:
                    self._entries[handle_hash] = replace(known, expires_at=expires_at)

    def put_many(self, known: dict[str, KnownHandle]) -> None:
        with self._lock:
            self._entries.update(known)
            for handle_hash in known:
                self._entries.move_to_end(handle_hash)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)
