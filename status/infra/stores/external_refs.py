"""External references (``task_external_ref``), keyed by the exact bytes of the value."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from status.infra import tables as t

x = t.task_external_ref


def ref_hash(ref_value: str) -> str:
    """The key of a reference: its exact bytes (no collation folds or pads them)."""
    return hashlib.sha256(ref_value.encode("utf-8")).hexdigest()


class SqlExternalRefStore:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def lock_owner(self, tenant_id: str, scope: str, ref_type: str, ref_value: str) -> str | None:
        """The task a reference names (its row locked), or None."""
        return self._conn.execute(
            sa.select(x.c.task_id)
            .where(
                x.c.tenant_id == tenant_id,
                x.c.authority_scope == scope,
                x.c.ref_type == ref_type,
                x.c.ref_hash == ref_hash(ref_value),
            )
            .with_for_update()
        ).scalar()

    def insert(self, tenant_id: str, scope: str, ref_type: str, ref_value: str, task_id: str, now: datetime) -> None:
        self._conn.execute(
            sa.insert(x).values(
                tenant_id=tenant_id,
                authority_scope=scope,
                ref_type=ref_type,
                ref_hash=ref_hash(ref_value),
                ref_value=ref_value,
                task_id=task_id,
                created_at=now,
            )
        )

    def find(self, tenant_id: str, scope: str, ref_type: str, ref_value: str) -> Any:
        """(task_id, created_at, workflow_id, version) of the task a reference names, or None."""
        return self._conn.execute(
            sa.select(x.c.task_id, x.c.created_at, t.task.c.workflow_id, t.task.c.version)
            .join(t.task, t.task.c.id == x.c.task_id)
            .where(
                x.c.tenant_id == tenant_id,
                x.c.authority_scope == scope,
                x.c.ref_type == ref_type,
                x.c.ref_hash == ref_hash(ref_value),
            )
        ).first()

    def tasks_named(self, tenant_id: str, ref_type: str, ref_value: str, scope: str | None, limit: int) -> list[str]:
        """The tasks a reference names in a tenant (one per authority scope; ``scope`` narrows)."""
        query = sa.select(x.c.task_id).where(
            x.c.tenant_id == tenant_id, x.c.ref_type == ref_type, x.c.ref_hash == ref_hash(ref_value)
        )
        if scope is not None:
            query = query.where(x.c.authority_scope == scope)
        return list(self._conn.scalars(query.limit(limit)))
