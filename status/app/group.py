"""What a group of events (or bindings) stages in its open transaction, written once at its end.

Events of one group are decided one after the other in memory, each seeing the state the
previous one left (``views``); what they change is kept as each row's state as read and as the
group leaves it, plus the insert-only rows, so the flush costs one statement per table whatever
the number of events and tasks (``status.infra.stores.tasks``, ``status.infra.stores.bulk``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from status.app.answers import CorrectionAccepted, EventAccepted
from status.app.ports import UnitOfWork
from status.app.records import (
    ActivityRecord,
    ChangeRecord,
    DedupRecord,
    EventRecord,
    HandleRecord,
    NotificationRecord,
)
from status.app.step_cache import TaskView
from status.domain.auth import StoredHandle
from status.domain.messages import Message
from status.domain.model import StepState, TaskState


@dataclass(frozen=True)
class StagedMessages:
    """A task change's messages, built when the group is written: a change the same group changes
    again covers them (see ``Group.messages``)."""

    task_id: str
    audience: tuple[tuple[str, ...], tuple[tuple[str, str], ...]]  # its USER viewers and groups
    # Nothing of it must reach a client on its own (design D8.14: not terminal, no notice, no
    # broadcast): a later full state of the same channels says everything it says.
    coverable: bool
    build: Callable[[], list[Message]]


@dataclass
class Group:
    """What a group of events has staged in its open transaction."""

    handles: dict[str, StoredHandle] = field(default_factory=dict)  # by handle hash
    revoked: dict[str, str] = field(default_factory=dict)  # execution id -> reason, revoked in this group
    issued: list[HandleRecord] = field(default_factory=list)  # handles handed out by this group
    # Executions this group bound first: no handle of theirs is stored yet, none to revoke there.
    new_executions: set[str] = field(default_factory=set)
    # (tenant, event id) -> (hash, answer): a group may hold several tenants' events
    seen: dict[tuple[str, str], tuple[str, EventAccepted | CorrectionAccepted]] = field(default_factory=dict)
    views: dict[str, TaskView] = field(default_factory=dict)  # task id -> view after this group's changes
    # Read up front, once for the whole group (see EventCommands._prepare):
    locked: dict[str, int] = field(default_factory=dict)  # task id -> version, row locked by this group
    stored: dict[tuple[str, str], tuple[str, Any]] = field(default_factory=dict)  # committed dedup entries
    loaded: dict[str, TaskView] = field(default_factory=dict)  # views read for cache misses
    probed: set[tuple[str, str]] = field(default_factory=set)  # the (tenant, eventId)s looked up
    # Locked tasks whose detail channel nobody may follow: their changes write no detail message
    # (status/app/watching.py says why none is missed).
    unwatched: set[str] = field(default_factory=set)
    # Written once, at the end: each row's state as read and as the group left it.
    task_rows: dict[str, tuple[TaskState | None, TaskState]] = field(default_factory=dict)
    step_rows: dict[tuple[str, str, int], tuple[StepState | None, StepState]] = field(default_factory=dict)
    new_steps: dict[tuple[str, str, int], StepState] = field(default_factory=dict)  # inserted with their final state
    revoked_at: datetime | None = None
    events: list[EventRecord] = field(default_factory=list)
    dedups: list[DedupRecord] = field(default_factory=list)
    changes: list[ChangeRecord] = field(default_factory=list)
    outbox: list[Message | StagedMessages] = field(default_factory=list)
    notifications: list[NotificationRecord] = field(default_factory=list)
    activities: list[ActivityRecord] = field(default_factory=list)  # the Temporal activity behind an execution
    succeeded: list[tuple[TaskState, StepState]] = field(default_factory=list)  # steps this group completed

    def write_task(self, before: TaskState | None, after: TaskState) -> None:
        first = self.task_rows.get(after.task_id)
        self.task_rows[after.task_id] = (first[0] if first else before, after)

    def write_step(self, before: StepState | None, after: StepState) -> None:
        key = (after.task_id, after.step_id, after.attempt)
        if key in self.new_steps:  # not in the table yet: it goes in as the group leaves it
            self.new_steps[key] = after
            return
        first = self.step_rows.get(key)
        self.step_rows[key] = (first[0] if first else before, after)

    def insert_step(self, step: StepState) -> None:
        self.new_steps[(step.task_id, step.step_id, step.attempt)] = step

    def revoke(self, execution_id: str | None, reason: str, now: datetime) -> None:
        """Revoked at the flush; later events of the group already see it (``reports.bind_step_event``)."""
        if execution_id is not None:
            self.revoked.setdefault(execution_id, reason)
            self.revoked_at = self.revoked_at or now

    def issue(self, handle: HandleRecord, *, new_execution: bool) -> None:
        """A handle handed out (written after its step's row); ``new_execution``: its execution is
        bound for the first time here."""
        self.issued.append(handle)
        if new_execution:
            self.new_executions.add(handle.execution_id)

    def messages(self) -> list[Message]:
        """What the group publishes, in the order it staged it. A change's messages that a later
        change of the same task in this group covers — the same viewers and groups, each message a
        full state — are never built: the relay would drop them as superseded anyway, since both
        commit together (the change stays in the event log, as an activation does whose STARTED
        travels with it)."""
        last = {m.task_id: m for m in self.outbox if isinstance(m, StagedMessages)}
        built: list[Message] = []
        for item in self.outbox:
            if not isinstance(item, StagedMessages):
                built.append(item)
            elif not (
                item.coverable and last[item.task_id] is not item and last[item.task_id].audience == item.audience
            ):
                built += item.build()
        return built

    def flush(self, uow: UnitOfWork) -> None:
        """The group's writes: one statement per table, whatever the number of events and tasks,
        sent together (``batched``): nothing is read back before the commit."""
        messages = self.messages()  # built first: a projection may read the duration history
        with uow.batched():
            uow.tasks.insert_steps(list(self.new_steps.values()))
            uow.tasks.write_steps(list(self.step_rows.values()))
            uow.tasks.write_tasks(list(self.task_rows.values()))
            uow.tasks.insert_handles(self._issued_handles())
            stored = {e: why for e, why in self.revoked.items() if e not in self.new_executions}
            if stored and self.revoked_at is not None:
                uow.tasks.revoke_many(stored, self.revoked_at)
            uow.log.insert_events(self.events)
            uow.log.insert_dedups(self.dedups)
            uow.log.insert_changes(self.changes)
            uow.log.insert_notifications(self.notifications)
            uow.log.insert_outbox(messages)
            uow.runs.record_activities(self.activities)

    def _issued_handles(self) -> list[HandleRecord]:
        """The handles handed out, each written revoked when its execution ended in this group: a
        handle names an execution only while it runs, whichever transaction ended it."""
        revoked = self.revoked
        return [
            h._replace(revoked_at=self.revoked_at, revoke_reason=revoked[h.execution_id])
            if h.execution_id in revoked
            else h
            for h in self.issued
        ]
