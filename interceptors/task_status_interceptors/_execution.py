"""Reports of one activity execution: progress throttling (design D8.8) and terminal events.

An ``ExecutionReporter`` is bound to one activity attempt (no process-global
"current task", design D3.2); it hands events to a ``ReportSink`` — the worker's
``Reporter``, which owns the durable outbox and the sender. This module knows the
sink only by that interface, so the dependency points one way (reporter → here).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from task_status_interceptors._context import StepBinding
from task_status_interceptors._deadlines import Beats


@dataclass(frozen=True)
class ProgressPolicy:
    """design D8.8: at most every ``min_interval`` s, at least every ``max_interval`` s while changing,
    at once on a phase change or a jump of ``min_delta`` or more."""

    min_interval: float = 1.0
    max_interval: float = 5.0
    min_delta: float = 0.05


class ReportSink(Protocol):
    def enqueue(self, key: str, body: dict[str, Any], *, finished: bool = False) -> None: ...

    def beat(self, key: str, seq: int) -> None: ...

    def forget(self, key: str) -> None: ...

    def let_go(self, key: str, seq: int) -> None: ...


@dataclass
class _Progress:
    last_sent_at: float = 0.0
    last_fraction: float | None = None
    last_phase: str | None = None
    pending: dict[str, Any] | None = None


class ExecutionReporter:
    """Reports for one activity execution (bound: no process-global "current task", design D3.2)."""

    def __init__(self, sink: ReportSink, key: str, binding: StepBinding, policy: ProgressPolicy) -> None:
        self.sink = sink
        self.policy = policy
        self.key = key
        self.binding = binding
        self.started_at = time.monotonic()
        self.heartbeat_seq = 0
        self.beats = Beats(self.started_at)
        self._progress = _Progress()
        self._lock = threading.Lock()
        # Set once the attempt has ended (or let go): a heartbeat still on its way from the
        # activity's thread to the loop then beats no more, so it cannot bring back an execution
        # whose heartbeats were forgotten.
        self._ended = False

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.started_at) * 1000)

    def heartbeat(self) -> None:
        """Never blocks: only bumps the in-memory sequence the heartbeat loop sends."""
        with self._lock:
            if self._ended:
                return
            self.heartbeat_seq += 1
            seq = self.heartbeat_seq
            self.beats = Beats(self.started_at, self.beats.count + 1, time.monotonic())
        self.sink.beat(self.key, seq)

    def _end(self) -> None:
        """No heartbeat of this attempt after this one; the pending progress goes first."""
        with self._lock:
            self._ended = True
        self._flush_progress()

    def progress(
        self,
        current: float,
        total: float | None = None,
        unit: str | None = None,
        *,
        phase_code: str | None = None,
        phase_label: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        """Throttled STEP_PROGRESS (design D8.8): at most every 1 s, at least every 5 s while changing,
        immediately on a phase change or a jump of 5 % or more."""
        body: dict[str, Any] = {"eventType": "STEP_PROGRESS", "progress": {"current": current}}
        if total is not None:
            body["progress"]["total"] = total
        if unit is not None:
            body["progress"]["unit"] = unit
        if phase_code is not None:
            body["phaseCode"] = phase_code
        if phase_label is not None:
            body["phaseLabel"] = phase_label
        if data is not None:
            body["data"] = data
        fraction = current / total if total else None
        now = time.monotonic()
        with self._lock:
            state = self._progress
            elapsed = now - state.last_sent_at
            phase_changed = phase_code is not None and phase_code != state.last_phase
            jumped = (
                fraction is not None
                and state.last_fraction is not None
                and abs(fraction - state.last_fraction) >= self.policy.min_delta
            )
            send = (
                state.last_sent_at == 0.0
                or phase_changed
                or (elapsed >= self.policy.min_interval and (jumped or fraction is None))
                or elapsed >= self.policy.max_interval
            )
            if not send:
                state.pending = body
                return
            state.pending = None
            state.last_sent_at, state.last_fraction = now, fraction
            state.last_phase = phase_code or state.last_phase
        self.sink.enqueue(self.key, body)

    def _flush_progress(self) -> None:
        with self._lock:
            pending, self._progress.pending = self._progress.pending, None
        if pending is not None:
            self.sink.enqueue(self.key, pending)

    def completed(self, data: dict[str, Any] | None = None) -> None:
        self._end()  # the last progress is never lost before the terminal event
        body: dict[str, Any] = {"eventType": "STEP_COMPLETED", "durationMs": self.elapsed_ms()}
        if data is not None:
            body["data"] = data
        self.sink.enqueue(self.key, body, finished=True)

    def failed(
        self, category: str, code: str, message: str, retryable: bool | None, diagnostics_ref: str | None
    ) -> None:
        self._end()
        error = {"category": category, "code": code, "userMessage": message, "retryable": retryable}
        if diagnostics_ref:
            error["diagnosticsRef"] = diagnostics_ref
        self.sink.enqueue(
            self.key, {"eventType": "STEP_FAILED", "durationMs": self.elapsed_ms(), "error": error}, finished=True
        )

    def cancelled(self) -> None:
        self._end()
        self.sink.enqueue(self.key, {"eventType": "STEP_CANCELLED", "durationMs": self.elapsed_ms()}, finished=True)

    def timed_out(self) -> None:
        """Temporal timed the attempt out (its cancellation says so): TIMED_OUT, never FAILED."""
        self._end()
        self.sink.enqueue(self.key, {"eventType": "STEP_TIMED_OUT", "durationMs": self.elapsed_ms()}, finished=True)

    def abandoned(self) -> None:
        """The worker stops under the attempt (Temporal will run it again): no ending is reported,
        only what progress was pending; the next attempt supersedes this one. Nothing of it beats
        again here either."""
        self._end()
        self.sink.forget(self.key)

    def completes_elsewhere(self) -> None:
        """The activity went asynchronous (``activity.raise_complete_async()``): someone completes it
        later through its task token. Nothing ends here; the last heartbeat says so, and the service
        watches the activity in Temporal from then on instead of waiting for this worker's beats."""
        self._end()
        with self._lock:
            self.heartbeat_seq += 1
            seq = self.heartbeat_seq
        self.sink.let_go(self.key, seq)
