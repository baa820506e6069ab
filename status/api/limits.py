"""Per-caller request limits of the HTTP and gRPC adapters."""

from __future__ import annotations

import threading
import time

from status.domain.errors import ErrorCode, LimitExceeded


class RateLimiter:
    """A token bucket per caller (a producer on the internal API, a user on the public one), per API process.

    Limits protect the shared database from one misbehaving caller; they are
    per replica, so the cluster-wide rate is the per-process rate times replicas.
    """

    MAX_CALLERS = 100_000  # memory bound: past it the buckets start over (everyone full again)

    def __init__(self, per_second: float, burst: int, who: str = "producer") -> None:
        self.per_second = per_second
        self.burst = burst
        self.who = who
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def check(self, key: str) -> None:
        if self.per_second <= 0:
            return
        now = time.monotonic()
        with self._lock:
            if len(self._buckets) >= self.MAX_CALLERS and key not in self._buckets:
                self._buckets.clear()
            tokens, last = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.per_second)
            if tokens < 1.0:
                self._buckets[key] = (tokens, now)
                raise LimitExceeded(
                    f"too many requests from this {self.who}; slow down and retry", ErrorCode.RATE_LIMITED
                )
            self._buckets[key] = (tokens - 1.0, now)
