"""Group commit for single-event requests (design D16).

Concurrent ``POST /internal/v1/task-events`` requests in one API process
share transactions: while a group is being decided, new events queue; the
next group takes everything queued (up to ``max_group``).  An idle service
therefore commits each event at once (no timer, no added latency), and a busy
one commits many per transaction — one fsync, one multi-row INSERT per table —
without any caller waiting for a clock.  Each request still gets its own result
or its own rejection.

A group is decided in Python and then written (its statements sent, its commit
awaited).  The next group starts once the one before it is writing, never
while it is still deciding, up to ``max_in_flight`` groups at once: the
process decides one group while the database commits the other, and groups
stay as large as with one in flight.  Starting the second group at once
instead halved the groups and cost a fifth more CPU per event for the same
events/s (docs/benchmarks.md, 2026-12-07).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence

import anyio.to_thread

from status.app import commands as c
from status.app.answers import EventAccepted
from status.app.context import EventCaller

Item = tuple[EventCaller, c.ReportEvent]
# The group's items, and what to call (from its thread) once it is decided and being written.
RunGroup = Callable[[Sequence[Item], Callable[[], None]], list[EventAccepted | BaseException]]


class GroupCommitter:
    def __init__(self, run_group: RunGroup, *, max_group: int = 64, max_in_flight: int = 2) -> None:
        self._run_group = run_group
        self._max_group = max(1, max_group)
        self._max_in_flight = max(1, max_in_flight)
        self._queue: deque[tuple[Item, asyncio.Future[EventAccepted]]] = deque()
        self._in_flight = 0
        self._deciding = False  # a group is being decided: the next waits until it is written
        self._tasks: set[asyncio.Task[None]] = set()  # strong references: the loop keeps only weak ones

    async def submit(self, caller: EventCaller, cmd: c.ReportEvent) -> EventAccepted:
        """The event's result once its group committed; raises the event's own rejection."""
        future: asyncio.Future[EventAccepted] = asyncio.get_running_loop().create_future()
        self._queue.append(((caller, cmd), future))
        self._start_groups()
        return await future

    def _start_groups(self) -> None:
        if self._queue and self._in_flight < self._max_in_flight and not self._deciding:
            batch = [self._queue.popleft() for _ in range(min(self._max_group, len(self._queue)))]
            self._in_flight += 1
            self._deciding = True
            task = asyncio.get_running_loop().create_task(self._commit(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _commit(self, batch: list[tuple[Item, asyncio.Future[EventAccepted]]]) -> None:
        loop = asyncio.get_running_loop()
        decided = False

        def done_deciding() -> bool:
            """Clear the committer's flag, once: True the first time."""
            nonlocal decided
            first, decided = not decided, True
            if first:
                self._deciding = False
            return first

        def written() -> None:  # on the loop, once the group's thread said it is being written
            if done_deciding():
                self._start_groups()

        def writing() -> None:  # on the group's thread
            loop.call_soon_threadsafe(written)

        try:
            outcomes = await anyio.to_thread.run_sync(self._run_group, [item for item, _ in batch], writing)
        except BaseException as exc:  # the group as a whole failed: each caller gets that error
            outcomes = [exc] * len(batch)
        finally:
            self._in_flight -= 1
            done_deciding()  # if it ended (or failed) before it was written, it was the one deciding
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            if future.cancelled():
                continue  # the client went away; the event is committed (or not) all the same
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)
        self._start_groups()
