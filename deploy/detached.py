"""Detached processes recorded in a directory: what deploy/galera/cluster.py and
deploy/redis/sentinel.py start, so one command starts a set and a later one stops it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from pathlib import Path


class Detached:
    """Processes started in a session of their own, each with ``NAME.pid`` and ``NAME.log`` in ``dir``."""

    def __init__(self, dir: Path) -> None:
        self.dir = dir

    def spawn(self, name: str, command: list[str]) -> None:
        # posix_spawn, not Popen: the starter keeps no handle on the process or its log (a Popen
        # object collected while its process runs is a warning), so a test may start servers too.
        executable = shutil.which(command[0]) or command[0]
        with open(self.dir / f"{name}.log", "ab") as log, open(os.devnull, "rb") as nothing:
            pid = os.posix_spawn(
                executable,
                command,
                os.environ,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, nothing.fileno(), 0),
                    (os.POSIX_SPAWN_DUP2, log.fileno(), 1),
                    (os.POSIX_SPAWN_DUP2, log.fileno(), 2),
                ],
                setsid=True,
            )
        (self.dir / f"{name}.pid").write_text(str(pid))

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
