"""How ``task-observer serve`` runs uvicorn: draining on SIGTERM, with one process or several.

A replica that gets SIGTERM first reports unready (``/readyz`` 503 ``draining``) for
``DRAIN_SECONDS`` while it keeps serving — the load balancer moves new requests to other replicas —
then stops accepting and finishes what is in flight (design D13). With ``--workers N`` uvicorn's
supervisor passes SIGTERM to each worker process; every worker drains the same way, so the port
stays served until the drain window has passed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from socket import socket
from typing import Any

import uvicorn
from uvicorn.supervisors import multiprocess

from status import heap


class DrainingServer(uvicorn.Server):
    """SIGTERM/SIGINT: ``drain()``, keep serving for ``drain_seconds``, then uvicorn's graceful stop;
    a second signal stops now."""

    def __init__(self, config: uvicorn.Config, drain: Callable[[], None], drain_seconds: float) -> None:
        super().__init__(config)
        self._drain = drain
        self._drain_seconds = drain_seconds
        self._draining = False

    async def startup(self, sockets: list[socket] | None = None) -> None:
        await super().startup(sockets)
        heap.settle()  # built and listening: what the server holds from here on lives as long as it

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self._draining or self._drain_seconds <= 0:
            if not self._draining:
                self._drain()
            super().handle_exit(sig, frame)
            return
        self._draining = True
        self._drain()
        timer = threading.Timer(self._drain_seconds, super().handle_exit, args=(sig, frame))
        timer.daemon = True
        timer.start()


class _WorkerDrain:
    """A worker process's drain: its application's readiness, once the application exists.

    The worker's server takes signals before it builds the application (``app_from_env`` runs in
    its startup), so a SIGTERM can come first; the application then starts draining, instead of
    reporting ready for the whole drain window of a replica that is going away."""

    def __init__(self) -> None:
        self.drain: Callable[[], None] | None = None
        self.requested = False

    def register(self, drain: Callable[[], None]) -> None:
        self.drain = drain
        if self.requested:
            drain()

    def __call__(self) -> None:
        self.requested = True
        if self.drain is not None:
            self.drain()


_worker_drain = _WorkerDrain()  # this process's (set by ``status.api.asgi.app_from_env`` in a worker)


def on_drain(drain: Callable[[], None]) -> None:
    """What a worker's server calls on SIGTERM: its application's readiness goes to draining."""
    _worker_drain.register(drain)


class DrainingWorker(multiprocess.Process):
    """uvicorn's worker process, serving with a ``DrainingServer`` (built in the worker)."""

    def __init__(self, config: uvicorn.Config, sockets: list[socket]) -> None:
        super().__init__(config, sockets)
        self.drain_seconds = DrainingSupervisor.drain_seconds

    @property
    def server(self) -> uvicorn.Server:
        if self._server is None:
            self._server = DrainingServer(self.config, _worker_drain, self.drain_seconds)
        return self._server


class DrainingSupervisor(multiprocess.Multiprocess):
    """uvicorn's supervisor whose workers drain (every worker it starts, restarts or replaces)."""

    drain_seconds = 5.0

    def __init__(self, config: uvicorn.Config, sockets: list[socket], drain_seconds: float) -> None:
        super().__init__(config, sockets)
        DrainingSupervisor.drain_seconds = drain_seconds

    def run(self) -> None:
        # The supervisor builds workers through its module's ``Process``; swap in ours for its run.
        original = multiprocess.Process
        multiprocess.Process = DrainingWorker  # type: ignore[misc]
        try:
            super().run()
        finally:
            multiprocess.Process = original  # type: ignore[misc]
