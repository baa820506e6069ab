"""Events (design D8.1): one pass per event, many events per transaction.

Every event — REST single, REST batch, the reconciler's health changes —
goes through ``report_group``: one transaction for the group, tasks locked in
id order, each event decided by the domain and staged; the event log, dedup
results, projector feed and outbox rows of the whole group are then written
with one multi-row INSERT each and committed together (design P11, P17).

Per event the database sees: the task row locked while reading only its
version and the event's dedup entry, then UPDATEs of the step's and task's
changed columns — never every step of the task: the state at the locked
version comes from ``StepCache`` (read once on a miss).  A rejected event writes nothing, so its neighbours in
the group are unaffected; a database failure of the group re-runs each event
in a transaction of its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from status import logs
from status.app import commands as c
from status.app import outbox
from status.app.answers import EventAccepted, EventAnswer, event_reply, refused, stored_event_answer
from status.app.change import Change, Entry, write_change
from status.app.context import AppContext, EventCaller, content_hash, operation
from status.app.group import Group
from status.app.handle_cache import KnownHandle
from status.app.ports import UnitOfWork
from status.app.shard_ports import RouteChanged, ShardGroup
from status.app.shards import MOVING, on_shards
from status.app.step_cache import TaskView, view_of
from status.app.views import locked_view
from status.app.watching import unwatched
from status.domain import ids
from status.domain.admission import Limits, admit_step_event, check_envelope, task_event_speaker
from status.domain.auth import ExecutionClaims, ServicePrincipal
from status.domain.errors import (
    DomainError,
    ErrorCode,
    NotFound,
    Unavailable,
)
from status.domain.lifecycle import EventType, Health, Lifecycle
from status.domain.reports import (
    Route,
    admit_task_report,
    bind_step_event,
    check_task_workflow,
    repeat_of,
    route_of,
    run_health_target,
    task_report_target,
)
from status.domain.rules import (
    StepEvent,
    TaskEvent,
    apply_run_health,
    apply_step_event,
    apply_task_event,
    safe_user_message,
)

Outcomes = list[EventAccepted | BaseException]


log = logs.get("status.events")
ITEM_FAILED = "this event could not be applied; send it again with the same eventId"


class EventCommands:
    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    # ------------------------------------------------------------ entry points
    def report_event(self, caller: EventCaller, cmd: c.ReportEvent) -> EventAccepted:
        """One event through design D8.1; raises its rejection."""
        (outcome,) = self.report_group([(caller, cmd)])
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def report_events(self, caller: EventCaller, cmds: Sequence[c.ReportEvent]) -> list[EventAnswer]:
        """Many events, one result each: what each would get alone (design P11)."""
        outcomes = self.report_group([(caller, cmd) for cmd in cmds])
        results: list[EventAnswer] = []
        for cmd, outcome in zip(cmds, outcomes, strict=True):
            if isinstance(outcome, DomainError):
                results.append(refused(cmd.event_id, outcome))
            elif isinstance(outcome, BaseException):
                # One item's own failure (it already ran alone, see report_group) is that
                # item's result: a batch is never all-or-nothing for unrelated events.
                log.error("an event of a batch failed", eventId=cmd.event_id, code=type(outcome).__name__)
                results.append(refused(cmd.event_id, Unavailable(ITEM_FAILED)))
            else:
                results.append(outcome)
        return results

    def report_group(
        self, items: Sequence[tuple[EventCaller, c.ReportEvent]], writing: Callable[[], None] = lambda: None
    ) -> Outcomes:
        """Events of any callers in one transaction per shard; each item gets its result or its error.

        Items are applied grouped by task (their order within a task kept), so
        task locks are taken in one fixed order and concurrent groups never
        deadlock-loop.  If a transaction fails for a reason that is not one
        event's rejection, each of its events runs again in a transaction of
        its own, so one poison item can't take its neighbours down.

        ``writing`` is called once the group is decided and its writes go to the database (per
        shard: it may be called more than once): a group committer starts the next group then.
        """
        self._validate_ahead(items)
        buckets = [_bucket_of(caller, cmd) for caller, cmd in items]
        return on_shards(
            self.ctx.shards,
            buckets,
            lambda shard: self._report_on(shard, [items[i] for i in shard.indexes], writing),
            _moving,
        )

    def _report_on(
        self, shard: ShardGroup, items: Sequence[tuple[EventCaller, c.ReportEvent]], writing: Callable[[], None]
    ) -> Outcomes:
        def work(uow: UnitOfWork) -> tuple[Outcomes, Group]:
            group = Group()
            hashes = sorted({ids.handle_hash(cmd.execution_handle) for _, cmd in items if cmd.execution_handle})
            owners = self._owners(hashes)
            if owners is None:  # a handle not seen yet: read first, to know which tasks to lock
                group.handles = dict(uow.tasks.handles(hashes))
                owners, hashes = {h: row.task_id for h, row in group.handles.items()}, []
            keys = [self._lock_key(owners, *item) for item in items]
            order = sorted(range(len(items)), key=lambda i: (keys[i], i))
            self._prepare(uow, group, items, keys, hashes)
            outcomes: Outcomes = [RuntimeError("not applied")] * len(items)
            for i in order:
                try:
                    outcomes[i] = self._apply(uow, group, *items[i])
                except DomainError as err:
                    outcomes[i] = err
            group.flush(uow)
            writing()
            uow.commit()
            return outcomes, group

        if len(items) == 1:
            outcomes, group = self.ctx.shards.run(shard, work)
            self.publish(group)
            return outcomes
        try:
            outcomes, group = self.ctx.shards.run(shard, work)
        except RouteChanged:
            raise
        except Exception:
            return [self._alone(item) for item in items]
        self.publish(group)
        return outcomes

    def _validate_ahead(self, items: Sequence[tuple[EventCaller, c.ReportEvent]]) -> None:
        """Validate event data against its schema before any row lock is taken.

        Validation costs what the tenant's schema and the producer's data make it cost;
        done under the task's row lock it would hold every other report of that task.
        The validator remembers the answer, so the decision under the lock only looks it
        up (and still decides: which schemas an operation allows is checked there).
        """
        with_data = [(caller, cmd) for caller, cmd in items if cmd.data is not None]
        if not with_data:
            return
        with self.ctx.db.reading() as stores:
            for caller, cmd in with_data:
                assert cmd.data is not None
                defs = self.ctx.definitions_for(stores, caller.tenant_id, caller.authority_scope)
                documents = {
                    json.dumps(d, sort_keys=True): d
                    for op in defs.operations
                    if (d := op.schema_documents.get(cmd.data.schema)) is not None
                }
                for document in documents.values():
                    self.ctx.validator.errors(cmd.data.schema, document, cmd.data.value)

    def apply_locked(self, uow: UnitOfWork, caller: EventCaller, cmd: c.ReportEvent) -> tuple[EventAccepted, Group]:
        """Apply one event inside the caller's transaction (the reconciler's re-check under lock) and commit."""
        group = Group()
        result = self._apply(uow, group, caller, cmd)
        group.flush(uow)
        uow.commit()
        return result, group

    def apply_in(
        self, uow: UnitOfWork, group: Group, caller: EventCaller, cmd: c.ReportEvent, view: TaskView
    ) -> EventAccepted | DomainError:
        """Apply one event inside the caller's open transaction and group, on the task view it holds
        locked (an activation's, with its STEP_STARTED); written by the caller's flush and commit,
        published after it."""
        group.locked[view.task.task_id] = view.version
        group.views[view.task.task_id] = view
        key = (caller.tenant_id, cmd.event_id)
        if key not in group.probed:  # a group of bindings probed its STARTED events up front
            group.probed.add(key)
            group.stored.update(uow.tasks.dedup_entries({key}))
        try:
            return self._apply(uow, group, caller, cmd)
        except DomainError as err:
            return err

    def _alone(self, item: tuple[EventCaller, c.ReportEvent]) -> EventAccepted | BaseException:
        try:
            return self.report_group([item])[0]
        except Exception as exc:  # one item's own failure stays that item's
            return exc

    def publish(self, group: Group) -> None:
        """After COMMIT only: the group's task views become what the cache serves, its successes
        part of their operations' duration history, the handles it read what the handle cache holds."""
        for task_id, view in group.views.items():
            self.ctx.steps.put(task_id, view)
        for task, step in group.succeeded:
            self.ctx.durations.completed(task, step)
        known = {
            handle_hash: KnownHandle.of(row, held.task.tenant_id, held.task.authority_scope)
            for handle_hash, row in group.handles.items()
            if (held := group.views.get(row.task_id)) is not None
        }
        if known:
            self.ctx.handles.put_many(known)

    def _owners(self, hashes: list[str]) -> dict[str, str] | None:
        """The task each of these handles names, when the handle cache holds every one (a handle
        never changes its task: status/app/handle_cache.py); the group then reads the handles
        with its locks, in one round trip. None when any is not held."""
        if not hashes:
            return {}
        known = self.ctx.handles.get_all(hashes)
        return None if known is None else {h: handle.task_id for h, handle in zip(hashes, known, strict=True)}

    # ------------------------------------------------------------ one event
    @staticmethod
    def _lock_key(owners: dict[str, str], caller: EventCaller, cmd: c.ReportEvent) -> str:
        """The task an event will lock (for the fixed lock order)."""
        if isinstance(caller, ExecutionClaims):
            return caller.task_id
        if cmd.execution_handle:
            return owners.get(ids.handle_hash(cmd.execution_handle), "")
        return cmd.task_id or ""

    def _apply(self, uow: UnitOfWork, group: Group, caller: EventCaller, cmd: c.ReportEvent) -> EventAccepted:
        event_type, route = route_of(cmd, max_data_bytes=self.ctx.max_data_bytes)
        received_at = self.ctx.now()
        if route is Route.RUN_HEALTH:
            return self._run_health_event(uow, group, caller, cmd, received_at)
        if route is Route.TASK:
            return self._task_event(uow, group, caller, cmd, event_type, received_at)
        bound = bind_step_event(
            cmd, event_type, caller, handles=group.handles, revoked_now=group.revoked, now=received_at
        )
        view, stored = self._lock(uow, group, bound.task_id, cmd.event_id, (bound.tenant_id, bound.authority_scope))
        task = view.task
        step = view.steps.get(bound.step_id, bound.step_attempt)
        if step is None:
            raise NotFound(f"step {bound.step_id} attempt {bound.step_attempt} does not exist", ErrorCode.UNKNOWN_STEP)
        # Before dedup: it names facts that never change.
        check_envelope(
            task, step, workflow_id=cmd.workflow_id, operation_code=cmd.operation_code, task_type=cmd.task_type
        )
        content = cmd.content()
        fingerprint = content_hash(
            {
                "task": task.task_id,
                "step": step.step_id,
                "attempt": step.attempt,
                "execution": bound.binding.execution_id,
                **content,
            }
        )
        duplicate = self._dedup(group, (task.tenant_id, cmd.event_id), fingerprint, stored)
        if duplicate is not None:
            return duplicate
        admitted = admit_step_event(
            task,
            step,
            bound.binding,
            StepEvent(
                event_id=cmd.event_id,
                event_type=event_type,
                source_seq=cmd.source_seq,
                producer_id=bound.binding.producer_id,
                occurred_at=cmd.occurred_at,
                business_status=cmd.business_status,
                phase_code=cmd.phase_code,
                phase_label=cmd.phase_label,
                progress=cmd.progress,
                duration_ms=cmd.duration_ms,
                data=cmd.data,
                error=cmd.error,
                health=Health(cmd.health) if cmd.health in {h.value for h in Health} else None,
                reason=cmd.reason,
            ),
            task_attempt=cmd.task_attempt,
            now=received_at,
            limits=self._limits(),
        )
        defs = self.ctx.definitions_for(uow, task.tenant_id, task.authority_scope)
        op = operation(defs, step.operation_code, task.task_type, step.operation_definition_version)
        outcome = apply_step_event(
            task,
            step,
            admitted,
            operation=op,
            statuses=defs.status_set(task.task_type, task.status_definition_version),
            validator=self.ctx.validator,
            other_steps_stale=view.steps.stale_besides(step.step_id, step.attempt),
            now=received_at,
        )
        change = Change(
            before=task,
            after=outcome.task,
            view=view,
            entry=_entry(cmd, content, event_type, bound.binding.producer_id, admitted.source_seq, received_at),
            fingerprint=fingerprint,
            reply=event_reply(cmd.event_id),
            step=outcome.step,
            before_step=step,
            revoke="STEP_TERMINAL",
            notice=outcome.notice,
            must_deliver=outcome.must_deliver,
            broadcast=outcome.task.lifecycle is not task.lifecycle or outcome.must_deliver,
        )
        return write_change(self.ctx, uow, group, change)

    def _task_event(
        self,
        uow: UnitOfWork,
        group: Group,
        caller: EventCaller,
        cmd: c.ReportEvent,
        event_type: EventType,
        received_at: datetime,
    ) -> EventAccepted:
        # design D8.4: only the Coordinator submits task-level events, with its service token; Temporal's
        # verdict (RECONCILER: the run that owned the task has closed) ends tasks too, and is the
        # only one that sees a run time out.
        verdict = task_event_speaker(caller, event_type, producer_id=cmd.producer_id)
        assert isinstance(caller, ServicePrincipal)
        task_id, task_attempt = task_report_target(cmd)
        view, stored = self._lock(uow, group, task_id, cmd.event_id, (caller.tenant_id, caller.authority_scope))
        task = view.task
        check_task_workflow(cmd, task_id, task.workflow_id)
        content = cmd.content()
        fingerprint = content_hash({"task": task.task_id, **content})
        duplicate = self._dedup(group, (task.tenant_id, cmd.event_id), fingerprint, stored)
        if duplicate is not None:
            return duplicate
        admit_task_report(cmd, verdict=verdict, now=received_at, limits=self._limits())
        defs = self.ctx.definitions_for(uow, task.tenant_id, task.authority_scope)
        # The run's own last word (the plugin, as the run closed): how it saw each step end.
        outcomes = None if cmd.step_outcomes is None else {k: Lifecycle(v) for k, v in cmd.step_outcomes}
        outcome = apply_task_event(
            task,
            TaskEvent(
                event_id=cmd.event_id,
                event_type=event_type,
                task_attempt=task_attempt,
                source_seq=cmd.source_seq,
                producer_id=caller.producer_id,
                occurred_at=cmd.occurred_at,
                business_status=cmd.business_status,
                duration_ms=cmd.duration_ms,
                error=cmd.error,
                failed_step_id=cmd.failed_step_id,
                reason=safe_user_message(cmd.reason)[:512] if verdict and cmd.reason else None,
            ),
            statuses=defs.status_set(task.task_type, task.status_definition_version),
            now=received_at,
            failed_operation_code=view.steps.operation_of(cmd.failed_step_id),
            # The task has ended: nothing of it runs any more (a timed-out task's steps timed out with it).
            open_steps=view.steps.open_latest(),
            open_steps_become=Lifecycle.TIMED_OUT if event_type is EventType.TASK_TIMED_OUT else Lifecycle.CANCELLED,
            step_outcomes=outcomes,
        )
        change = Change(
            before=task,
            after=outcome.task,
            view=view,
            entry=_entry(cmd, content, event_type, caller.producer_id, cmd.source_seq, received_at),
            fingerprint=fingerprint,
            reply=event_reply(cmd.event_id),
            ended_steps=outcome.ended_steps,
            notice=outcome.notice,
            must_deliver=outcome.must_deliver,
            broadcast=True,
        )
        return write_change(self.ctx, uow, group, change)

    def _run_health_event(
        self, uow: UnitOfWork, group: Group, caller: EventCaller, cmd: c.ReportEvent, received_at: datetime
    ) -> EventAccepted:
        """Temporal's report that the task's run is stuck (health STALE) or moves again (HEALTHY):
        the observer's only (RECONCILER), never a producer's; the lifecycle is left as confirmed."""
        task_id, stuck = run_health_target(cmd, caller)
        view, stored = self._lock(uow, group, task_id, cmd.event_id, (caller.tenant_id, caller.authority_scope))
        task = view.task
        content = cmd.content()
        fingerprint = content_hash({"task": task.task_id, **content})
        duplicate = self._dedup(group, (task.tenant_id, cmd.event_id), fingerprint, stored)
        if duplicate is not None:
            return duplicate
        outcome = apply_run_health(
            task,
            stuck=stuck,
            steps_stale=view.steps.current_stale(),
            steps_degraded=view.steps.current_degraded(),
            now=received_at,
        )
        entry = _entry(
            cmd, content, EventType.TASK_HEALTH_CHANGED, caller.producer_id, task.coordinator_source_seq, received_at
        )
        change = Change(
            before=task,
            after=outcome.task,
            view=view,
            entry=entry,
            fingerprint=fingerprint,
            reply=event_reply(cmd.event_id),
            notice=outcome.notice,
            must_deliver=outcome.must_deliver,
            broadcast=outcome.must_deliver,
        )
        return write_change(self.ctx, uow, group, change)

    # ------------------------------------------------------------ helpers
    def _prepare(
        self,
        uow: UnitOfWork,
        group: Group,
        items: Sequence[tuple[EventCaller, c.ReportEvent]],
        keys: Sequence[str],
        hashes: Sequence[str],
    ) -> None:
        """Everything a group reads, in a constant number of round trips: lock all its tasks (id
        order), probe all its eventIds' dedup entries, read the ``hashes`` not read yet, and read
        the tasks the cache does not hold at their locked version (rows, steps, viewers)."""
        group.probed = {(caller.tenant_id, cmd.event_id) for caller, cmd in items}
        if len(items) == 1 and keys[0]:
            # One event (the usual request without group commit): lock and dedup probe in one statement.
            (tenant, event_id), task_id = next(iter(group.probed)), keys[0]
            row = uow.tasks.lock_version(task_id, event_id)
            if row is not None:
                group.locked[task_id] = row[0]
                if row[1] is not None:
                    group.stored[(tenant, event_id)] = (row[1], row[2])
                group.unwatched = unwatched({task_id: row[3]}, self.ctx.now())
            if hashes:
                group.handles.update(uow.tasks.handles(hashes))
        else:
            self.prepare(uow, group, [key for key in keys if key], group.probed, hashes)
            return
        self._load_misses(uow, group)

    def prepare(
        self,
        uow: UnitOfWork,
        group: Group,
        task_ids: Sequence[str],
        probe: set[tuple[str, str]],
        hashes: Sequence[str] = (),
    ) -> None:
        """Lock a group's tasks (id order), probe its (tenant, eventId)s and read ``hashes``' handles
        (one round trip), then read the tasks the cache does not hold at their locked version (one
        more, when there are any)."""
        group.probed = set(probe)
        reads = uow.tasks.lock_and_probe(task_ids, group.probed, hashes)
        group.locked, group.stored = reads.versions, reads.stored
        group.handles.update(reads.handles)
        group.unwatched = unwatched(reads.watched_until, self.ctx.now())
        self._load_misses(uow, group)

    def locked(self, uow: UnitOfWork, group: Group, task_id: str, owner: tuple[str, str]) -> TaskView:
        """A task's view as the group has left it (locked by ``prepare``, or now)."""
        return self._lock(uow, group, task_id, "", owner)[0]

    def _load_misses(self, uow: UnitOfWork, group: Group) -> None:
        misses = [task_id for task_id, version in group.locked.items() if self.ctx.steps.get(task_id, version) is None]
        if misses:
            tasks, steps, grants = uow.tasks.views_of(misses)
            for task_id, task in tasks.items():
                group.loaded[task_id] = view_of(
                    task,
                    steps[task_id],
                    outbox.viewers_of(task, grants[task_id]),
                    outbox.groups_of(grants[task_id]),
                )

    def _lock(
        self, uow: UnitOfWork, group: Group, task_id: str, event_id: str, owner: tuple[str, str]
    ) -> tuple[TaskView, tuple[str, Any] | None]:
        """The task's view as this group has left it so far, and ``event_id``'s committed dedup entry."""
        if task_id not in group.locked:
            # Not locked up front (one event applied under a caller's own lock, or a task id the
            # group could not know before resolving): lock it now, and probe the group's eventIds again.
            found, stored = locked_view(self.ctx, uow, task_id, owner, event_id=event_id)
            group.locked[task_id] = found.version
            group.loaded[task_id] = found
            if stored is not None:
                group.stored[(owner[0], event_id)] = stored
            if group.probed:
                group.stored.update(uow.tasks.dedup_entries(group.probed))
        view = group.views.get(task_id)
        if view is None:
            version = group.locked[task_id]
            cached = self.ctx.steps.get(task_id, version) or group.loaded.get(task_id)
            assert cached is not None and cached.version == version  # read when it was locked
            view = group.views[task_id] = cached
        if (view.task.tenant_id, view.task.authority_scope) != owner:
            raise NotFound(f"task {task_id} does not exist", ErrorCode.UNKNOWN_TASK)
        return view, group.stored.get((owner[0], event_id))

    def _limits(self) -> Limits:
        return Limits(self.ctx.max_event_age, self.ctx.max_clock_skew)

    @staticmethod
    def _dedup(
        group: Group, key: tuple[str, str], fingerprint: str, stored: tuple[str, Any] | None
    ) -> EventAccepted | None:
        """The first result of an event (tenant, eventId) seen before (in this group or committed), or None."""
        return stored_event_answer(repeat_of(fingerprint, group.seen.get(key) or stored))


def _entry(
    cmd: c.ReportEvent,
    content: Mapping[str, Any],
    event_type: EventType,
    producer_id: str,
    source_seq: int,
    received_at: datetime,
) -> Entry:
    """A report's event-log entry (``content``: the report's own, as its fingerprint read it)."""
    return Entry(
        event_id=cmd.event_id,
        event_type=event_type,
        producer_id=producer_id,
        source_seq=source_seq,
        occurred_at=cmd.occurred_at,
        received_at=received_at,
        duration_ms=cmd.duration_ms,
        data_schema=cmd.data.schema if cmd.data else None,
        error_code=cmd.error.code if cmd.error else None,
        payload={k: v for k, v in content.items() if v is not None},
    )


def _bucket_of(caller: EventCaller, cmd: c.ReportEvent) -> int | None:
    """The bucket an event's task is in, as its credential or its body says (a hint that routes,
    never one that authorizes: the shard it leads to decides); None: the home database's."""
    if isinstance(caller, ExecutionClaims):
        return caller.bucket_id
    if cmd.execution_handle:
        return ids.handle_bucket(cmd.execution_handle)
    return ids.bucket_hint(cmd.task_id) if cmd.task_id else None


def _moving(_: int) -> BaseException:
    return Unavailable(MOVING)
