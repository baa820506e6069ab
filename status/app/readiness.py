"""The replica's readiness, shared by every health check and the shutdown path (rules: ``status.domain.readiness``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from status import logs
from status.domain.readiness import Readiness, ReadinessPolicy, after_probe, draining, probe_due

log = logs.get("status.readiness")


class ReadinessMonitor:
    """``check()`` probes (``probe`` raises when the database cannot serve) at most once per interval;
    concurrent health checks wait for that one probe and share its answer."""

    def __init__(
        self, policy: ReadinessPolicy, probe: Callable[[], None], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.policy = policy
        self._probe = probe
        self._clock = clock
        self._lock = threading.Lock()
        self._state = Readiness()

    @property
    def state(self) -> Readiness:
        return self._state

    def check(self) -> Readiness:
        with self._lock:
            now = self._clock()
            if not probe_due(self._state, self.policy, now):
                return self._state
            try:
                self._probe()
                ok = True
            except Exception as exc:  # any failure to serve counts; the rule decides what it means
                ok = False
                log.warning("readiness probe failed", code=type(exc).__name__)
            before = self._state
            self._state = after_probe(before, self.policy, ok, self._clock())
            if before.ready != self._state.ready:
                log.warning("readiness changed", status=self._state.reason)
            return self._state

    def drain(self) -> None:
        """Unready from now on (SIGTERM): new requests go to other replicas while these finish."""
        with self._lock:
            self._state = draining(self._state)
        log.warning("draining: readiness reports unavailable from now on")
