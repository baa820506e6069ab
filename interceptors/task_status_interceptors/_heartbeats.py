"""Heartbeats of a worker's executions, as the reporter sends them (memory only: a heartbeat is a
liveness signal, not a report to keep; the next one supersedes it).

For each execution: the latest sequence its activity beat, the last one sent and when, and whether
its activity let go of it (completes elsewhere: one last heartbeat says so). Activity threads and
the worker's event loop beat and forget; the reporter's sender thread reads and settles. One lock
keeps an answer settled on one thread from bringing back what another just forgot.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

from task_status_interceptors._outbox import now_iso

# What the service answers for an execution it will never take a heartbeat for again.
_NEVER_AGAIN = ("TERMINAL_STATE", "STALE_ATTEMPT", "TOKEN_REVOKED")


class HeartbeatBook:
    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.latest: dict[str, int] = {}
        self._elsewhere: set[str] = set()  # executions whose activity completes elsewhere: last beat due
        self._sent: dict[str, int] = {}
        self._sent_at: dict[str, float] = {}  # monotonic; when each execution's last went
        self._lock = threading.Lock()

    def beat(self, key: str, seq: int) -> None:
        self.latest[key] = seq

    def let_go(self, key: str, seq: int) -> None:
        """The activity completes elsewhere: its next heartbeat, the last, says so."""
        with self._lock:
            self.latest[key] = seq
            self._elsewhere.add(key)

    def forget(self, key: str) -> None:
        with self._lock:
            self._forget(key)

    def _forget(self, key: str) -> None:
        self.latest.pop(key, None)
        self._elsewhere.discard(key)
        self._sent.pop(key, None)
        self._sent_at.pop(key, None)

    def due(self) -> dict[str, int]:
        """Executions that beat since their last heartbeat was sent, with their latest sequence."""
        with self._lock:
            # (a copy first: activities beat into ``latest`` without the lock)
            return {key: seq for key, seq in list(self.latest.items()) if self._sent.get(key) != seq}

    def item(self, key: str, handle: str, seq: int) -> dict[str, Any]:
        item: dict[str, Any] = {"executionHandle": handle, "heartbeatSeq": seq, "observedAt": now_iso()}
        if key in self._elsewhere:
            item["completesElsewhere"] = True
        return item

    def riding_with(self, executions: Iterable[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
        """Heartbeats of these (bound) executions that beat since their last was sent, at most one
        every half heartbeat interval each (no more heartbeat writes than the rounds make)."""
        if not self.latest:
            return []
        now, spacing = time.monotonic(), self.interval / 2
        items: dict[str, dict[str, Any]] = {}
        with self._lock:
            for execution in executions:
                key, handle = execution["key"], execution["handle"]
                seq = self.latest.get(key)
                if (
                    seq is None
                    or handle is None
                    or key in items
                    or self._sent.get(key) == seq
                    or now - self._sent_at.get(key, -spacing) < spacing
                ):
                    continue
                items[key] = self.item(key, handle, seq)
        return list(items.items())

    def settle(self, items: list[tuple[str, dict[str, Any]]], results: list[dict[str, Any]]) -> list[str]:
        """What the service said of heartbeats: sent; an execution it will never take one for again
        (ended, superseded, revoked), or one whose letting go it took, beats no more. Returns the
        executions let go that the service took it for: nothing of them is sent again."""
        let_go: list[str] = []
        now = time.monotonic()
        with self._lock:
            for (key, item), result in zip(items, results, strict=True):
                if key not in self.latest:
                    continue  # it finished while the heartbeat was on its way: nothing of it is kept
                self._sent[key] = int(item["heartbeatSeq"])
                self._sent_at[key] = now
                elsewhere = key in self._elsewhere
                if not result["accepted"] and result["reason"] in _NEVER_AGAIN:
                    self._forget(key)
                    if elsewhere:
                        let_go.append(key)
                elif result["accepted"] and item.get("completesElsewhere"):
                    self._forget(key)  # said: the service watches it in Temporal now
                    let_go.append(key)
        return let_go
