"""The processes ``task-observer dev`` starts (Centrifugo, the Temporal dev server), and their supervision.

A demo stack whose Centrifugo died must not sit there with a page that never
goes live and one log line about rows that wait: the supervisor notices a child
that exited (or stopped answering its health check), says so naming it, and
starts it again, on the same port with the same data. A child that keeps dying
is not restarted forever: past its budget the stack stops with a message that
names the child, its log and what to run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# A child may be restarted this many times within the window; the next death stops the stack.
MAX_RESTARTS = 3
RESTART_WINDOW_SECONDS = 600.0
# Alive but not answering its health check for this long counts as dead (a hung process).
UNHEALTHY_AFTER_SECONDS = 15.0


class RestartBudget:
    """At most ``limit`` restarts within any ``window`` seconds (time passed in, so it is testable)."""

    def __init__(self, limit: int = MAX_RESTARTS, window: float = RESTART_WINDOW_SECONDS) -> None:
        self.limit = limit
        self.window = window
        self._restarts: deque[float] = deque()

    def take(self, now: float) -> bool:
        """Whether one more restart is allowed now (and count it when it is)."""
        while self._restarts and now - self._restarts[0] >= self.window:
            self._restarts.popleft()
        if len(self._restarts) >= self.limit:
            return False
        self._restarts.append(now)
        return True

    @property
    def used(self) -> int:
        return len(self._restarts)


@dataclass
class Child:
    """One external process of the stack: how to start it, how to tell it is up, where it logs."""

    name: str
    args: list[str]
    env: dict[str, str]
    log: Path
    healthy: Callable[[], bool]
    start_timeout: float
    address: str
    budget: RestartBudget = field(default_factory=RestartBudget)
    process: subprocess.Popen[bytes] | None = None
    unhealthy_since: float | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self) -> None:
        """Spawn it in a session of its own (so it and anything it forks stop together) and wait until it answers."""
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.args,
                env={**os.environ, **self.env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.start_timeout
        while not self.healthy():
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with code {self.process.returncode} while starting; see {self.log}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not start within {self.start_timeout:.0f}s; see {self.log}")
            time.sleep(0.1)
        self.unhealthy_since = None

    def stop(self, grace: float = 15.0) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)

    def trouble(self, now: float) -> str | None:
        """Why it needs a restart (exited, or silent past UNHEALTHY_AFTER_SECONDS), or None. Reaps an exited child."""
        if self.process is None:
            return None
        code = self.process.poll()
        if code is not None:
            return f"exited ({_exit_text(code)})"
        if self.healthy():
            self.unhealthy_since = None
            return None
        if self.unhealthy_since is None:
            self.unhealthy_since = now
        if now - self.unhealthy_since >= UNHEALTHY_AFTER_SECONDS:
            return f"stopped answering its health check {now - self.unhealthy_since:.0f}s ago"
        return None


def _exit_text(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"code {code}"


class GaveUp(RuntimeError):
    """A child kept dying past its restart budget: the stack stops."""


def check_children(children: list[Child], say: Callable[[str], None], now: float | None = None) -> None:
    """One supervision pass: restart each child in trouble, or raise GaveUp when its budget is spent."""
    for child in children:
        moment = time.monotonic() if now is None else now
        reason = child.trouble(moment)
        if reason is None:
            continue
        old_pid = child.pid
        if not child.budget.take(moment):
            raise GaveUp(
                f"{child.name} (pid {old_pid}) {reason}, and it was restarted {child.budget.limit} times within"
                f" {child.budget.window / 60:.0f} minutes; the demo stack stops. Its log: {child.log}\n"
                f"  Fix what the log says, then run `task-observer dev` again (or start {child.name} yourself on"
                f" {child.address}: `task-observer dev` uses one that is already running)."
            )
        say(f"  {child.name} (pid {old_pid}) {reason}; restarting it ({child.budget.used} of {child.budget.limit})…")
        child.stop(grace=5)
        try:
            child.start()
        except RuntimeError as exc:
            say(f"  {child.name} did not come back: {exc}")
            continue  # the next pass sees it gone again and spends more of its budget
        say(f"  {child.name} restarted: {child.address} (pid {child.pid})")
