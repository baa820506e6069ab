"""When the reporter's sender works: a thread of its own, woken by what it is told.

The reporter decides what a delivery and a heartbeat round do; this thread decides when: a pass
of deliveries each time it is kicked (the writer handed events over, someone waits for a pass),
none before a backoff has passed, and a heartbeat round every interval or at once when asked.
Nothing of it runs on the worker's event loop; callers there wait for a pass on their own loop
(docs/architecture.md, "The plugin's sender").
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from contextlib import suppress


class SenderThread:
    def __init__(
        self,
        deliver: Callable[[], None],
        heartbeat_round: Callable[[], None],
        round_interval: Callable[[], float],
    ) -> None:
        self._deliver = deliver
        self._heartbeat_round = heartbeat_round
        self._round_interval = round_interval
        self._cond = threading.Condition()
        self._kicked = True  # a first pass at once: what an earlier process left
        self._beat_now = False
        self._stopping = False
        self._retry_at = 0.0  # monotonic; no pass before it (backing off)
        # Callers waiting for the next pass to end: (their loop, a future on it).
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._thread = threading.Thread(target=self._run, name="task-status-sender", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    def kick(self) -> None:
        """A pass soon (any thread): events were handed over."""
        with self._cond:
            self._kicked = True
            self._cond.notify()

    def beat_now(self) -> None:
        """A heartbeat round at once (any thread)."""
        with self._cond:
            self._beat_now = True
            self._cond.notify()

    def retry_after(self, delay: float) -> None:
        """From a pass that failed: the next one, no sooner than ``delay`` seconds from now."""
        with self._cond:
            self._kicked = True
            self._retry_at = time.monotonic() + delay

    async def next_pass(self) -> None:
        """Ask for a pass and wait (on the caller's loop) until it has ended."""
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()
        with self._cond:
            self._waiters.append((loop, ended))
            self._kicked = True
            self._cond.notify()
        await ended

    def stop(self) -> None:
        """End the thread (blocking: call from a thread, not the loop)."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self.started:
            self._thread.join()

    def _run(self) -> None:
        next_round = time.monotonic() + self._round_interval()
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    send = self._kicked and now >= self._retry_at
                    beat = self._beat_now or now >= next_round
                    if send or beat or self._stopping:
                        break
                    wake_at = min(next_round, self._retry_at) if self._kicked else next_round
                    self._cond.wait(wake_at - now)
                if self._stopping:
                    _tell(self._waiters)
                    self._waiters = []
                    return
                self._beat_now = False
                waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
                if send:
                    self._kicked = False
                    waiters, self._waiters = self._waiters, []
            if beat:
                self._heartbeat_round()
                next_round = time.monotonic() + self._round_interval()
                self.kick()  # a round also looks in the file (the reporter's round asked for it)
            if send:
                self._deliver()
                _tell(waiters)


def _tell(waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]) -> None:
    """From the sender thread: each waiter's pass has ended (on its own loop)."""
    for loop, ended in waiters:
        with suppress(RuntimeError):  # its loop has closed: nobody waits any more
            loop.call_soon_threadsafe(_resolve, ended)


def _resolve(ended: asyncio.Future[None]) -> None:
    if not ended.done():
        ended.set_result(None)
