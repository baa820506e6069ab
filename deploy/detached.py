"""Detached processes recorded in a directory: what deploy/galera/cluster.py and
deploy/redis/sentinel.py start, so one command starts a set and a later one stops it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path


class Detached:
    """Processes started in a session of their own, each with ``NAME.pid`` and ``NAME.log`` in ``dir``."""

    def __init__(self, dir: Path) -> None:
        self.dir = dir

    def spawn(self, name: str, command: list[str]) -> None:
        log = open(self.dir / f"{name}.log", "ab")  # noqa: SIM115 (the child keeps it)
        proc = subprocess.Popen(command, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        (self.dir / f"{name}.pid").write_text(str(proc.pid))

    def pid(self, name: str) -> int | None:
        """The recorded process's pid while it runs, else None."""
        try:
            pid = int((self.dir / f"{name}.pid").read_text())
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # our own child that exited is a zombie until reaped
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError):
            return None

    def stop(self, name: str, sig: signal.Signals, wait: float = 30.0) -> None:
        """Send ``sig`` and wait (bounded) until the process is gone; its record goes."""
        pid = self.pid(name)
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # our own child: reaped, or it would linger as a zombie
            time.sleep(0.05)
        (self.dir / f"{name}.pid").unlink(missing_ok=True)
