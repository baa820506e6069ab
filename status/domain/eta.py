"""Estimated time left, per running step and per task (none of the peers offer it).

Two witnesses, combined by how much each can know:

* **history** — durations (the producers' own ``durationMs``) of recently completed steps of the
  same operation and task type; the median is robust to the odd hour-long outlier, the
  interquartile range says how much to trust it;
* **rate** — the step's progress so far: at fraction ``p`` after ``elapsed``, the rest takes about
  ``elapsed·(1−p)/p``; it grows reliable as ``p`` grows.

An estimate is only carried when it means something (``None`` otherwise: no history and no
measurable progress, or a step already past what history has seen).  Estimates are computed when
a projection is built, for the state of that version: time passing never makes a version.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from statistics import median, quantiles
from typing import TYPE_CHECKING

from status.domain.lifecycle import Lifecycle
from status.domain.model import StepState

if TYPE_CHECKING:
    from status.domain import shapes

MIN_SAMPLES = 3
MIN_RATE_FRACTION = 0.02
MIN_RATE_ELAPSED_MS = 1000


@dataclass(frozen=True)
class DurationStats:
    count: int
    median_ms: float
    p25_ms: float
    p75_ms: float

    @classmethod
    def of(cls, durations: Sequence[float]) -> DurationStats | None:
        """Robust statistics of past durations; None below ``MIN_SAMPLES``."""
        values = sorted(d for d in durations if d is not None and d >= 0)
        if len(values) < MIN_SAMPLES:
            return None
        q1, _, q3 = quantiles(values, n=4, method="inclusive")
        return cls(len(values), float(median(values)), float(q1), float(q3))

    @property
    def confidence(self) -> float:
        """More samples and a tighter spread: more trust (0–1)."""
        spread = (self.p75_ms - self.p25_ms) / self.median_ms if self.median_ms > 0 else 1.0
        return (self.count / (self.count + 5)) * (1 - 0.5 * min(1.0, spread))


@dataclass(frozen=True)
class Estimate:
    remaining_ms: int
    confidence: float

    def to_json(self) -> shapes.Estimate:
        return {"etaMs": self.remaining_ms, "etaConfidence": round(self.confidence, 2)}


def _fraction(step: StepState) -> float | None:
    percent = step.progress.percent if step.progress else None
    return None if percent is None else percent / 100


def pending_estimate(stats: DurationStats | None) -> Estimate | None:
    """A step that has not started: its typical duration, with less confidence than a running one."""
    return Estimate(round(stats.median_ms), 0.8 * stats.confidence) if stats else None


def step_estimate(step: StepState, stats: DurationStats | None, now: datetime) -> Estimate | None:
    """Time left for one step attempt (PENDING: its typical duration; RUNNING: see the module doc)."""
    if step.lifecycle is Lifecycle.PENDING:
        return pending_estimate(stats)
    if step.lifecycle is not Lifecycle.RUNNING:
        return None
    elapsed = max(0.0, (now - step.started_at).total_seconds() * 1000) if step.started_at else 0.0
    history = None
    if stats is not None:
        if elapsed <= stats.median_ms:
            history = Estimate(round(stats.median_ms - elapsed), stats.confidence)
        elif elapsed <= stats.p75_ms:  # slower than usual, still within what history has seen
            history = Estimate(round(stats.p75_ms - elapsed), 0.5 * stats.confidence)
    p = _fraction(step)
    rate = None
    if p is not None and MIN_RATE_FRACTION <= p < 1 and elapsed >= MIN_RATE_ELAPSED_MS:
        rate = Estimate(round(elapsed * (1 - p) / p), 0.9 * p)
    if history and rate:
        assert p is not None
        return Estimate(
            round(p * rate.remaining_ms + (1 - p) * history.remaining_ms),
            1 - (1 - rate.confidence) * (1 - history.confidence),
        )
    return rate or history


def task_estimate(
    lifecycle: Lifecycle, running: Sequence[Estimate | None], pending: Sequence[tuple[int, Estimate | None]]
) -> Estimate | None:
    """Time left for a task: its running steps (in parallel: the longest) then its pending ones, given
    as (how many, each one's estimate) per operation, in turn.  Unknown as soon as one unfinished step
    is; absent for a finished task or one with nothing left."""
    if lifecycle.terminal:
        return None
    waiting = [(count, e) for count, e in pending if count]
    if any(e is None for e in running) or any(e is None for _, e in waiting):
        return None
    known_running = [e for e in running if e is not None]
    known_waiting = [(count, e) for count, e in waiting if e is not None]
    if not known_running and not known_waiting:
        return None
    remaining = max((e.remaining_ms for e in known_running), default=0) + sum(
        count * e.remaining_ms for count, e in known_waiting
    )
    confidence = min([e.confidence for e in known_running] + [e.confidence for _, e in known_waiting])
    return Estimate(remaining, confidence)
