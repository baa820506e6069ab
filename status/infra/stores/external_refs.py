"""External references (``task_external_ref``), keyed by the exact bytes of the value."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from status.infra import tables as t

x = t.task_external_ref
claims = t.external_ref_claim


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

    def lock_claim(self, tenant_id: str, scope: str, ref_type: str, ref_value: str) -> tuple[int, datetime] | None:
        """The bucket a reference is claimed for and since when (its claim locked), or None."""
        row = self._conn.execute(
            sa.select(claims.c.bucket_id, claims.c.claimed_at)
            .where(*_claim_key(tenant_id, scope, ref_type, ref_value))
            .with_for_update()
        ).first()
        return None if row is None else (int(row.bucket_id), row.claimed_at)

    def save_claim(
        self, tenant_id: str, scope: str, ref_type: str, ref_value: str, bucket: int, now: datetime, *, new: bool
    ) -> None:
        """Claim a reference for ``bucket`` (``new``: no claim existed; else the one locked is replaced)."""
        if new:
            self._conn.execute(
                sa.insert(claims).values(
                    tenant_id=tenant_id,
                    authority_scope=scope,
                    ref_type=ref_type,
                    ref_hash=ref_hash(ref_value),
                    bucket_id=bucket,
                    claimed_at=now,
                )
            )
        else:
            self._conn.execute(
                sa.update(claims)
                .where(*_claim_key(tenant_id, scope, ref_type, ref_value))
                .values(bucket_id=bucket, claimed_at=now)
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


def _claim_key(tenant_id: str, scope: str, ref_type: str, ref_value: str) -> list[Any]:
    return [
        claims.c.tenant_id == tenant_id,
        claims.c.authority_scope == scope,
        claims.c.ref_type == ref_type,
        claims.c.ref_hash == ref_hash(ref_value),
    ]
