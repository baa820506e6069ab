"""What the application needs from the outside world, named by the application.

The application layer decides; it does not know SQL, the database's dialect or
how a token is signed.  Each capability talks to the stores of one unit of work
(``UnitOfWork``): a transaction whose writes commit together or not at all
(design D8.1).  ``status.infra`` implements these protocols and the composition
root (``status.bootstrap``) wires the implementation in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar

from status.app.records import (
    ActivityRecord,
    ChangeRecord,
    CorrectionRecord,
    DedupRecord,
    EventRecord,
    GrantRow,
    HandleRecord,
    NotificationRecord,
    StoredStatus,
    TaskKeyRow,
    WorkflowFacts,
)
from status.domain.auth import ExecutionClaims, StoredHandle, UserPrincipal
from status.domain.definitions import (
    OperationDefinition,
    OperationKey,
    PolicyDocument,
    StatusDefinition,
    StatusDefinitionSet,
)
from status.domain.lifecycle import Health, Lifecycle
from status.domain.messages import Aggregate, Message
from status.domain.model import StepState, TaskState, WorkflowState

T = TypeVar("T")


class DuplicateKey(Exception):
    """A unique key was taken by a concurrent transaction (the caller may re-run and see the winner)."""


# ---------------------------------------------------------------- credentials
class ExecutionTokens(Protocol):
    def issue(self, claims: ExecutionClaims) -> str: ...

    def verify(self, token: str, now: datetime) -> ExecutionClaims: ...

    def is_execution_token(self, token: str) -> bool:
        """Whether a bearer token claims to be an execution token (which verifier to try; unverified)."""
        ...


class RealtimeTokens(Protocol):
    """Centrifugo connection and subscription JWTs: (token, expiry as a Unix time)."""

    def connection(self, user: UserPrincipal, channels: list[str]) -> tuple[str, int]: ...
    def subscription(self, user: UserPrincipal, channel: str) -> tuple[str, int]: ...


# ---------------------------------------------------------------- stores
@dataclass(frozen=True)
class OwnedTask:
    task_id: str
    tenant_id: str
    authority_scope: str
    attempt: int
    workflow_id: str  # Temporal's
    run_id: str | None  # None: any run of the workflow id


@dataclass(frozen=True)
class GroupReads:
    """What a group reads before it decides (``TaskStore.lock_and_probe``)."""

    versions: dict[str, int]  # the locked tasks that exist, at their version
    # Until when each locked task's detail channel may have a follower (None: never said).
    watched_until: dict[str, datetime | None]
    stored: dict[tuple[str, str], tuple[str, Any]]  # (tenant, eventId) -> (payload hash, result)
    handles: dict[str, StoredHandle]  # by hash, read after the locks


@dataclass(frozen=True)
class RunningAttempt:
    task_id: str
    tenant_id: str
    authority_scope: str
    title: str
    task_type: str | None
    task_started_at: datetime | None
    health: str
    step_id: str | None  # None: the task runs, no attempt of it does (between steps)
    operation_code: str | None
    operation_version: int | None
    step_started_at: datetime | None


class AccessStore(Protocol):
    """Task grants (``task_acl``): who besides the owner may see a task."""

    def grant_of(self, task_id: str, principal_type: str, principal_id: str) -> GrantRow | None: ...
    def insert_grant(
        self, task_id: str, tenant_id: str, principal_type: str, principal_id: str, permission: str, now: datetime
    ) -> None: ...
    def renew_grant(self, task_id: str, principal_type: str, principal_id: str, permission: str) -> None: ...
    def revoke_grant(self, task_id: str, principal_type: str, principal_id: str, now: datetime) -> None: ...
    def users_granted(self, task_id: str) -> set[str]:
        """Users holding an unrevoked USER grant on the task."""
        ...

    def subscribers_of(self, tenant_id: str, channel: str) -> set[str]:
        """Users holding a live subscription grant for a channel (``realtime_grant``)."""
        ...

    def drop_subscriptions(self, tenant_id: str, user_ids: Sequence[str], channel: str) -> None: ...


class CorrectionStore(Protocol):
    """Operators' corrections (``task_correction``): the audit record beside the event log."""

    def insert(self, record: CorrectionRecord) -> None: ...
    def of_task(self, task_id: str) -> list[CorrectionRecord]:
        """A task's corrections, in the order of the versions they made."""
        ...


class DefinitionStore(Protocol):
    """Definition rows (operations, status sets) and the duration history ETAs read."""

    def visible_to(self, tenant_id: str, scope: str) -> tuple[list[OperationDefinition], list[StoredStatus]]:
        """(operations, statuses) of a tenant's scope and of the global defaults."""
        ...

    def operation(self, key: OperationKey) -> OperationDefinition | None: ...
    def insert_operation(self, operation: OperationDefinition) -> None: ...
    def freeze_operation(self, key: OperationKey, now: datetime) -> None:
        """An operation version in use can no longer be replaced (design P16)."""
        ...

    def statuses(
        self, tenant_id: str, scope: str, task_type: str | None, version: int | None
    ) -> list[StatusDefinition]:
        """The statuses stored for one task type's version in a tenant's scope (none: not stored)."""
        ...

    def insert_statuses(self, tenant_id: str, scope: str, status_set: StatusDefinitionSet) -> None: ...


class DurationStore(Protocol):
    """Past durations of completed step attempts (what ETAs are computed from)."""

    def recent_durations(
        self, tenant_id: str, scope: str, task_type: str, operation_code: str, limit: int
    ) -> list[float]:
        """The newest successes' ``durationMs`` of an operation (``task_type`` "" for none); uses
        ``task_step_duration_idx``."""
        ...


class ExternalRefStore(Protocol):
    """External references (``task_external_ref``), keyed by the exact bytes of the value."""

    def lock_owner(self, tenant_id: str, scope: str, ref_type: str, ref_value: str) -> str | None:
        """The task a reference names (its row locked), or None."""
        ...

    def insert(
        self, tenant_id: str, scope: str, ref_type: str, ref_value: str, task_id: str, now: datetime
    ) -> None: ...
    def lock_claim(self, tenant_id: str, scope: str, ref_type: str, ref_value: str) -> tuple[int, datetime] | None:
        """With shards (control store): the bucket a reference is claimed for and since when, locked."""
        ...

    def save_claim(
        self, tenant_id: str, scope: str, ref_type: str, ref_value: str, bucket: int, now: datetime, *, new: bool
    ) -> None: ...
    def find(self, tenant_id: str, scope: str, ref_type: str, ref_value: str) -> Any:
        """(task_id, created_at, workflow_id, version) of the task a reference names, or None."""
        ...

    def tasks_named(self, tenant_id: str, ref_type: str, ref_value: str, scope: str | None, limit: int) -> list[str]:
        """The tasks a reference names in a tenant (one per authority scope; ``scope`` narrows)."""
        ...


class GrantStore(Protocol):
    """Realtime subscription grants (``realtime_grant``): which session holds which detail channel, until when."""

    def guard(self, session_id: str, user: UserPrincipal, expires: datetime, now: datetime) -> None:
        """Lock the session's guard row, creating it if need be.

        FOR UPDATE over the session's grants locks nothing while it has none, so concurrent first
        grants all saw zero held and together passed the limit. An upsert takes the guard row's
        exclusive lock at once (INSERT IGNORE then FOR UPDATE would upgrade a shared lock and
        deadlock two waiting grants)."""
        ...

    def drop_expired(self, session_id: str, now: datetime) -> list[str]:
        """Forget a session's expired grants; the channels they were for."""
        ...

    def held(self, session_id: str) -> set[str]: ...
    def hold(self, session_id: str, channel: str, user: UserPrincipal, expires: datetime, now: datetime) -> None:
        """Grant (or extend) one channel to a session."""
        ...

    def insert(
        self, session_id: str, channels: Iterable[str], user: UserPrincipal, expires: datetime, now: datetime
    ) -> None: ...
    def release(self, session_id: str, channel: str | None = None) -> int:
        """Drop one grant of a session (``channel``), or all of them."""
        ...


class HeartbeatStore(Protocol):
    """The heartbeat light path and the reconciler's reads (design D8.6, D8.7): step rows' heartbeat columns only."""

    def handles(self, hashes: Iterable[str]) -> dict[str, StoredHandle]:
        """Execution handles by hash (task, step, attempt, execution, producer, expiry)."""
        ...

    def tasks_of(self, task_ids: list[str], tenant_id: str, scope: str) -> set[str]:
        """Which of these tasks belong to a tenant's scope (chunks of 500 ids)."""
        ...

    def beat_rows(self, keys: list[tuple[str, str, int]], *, lock: bool) -> dict[tuple[str, str, int], Any]:
        """The heartbeat columns of these step attempts; ``lock``: locked, in key order (so batches
        never deadlock).

        Only step rows are locked, never task rows: the event path locks a
        task and then its step, so taking a task lock here could close a cycle."""
        ...

    def write_beats(self, beats: list[tuple[str, str, int, str, int]], now: datetime, *, guarded: bool) -> int:
        """Write heartbeats (task, step, attempt, execution, seq); returns how many rows took one.

        ``guarded``: only where the execution is current, RUNNING, HEALTHY and
        the seq newer (the fast path, no prior read); otherwise the rows were
        locked and decided already.  MySQL/MariaDB: one UPDATE joined to the
        beats per 500 — one round trip instead of one per beat; rows are
        visited in key order, so concurrent batches never deadlock-loop.
        SQLite (dev): one statement executed per beat."""
        ...

    def write_recovered_beats(self, beats: Sequence[tuple[str, str, int, int]], now: datetime) -> None:
        """The heartbeats (task, step, attempt, seq) that recovered STALE executions, once their
        recovery events committed."""
        ...

    def extend_handles(self, hashes: Sequence[str], expires_at: datetime) -> None:
        """Move these execution handles' expiry to ``expires_at`` (never back: only later ones move)."""
        ...

    def census(self) -> tuple[int, int, datetime | None, int | None]:
        """(running executions with a deadline, their producers, newest heartbeat, shortest interval)."""
        ...

    def freshness(self, now: datetime, ages: Sequence[int]) -> tuple[int, int, list[int], float]:
        """(running executions that heartbeat, those past their timeout, per age in ``ages`` how
        many were heard within it, and the sum of the heard ones' ages in seconds)."""
        ...

    def overdue_executions(self, now: datetime, limit: int, tenant_scope: tuple[str, str] | None = None) -> list[Any]:
        """RUNNING + HEALTHY attempts past their heartbeat deadline (unlocked), oldest deadline first,
        with their tenant, scope and Temporal activity (when known); of one tenant's scope when given."""
        ...

    def try_lock_task(self, task_id: str) -> bool:
        """Lock a task unless someone else holds it (SKIP LOCKED)."""
        ...

    def still_overdue(self, task_id: str, step_id: str, attempt: int, now: datetime) -> bool: ...

    def mark_completes_elsewhere(self, execution_ids: list[str], now: datetime) -> None:
        """Their workers said these activities complete elsewhere: watch them from now on."""
        ...

    def awaited_executions(self, now: datetime, limit: int) -> list[Any]:
        """Attempts completing elsewhere whose check is due (unlocked), earliest first."""
        ...

    def next_check(self, checks: dict[str, datetime | None]) -> None:
        """When to ask Temporal again about each awaited attempt (None: never, it has ended)."""
        ...


class NotificationStore(Protocol):
    """Users' notifications (``user_notification``), limited to tasks the user can still see."""

    def page(
        self, user: UserPrincipal, *, unread_only: bool, before: tuple[datetime, str] | None, limit: int
    ) -> list[Any]:
        """Newest first, after the keyset position ``before`` (created at, notification id)."""
        ...

    def unread_by_bucket(self, user: UserPrincipal) -> dict[int | None, int]:
        """The user's unread notifications counted by their tasks' buckets."""
        ...

    def mark_read(self, user: UserPrincipal, ids: Sequence[str] | None, now: datetime) -> int: ...


class OverdueStore(Protocol):
    """Storage reads behind ``status.app.overdue``: tasks still RUNNING (or STALE) and their running attempts."""

    def running_since(
        self, started_before: datetime, limit: int, tenant_scope: tuple[str, str] | None = None
    ) -> list[RunningAttempt]:
        """Running tasks that started before ``started_before`` (oldest first), with their running
        attempts; of one tenant's scope when given (filtered in the query, before the limit)."""
        ...


class ReadStore(Protocol):
    """The reads of the public API, each limited to what a user may see (design D3, D7)."""

    def can_see(self, user: UserPrincipal, task_id: str) -> bool: ...
    def visible_task(self, user: UserPrincipal, task_id: str) -> TaskState | None: ...
    def visible_tasks(self, user: UserPrincipal, task_ids: list[str]) -> list[TaskState]: ...
    def events_after(self, task_id: str, after_version: int, limit: int) -> tuple[list[EventRecord], int | None, int]:
        """(up to ``limit`` event-log rows after a version, the oldest version kept, the task's version)."""
        ...

    def page_of_tasks(
        self,
        user: UserPrincipal,
        status: str | None,
        before: tuple[datetime, str] | None,
        limit: int,
        title: str | None = None,
    ) -> list[TaskState]:
        """The user's visible tasks, newest first, after the keyset position ``before``; ``title``:
        only those whose title contains it (case-insensitive, literally)."""
        ...

    def workflow(self, workflow_id: str) -> WorkflowState | None: ...
    def visible_tasks_of_workflow(self, user: UserPrincipal, workflow_id: str) -> list[TaskState]: ...


class RunStore(Protocol):
    """Storage of Temporal run ownership: which run owns which open task, and how far the run follower"""

    def set_owner(self, task_ids: Sequence[str], namespace: str, workflow_id: str, run_id: str | None) -> int:
        """Record the owning run of the open tasks among ``task_ids``; how many changed."""
        ...

    def open_tasks_of(self, namespace: str, workflow_ids: Sequence[str]) -> list[OwnedTask]:
        """The open tasks owned by any run of these Temporal workflow ids (one indexed read)."""
        ...

    def stuck_tasks(self, namespace: str) -> list[OwnedTask]:
        """The open tasks of this namespace shown as stuck (their run's workflow task kept failing)."""
        ...

    def hand_over(self, namespace: str, task_ids: Sequence[str], to_run_id: str) -> int:
        """The open tasks among ``task_ids`` now belong to ``to_run_id`` of the same workflow id."""
        ...

    def work_key_of(
        self, tenant_id: str, scope: str, namespace: str, workflow_id: str, run_ids: Sequence[str]
    ) -> str | None:
        """The clientWorkflowKey of the status workflow whose open tasks these runs own."""
        ...

    def oldest_open_owned(self, namespace: str) -> datetime | None:
        """When the oldest open task owned by a run of ``namespace`` was created."""
        ...

    def watermark(self, namespace: str) -> datetime | None: ...
    def advance_watermark(self, namespace: str, close_time: datetime, now: datetime) -> None:
        """Move the watermark forward (never back: two followers may race)."""
        ...

    def record_activities(self, rows: Sequence[ActivityRecord]) -> None: ...


class TaskStore(Protocol):
    """Task and step rows, execution handles, and the insert-only rows of a change."""

    def lock_versions(self, task_ids: Sequence[str]) -> dict[str, int]:
        """Lock these tasks in one statement (id order, so concurrent groups never deadlock-loop);
        the version of each that exists."""
        ...

    def dedup_entries(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], tuple[str, Any]]:
        """Stored results of these (tenant, eventId)s, in one read: (payload hash, result)."""
        ...

    def lock_and_probe(
        self, task_ids: Sequence[str], keys: Iterable[tuple[str, str]], hashes: Iterable[str] = ()
    ) -> GroupReads:
        """What a group reads before it decides, in one round trip: lock these tasks (id order), the
        stored results of these (tenant, eventId)s, and these handles, read after the locks."""
        ...

    def watch_detail(self, task_id: str, until: datetime) -> None:
        """Someone may follow the (locked) task's detail channel until ``until`` (never shortened)."""
        ...

    def views_of(
        self, task_ids: Sequence[str]
    ) -> tuple[dict[str, TaskState], dict[str, list[StepState]], dict[str, list[tuple[str, str]]]]:
        """These tasks' rows, steps and unrevoked grants (principal type, id), in one round trip."""
        ...

    def load_many(self, task_ids: Sequence[str]) -> dict[str, TaskState]: ...
    def acl_grants_of(self, task_ids: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
        """Unrevoked grants as (principal type, principal id), per task."""
        ...

    def insert_steps(self, steps: Sequence[StepState]) -> None:
        """New step attempts, as a group leaves them (one multi-row INSERT)."""
        ...

    def insert_handles(self, rows: Sequence[HandleRecord]) -> None:
        """Fresh execution handles (one multi-row INSERT)."""
        ...

    def write_tasks(self, rows: Sequence[tuple[TaskState | None, TaskState]]) -> None:
        """Final states of a group's tasks — (as read, as decided) — in one statement: each row's
        changed columns only."""
        ...

    def write_steps(self, rows: Sequence[tuple[StepState | None, StepState]]) -> None:
        """Final states of a group's step attempts, in one statement (each row's changed columns only)."""
        ...

    def revoke_many(self, reasons: Mapping[str, str], now: datetime) -> None:
        """Revoke the live handles of these executions (execution id -> reason): one statement per reason."""
        ...

    def lock(self, task_id: str) -> TaskState | None: ...
    def lock_version(self, task_id: str, event_id: str) -> tuple[int, str | None, Any, datetime | None] | None:
        """Lock a task: its version, ``event_id``'s stored dedup entry (hash, result) and until when
        its detail channel may have a follower; None when there is no such task."""
        ...

    def load(self, task_id: str) -> TaskState | None: ...
    def steps_of(self, task_id: str, *, lock: bool = False) -> list[StepState]: ...
    def steps_of_tasks(self, task_ids: Sequence[str]) -> dict[str, list[StepState]]: ...
    def update(self, task: TaskState, before: TaskState | None = None) -> None: ...
    def update_step(self, step: StepState, before: StepState | None = None) -> None: ...
    def insert_step(self, step: StepState) -> None: ...
    def tenancy(self, task_id: str) -> tuple[str, str] | None:
        """(tenant, authority scope) of a task, unlocked; None when there is no such task."""
        ...

    def lock_tenancy(self, task_id: str) -> tuple[str, str, str] | None:
        """(tenant, authority scope, lifecycle) of a task, its row locked."""
        ...

    def registration_policy(self, task_id: str) -> Any:
        """The task's dynamic registration policy as stored (JSON, or None: the workflow's)."""
        ...

    def acl_grants(self, task_id: str) -> list[tuple[str, str]]: ...
    def handles(self, hashes: Iterable[str]) -> dict[str, StoredHandle]: ...
    def revoke_handles(self, execution_id: str | None, reason: str, now: datetime) -> None: ...


class LogStore(Protocol):
    """Task and step rows, execution handles, and the insert-only rows of a change."""

    def insert_events(self, rows: Sequence[EventRecord]) -> None: ...
    def insert_dedups(self, rows: Sequence[DedupRecord]) -> None: ...
    def insert_changes(self, rows: Sequence[ChangeRecord]) -> None: ...
    def insert_notifications(self, rows: Sequence[NotificationRecord]) -> None: ...
    def insert_outbox(self, messages: Sequence[Message]) -> None:
        """Each change's messages (those of one aggregate version) as one outbox row."""
        ...

    def outbox_rows_of(self, aggregate_type: str, aggregate_id: str) -> int: ...
    def outbox_holds(self, aggregate: Aggregate) -> bool:
        """Whether an outbox row of this aggregate version with this home channel exists."""
        ...


class WorkflowStore(Protocol):
    """Workflow rows, task creation, and the workflow projector's feed (``workflow_change``)."""

    def lock_by_key(
        self, tenant_id: str, scope: str, client_workflow_key: str
    ) -> tuple[WorkflowState, WorkflowFacts] | None:
        """A workflow by its client key, locked, with what it was created with."""
        ...

    def lock(self, workflow_id: str) -> tuple[WorkflowState, WorkflowFacts] | None: ...
    def insert(
        self,
        workflow: WorkflowState,
        *,
        coordinator_id: str,
        dynamic_registration_policy: PolicyDocument | None,
        request_hash: str,
    ) -> None: ...
    def update_counts(self, workflow: WorkflowState) -> None:
        """Version and task count (a task was added)."""
        ...

    def update_aggregate(self, workflow: WorkflowState) -> None:
        """What the projector folded: lifecycle, health, aggregate, version, times."""
        ...

    def task_by_key(self, workflow_id: str, client_task_key: str) -> TaskKeyRow | None:
        """A workflow's task by its client key."""
        ...

    def insert_task(
        self,
        task: TaskState,
        *,
        request_hash: str,
        dynamic_registration_policy: PolicyDocument | None,
        temporal_owner: tuple[str, str, str | None] | None,
    ) -> None: ...
    def freeze_statuses(self, task_type: str, version: int, now: datetime) -> None:
        """A status set in use can no longer be replaced (design P16)."""
        ...

    def claim_changes(self, limit: int) -> list[tuple[int, str]]:
        """Up to ``limit`` feed rows no other projector holds: (id, workflow id), locked."""
        ...

    def delete_changes(self, change_ids: Sequence[int]) -> None: ...
    def task_states_of(self, workflow_id: str) -> list[tuple[Lifecycle, Health]]:
        """Each task's lifecycle and health (what ``fold`` reads)."""
        ...


class Stores(Protocol):
    """The stores of one unit of work (each call runs in its transaction)."""

    @property
    def access(self) -> AccessStore: ...
    @property
    def corrections(self) -> CorrectionStore: ...
    @property
    def definitions(self) -> DefinitionStore: ...
    @property
    def durations(self) -> DurationStore: ...
    @property
    def external_refs(self) -> ExternalRefStore: ...
    @property
    def grants(self) -> GrantStore: ...
    @property
    def heartbeats(self) -> HeartbeatStore: ...
    @property
    def notifications(self) -> NotificationStore: ...
    @property
    def overdue(self) -> OverdueStore: ...
    @property
    def reads(self) -> ReadStore: ...
    @property
    def runs(self) -> RunStore: ...
    @property
    def tasks(self) -> TaskStore: ...
    @property
    def log(self) -> LogStore: ...
    @property
    def workflows(self) -> WorkflowStore: ...


class UnitOfWork(Stores, Protocol):
    """One transaction: nothing it wrote is visible or published before ``commit``."""

    def commit(self) -> None: ...

    def batched(self) -> AbstractContextManager[None]:
        """Writes issued inside go to the database together at the block's end, as one round trip
        where it can: nothing inside may read what they write (nor their row counts). A failure
        among them fails the block, and the transaction is not committed."""
        ...


class Database(Protocol):
    def run(self, work: Callable[[UnitOfWork], T], *, attempts: int = 6) -> T:
        """Run ``work`` in a fresh unit of work, again from the start after a transient failure
        (deadlock, lock timeout, lost connection); ``work`` commits."""
        ...

    def run_unique(self, work: Callable[[UnitOfWork], T]) -> T:
        """``run``, once more after a ``DuplicateKey`` (the re-run sees the concurrent winner)."""
        ...

    def ping(self) -> None:
        """One round trip to the database; raises when it cannot serve."""
        ...

    def reading(self) -> AbstractContextManager[Stores]:
        """Stores for reads outside a write (one connection, nothing committed)."""
        ...
