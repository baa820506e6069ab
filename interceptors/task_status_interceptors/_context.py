"""Workflow-side step context (passed through the workflow sandbox by the plugin).

Workflow code marks which task step an activity call belongs to; the plugin's
workflow outbound interceptor copies that mark into the activity's headers.
Nothing here does I/O, so it is safe in workflow code and on replay.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

HEADER = "task-status-step"


@dataclass(frozen=True)
class StepBinding:
    """Which task step an activity reports for: a known step, or a dynamic one to register."""

    task_id: str
    step_id: str | None = None  # known step (activated per Temporal attempt)
    operation_code: str | None = None  # dynamic step: registered at run time
    client_step_key: str | None = None
    parent_execution_id: str | None = None
    display_name: str | None = None

    @property
    def dynamic(self) -> bool:
        return self.step_id is None

    def to_json(self) -> dict[str, Any]:
        # Every field is a plain string (or None): no deep copy as ``asdict`` makes, which cost a
        # visible share of the worker's CPU per activity (the header, the outbox row).
        return {k: v for k in _BINDING_FIELDS if (v := getattr(self, k)) is not None}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> StepBinding:
        return cls(**{k: raw.get(k) for k in cls.__dataclass_fields__})  # type: ignore[arg-type]


_BINDING_FIELDS = tuple(f.name for f in fields(StepBinding))

_current: ContextVar[StepBinding | None] = ContextVar("task_status_step", default=None)


def current_binding() -> StepBinding | None:
    return _current.get()


@dataclass
class RunOwnership:
    """The tasks this workflow run owns and has not ended (workflow-side memory only, no I/O).

    The plugin's workflow interceptor creates one per run; the coordinator helper records the
    tasks it creates, ends, hands over or adopts; when the run's code ends — returns, raises,
    is cancelled — the interceptor ends what is still open with that verdict. Rebuilt the same
    way on replay, since it only follows the workflow's own (deterministic) calls.
    """

    open: dict[str, None] = field(default_factory=dict)  # task ids, in the order they were owned
    last_step: dict[str, str] = field(default_factory=dict)  # task id -> the step last scheduled for it
    # task id -> step id (a dynamic step's clientStepKey) -> how the run saw that step's activity
    # end (the result Temporal recorded): sent with the task's ending, so a step whose own report
    # is late still ends as it did, with its task.
    step_outcomes: dict[str, dict[str, str]] = field(default_factory=dict)
    # task id -> when this run created it (workflow time: deterministic): the run measured the
    # whole of that task's work, and its ending says how long it took (durationMs). A task this
    # run adopted or carried on from an earlier run has no entry: only part of it ran here.
    began: dict[str, datetime] = field(default_factory=dict)

    def duration_ms(self, task_id: str, now: datetime) -> int | None:
        began = self.began.get(task_id)
        return None if began is None else max(0, int((now - began).total_seconds() * 1000))

    def own(self, task_ids: Iterable[str]) -> None:
        for task_id in task_ids:
            self.open[task_id] = None

    def release(self, task_id: str) -> None:
        self.open.pop(task_id, None)

    def step_ended(self, task_id: str, step_key: str, lifecycle: str) -> None:
        """``step_key``: a known step's id, or a dynamic step's clientStepKey (its id is the service's)."""
        self.step_outcomes.setdefault(task_id, {})[step_key] = lifecycle


_ownership: ContextVar[RunOwnership | None] = ContextVar("task_status_ownership", default=None)


def current_ownership() -> RunOwnership | None:
    """The running workflow's ownership record (None outside a workflow run the plugin wraps)."""
    return _ownership.get()


@contextmanager
def owning_run() -> Iterator[RunOwnership]:
    ownership = RunOwnership()
    token = _ownership.set(ownership)
    try:
        yield ownership
    finally:
        _reset(_ownership, token)


def _reset(var: ContextVar[Any], token: Any) -> None:
    # A workflow evicted mid-run (or a worker shut down) closes its coroutine from another
    # context, where the token does not belong: the value dies with that context anyway.
    with suppress(ValueError):
        var.reset(token)


@contextmanager
def task_step(task_id: str, step_id: str) -> Iterator[StepBinding]:
    """Activities started inside this block report as ``step_id`` of ``task_id``.

    ``with task_step(task_id, "02_parse"): await workflow.execute_activity(parse, ...)``

    The mark is read when the activity is *scheduled*: await ``execute_activity``
    inside the block, or use ``workflow.start_activity`` there for concurrent
    calls (an un-awaited ``execute_activity`` coroutine starts later, outside it).
    """
    binding = StepBinding(task_id=task_id, step_id=step_id)
    token = _current.set(binding)
    try:
        yield binding
    finally:
        _reset(_current, token)


@contextmanager
def dynamic_step(
    task_id: str,
    operation_code: str,
    *,
    client_step_key: str | None = None,
    parent_execution_id: str | None = None,
    display_name: str | None = None,
) -> Iterator[StepBinding]:
    """Activities started inside this block are registered as dynamic steps (when the task's policy allows).

    Without ``client_step_key`` the key is derived from the workflow run and activity id.
    """
    binding = StepBinding(
        task_id=task_id,
        operation_code=operation_code,
        client_step_key=client_step_key,
        parent_execution_id=parent_execution_id,
        display_name=display_name,
    )
    token = _current.set(binding)
    try:
        yield binding
    finally:
        _reset(_current, token)
