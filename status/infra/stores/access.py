"""Task grants (``task_acl``): who besides the owner may see a task."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa

from status.app.records import GrantRow
from status.infra import tables as t

acl = t.task_acl


def _key(task_id: str, principal_type: str, principal_id: str) -> tuple[sa.ColumnElement[bool], ...]:
    return (acl.c.task_id == task_id, acl.c.principal_type == principal_type, acl.c.principal_id == principal_id)


class SqlAccessStore:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def grant_of(self, task_id: str, principal_type: str, principal_id: str) -> GrantRow | None:
        row = self._conn.execute(
            sa.select(acl.c.permission, acl.c.revoked_at).where(*_key(task_id, principal_type, principal_id))
        ).first()
        return GrantRow(row[0], row[1]) if row is not None else None

    def insert_grant(
        self, task_id: str, tenant_id: str, principal_type: str, principal_id: str, permission: str, now: datetime
    ) -> None:
        self._conn.execute(
            sa.insert(acl).values(
                task_id=task_id,
                principal_type=principal_type,
                principal_id=principal_id,
                tenant_id=tenant_id,
                permission=permission,
                created_at=now,
            )
        )

    def renew_grant(self, task_id: str, principal_type: str, principal_id: str, permission: str) -> None:
        self._conn.execute(
            sa.update(acl)
            .where(*_key(task_id, principal_type, principal_id))
            .values(permission=permission, revoked_at=None)
        )

    def revoke_grant(self, task_id: str, principal_type: str, principal_id: str, now: datetime) -> None:
        self._conn.execute(sa.update(acl).where(*_key(task_id, principal_type, principal_id)).values(revoked_at=now))

    def users_granted(self, task_id: str) -> set[str]:
        """Users holding an unrevoked USER grant on the task."""
        return set(
            self._conn.scalars(
                sa.select(acl.c.principal_id).where(
                    acl.c.task_id == task_id, acl.c.principal_type == "USER", acl.c.revoked_at.is_(None)
                )
            )
        )

    def subscribers_of(self, tenant_id: str, channel: str) -> set[str]:
        """Users holding a live subscription grant for a channel (``realtime_grant``)."""
        grants = t.realtime_grant
        return set(
            self._conn.scalars(
                sa.select(grants.c.user_id)
                .where(grants.c.tenant_id == tenant_id, grants.c.channel == channel)
                .distinct()
            )
        )

    def drop_subscriptions(self, tenant_id: str, user_ids: Sequence[str], channel: str) -> None:
        grants = t.realtime_grant
        self._conn.execute(
            sa.delete(grants).where(
                grants.c.tenant_id == tenant_id, grants.c.user_id.in_(list(user_ids)), grants.c.channel == channel
            )
        )
