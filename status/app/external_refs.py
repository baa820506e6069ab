"""External references (design D5 ``task_external_ref``): other systems' ids for one canonical task.

An order system knows ``ORDER_ID=SO-1042``, a ticket system ``TICKET=INC-7``; both must land on
the same taskId.  A reference is unique per ``(tenant, authorityScope, refType, refValue)``; the
scope is the caller credential's, never the body's, so one scope can't claim another's ids.
Attaching the same reference to the same task again is a no-op; to another task, a conflict.
References are lookup keys, not projection state: attaching one moves no version.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import TypedDict

from status.app.context import AppContext, require
from status.app.ports import Stores, UnitOfWork
from status.app.queries import Queries
from status.app.shards import run_for
from status.domain import ids, shapes
from status.domain.auth import Role, ServicePrincipal, UserPrincipal
from status.domain.buckets import RefClaim, ref_claim
from status.domain.errors import Conflict, ErrorCode, Invalid, NotFound, Unavailable
from status.domain.projections import iso

REF_TYPE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
MAX_REF_VALUE = 255
MAX_REFS_PER_REQUEST = 20


class RefAttached(TypedDict):
    refType: str
    refValue: str
    created: bool  # False: the reference was the task's already


class RefsAttached(TypedDict):
    taskId: str
    externalRefs: list[RefAttached]


class RefFound(TypedDict):
    """The task a reference maps to, as the internal API answers a lookup."""

    taskId: str
    workflowId: str
    taskVersion: str
    authorityScope: str
    refType: str
    refValue: str
    attachedAt: str


def check_refs(refs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The references of one request, checked and without repeats (order kept)."""
    if len(refs) > MAX_REFS_PER_REQUEST:
        raise Invalid(f"at most {MAX_REFS_PER_REQUEST} externalRefs per request")
    for ref_type, ref_value in refs:
        if not REF_TYPE_RE.match(ref_type):
            raise Invalid("refType must be 1–64 characters of [A-Za-z0-9_.:-]")
        if not ref_value or len(ref_value) > MAX_REF_VALUE or any(ord(ch) < 32 for ch in ref_value):
            raise Invalid(f"refValue must be 1–{MAX_REF_VALUE} printable characters")
    return list(dict.fromkeys(refs))


def attach_in(
    stores: Stores, tenant_id: str, scope: str, task_id: str, refs: Sequence[tuple[str, str]], now: datetime
) -> list[RefAttached]:
    """Attach references inside the caller's transaction (task creation or ``attach``)."""
    results: list[RefAttached] = []
    for ref_type, ref_value in refs:
        owner = stores.external_refs.lock_owner(tenant_id, scope, ref_type, ref_value)
        if owner is not None and owner != task_id:
            raise Conflict(f"{ref_type} {ref_value!r} already refers to another task", ErrorCode.EXTERNAL_REF_CONFLICT)
        if owner is None:
            stores.external_refs.insert(tenant_id, scope, ref_type, ref_value, task_id, now)
        results.append({"refType": ref_type, "refValue": ref_value, "created": owner is None})
    return results


def claim_refs(ctx: AppContext, tenant_id: str, scope: str, refs: Sequence[tuple[str, str]], bucket: int) -> None:
    """With shards: each reference claimed for ``bucket`` in the control store before its tasks'
    shard attaches it (``status.domain.buckets.ref_claim``); a reference another bucket's task
    holds is a conflict, one claimed moments ago by another bucket is in doubt (retry later). On
    one database its key alone keeps a reference unique."""
    if not refs or len(ctx.shards.every()) < 2:
        return
    for ref_type, ref_value in refs:
        _claim(ctx, (tenant_id, scope, ref_type, ref_value), bucket)


def _claim(ctx: AppContext, ref: tuple[str, str, str, str], bucket: int) -> None:
    tenant_id, scope, ref_type, ref_value = ref
    for _ in range(3):  # a claim taken over meanwhile is judged again
        claimed = ctx.db.run(lambda uow: uow.external_refs.lock_claim(*ref))
        held_there = False
        if claimed is not None and claimed[0] != bucket:
            with ctx.shards.reading(claimed[0]) as stores:
                row = stores.external_refs.find(*ref)
            held_there = row is not None and ids.bucket_hint(row.task_id) == claimed[0]
        decision = ref_claim(claimed, bucket, held_there, ctx.now())
        if decision is RefClaim.HELD:
            return
        if decision is RefClaim.CONFLICT:
            raise Conflict(f"{ref_type} {ref_value!r} already refers to another task", ErrorCode.EXTERNAL_REF_CONFLICT)
        if decision is RefClaim.IN_DOUBT:
            break

        def take(uow: UnitOfWork, seen: tuple[int, datetime] | None = claimed) -> bool:
            if uow.external_refs.lock_claim(*ref) != seen:
                return False  # claimed or taken over meanwhile
            uow.external_refs.save_claim(*ref, bucket, ctx.now(), new=seen is None)
            uow.commit()
            return True

        if ctx.db.run_unique(take):
            return
    raise Unavailable(f"{ref_type} {ref_value!r} is being attached to another task; retry")


class ExternalRefCommands:
    def __init__(self, ctx: AppContext, queries: Queries) -> None:
        self.ctx = ctx
        self.queries = queries

    def attach(self, caller: ServicePrincipal, task_id: str, refs: Sequence[tuple[str, str]]) -> RefsAttached:
        """Attach references to an existing task of the caller's tenant and scope (idempotent)."""
        require(caller, Role.COORDINATOR)
        wanted = check_refs(refs)
        if not wanted:
            raise Invalid("externalRefs must not be empty")

        bucket = ids.bucket_hint(task_id)
        if bucket is not None:
            claim_refs(self.ctx, caller.tenant_id, caller.authority_scope, wanted, bucket)

        def work(uow: UnitOfWork) -> RefsAttached:
            # The task row first (the fixed lock order: task, then what hangs off it).
            row = uow.tasks.lock_tenancy(task_id)
            if row is None or (row[0], row[1]) != (caller.tenant_id, caller.authority_scope):
                raise NotFound(f"task {task_id} does not exist", ErrorCode.UNKNOWN_TASK)
            results = attach_in(uow, caller.tenant_id, caller.authority_scope, task_id, wanted, self.ctx.now())
            uow.commit()
            return {"taskId": task_id, "externalRefs": results}

        return run_for(self.ctx.shards, bucket, work, unique=True)

    def lookup(self, caller: ServicePrincipal, ref_type: str, ref_value: str) -> RefFound:
        """The task a reference maps to, in the caller's tenant and scope (internal API)."""
        require(caller, Role.COORDINATOR)
        check_refs([(ref_type, ref_value)])
        row = None
        for name, database in self.ctx.shards.every():  # a reference's task may be on any shard
            with database.reading() as stores:
                row = stores.external_refs.find(caller.tenant_id, caller.authority_scope, ref_type, ref_value)
            if row is not None and self.ctx.shards.holds(name, ids.bucket_hint(row.task_id)):
                break
            row = None
        if row is None:
            raise NotFound(f"no task has {ref_type} {ref_value!r}", ErrorCode.NOT_FOUND)
        return {
            "taskId": row.task_id,
            "workflowId": row.workflow_id,
            "taskVersion": str(row.version),
            "authorityScope": caller.authority_scope,
            "refType": ref_type,
            "refValue": ref_value,
            "attachedAt": iso(row.created_at),
        }

    def task_for_user(
        self, user: UserPrincipal, ref_type: str, ref_value: str, authority_scope: str | None
    ) -> shapes.TaskSnapshot:
        """The snapshot of the task a reference maps to, if this user may see it (public API).

        An invisible task answers exactly like an unknown reference (no probing).
        """
        check_refs([(ref_type, ref_value)])
        visible: list[str] = []
        for name, database in self.ctx.shards.every():  # a reference's task may be on any shard
            with database.reading() as stores:
                candidates = stores.external_refs.tasks_named(user.tenant_id, ref_type, ref_value, authority_scope, 10)
                visible += [
                    task_id
                    for task_id in candidates
                    if self.ctx.shards.holds(name, ids.bucket_hint(task_id))
                    and self.queries.can_see_task(stores, user, task_id)
                ]
        if not visible:
            raise NotFound("task not found", ErrorCode.NOT_FOUND)
        if len(visible) > 1:
            raise Invalid("this reference exists in several authority scopes; pass authorityScope")
        return self.queries.get_task(user, visible[0])
