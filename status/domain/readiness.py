"""Whether an API replica should take traffic (design D13): pure decisions, time passed in.

A readiness probe that answers "no" on one failed database round trip takes every replica out of
the load balancer at once on a blip the next request would have survived.  So a replica turns
unready only after ``fail_after`` consecutive failed probes, and ready again only after
``recover_after`` consecutive successes (hysteresis).  Probes run at most once per
``interval_seconds`` whatever the number of health checks asking (they share the last answer).
A replica that is draining (it received SIGTERM) is unready from then on, whatever the probes say:
the load balancer stops sending it new requests while the ones in flight finish.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ReadinessPolicy:
    fail_after: int = 3
    recover_after: int = 2
    interval_seconds: float = 2.0


@dataclass(frozen=True)
class Readiness:
    ready: bool = False  # a replica starts unready: its first successful probe makes it ready
    failures: int = 0  # consecutive failed probes
    successes: int = 0  # consecutive successful probes
    probed_at: float | None = None  # monotonic seconds of the last probe
    draining: bool = False
    started: bool = False  # a first probe has succeeded since start

    @property
    def reason(self) -> str:
        if self.draining:
            return "draining"
        if not self.ready and self.failures:
            return f"database unreachable ({self.failures} consecutive failed probes)"
        if not self.started:
            return "starting"
        return "ok" if self.ready else "recovering"


def probe_due(state: Readiness, policy: ReadinessPolicy, now: float) -> bool:
    """Whether the last answer is too old to share (the first call always probes)."""
    if state.draining:
        return False
    return state.probed_at is None or now - state.probed_at >= policy.interval_seconds


def after_probe(state: Readiness, policy: ReadinessPolicy, ok: bool, now: float) -> Readiness:
    """The state after one probe: ready on the first success after start; then unready only after
    ``fail_after`` failures in a row, ready again only after ``recover_after`` successes in a row."""
    if state.draining:
        return state
    if ok:
        successes = state.successes + 1
        ready = state.ready or not state.started or successes >= policy.recover_after
        return replace(state, ready=ready, failures=0, successes=successes, probed_at=now, started=True)
    failures = state.failures + 1
    ready = state.ready and failures < policy.fail_after
    return replace(state, ready=ready, failures=failures, successes=0, probed_at=now)


def draining(state: Readiness) -> Readiness:
    return replace(state, ready=False, draining=True)
