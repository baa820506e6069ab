"""Users' notifications (``user_notification``), limited to tasks the user can still see."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from status.domain import ids
from status.domain.auth import UserPrincipal
from status.infra import tables as t
from status.infra.stores import sql

n = t.user_notification


def _mine(user: UserPrincipal) -> Any:
    visible = sql.visible_task_filter(user.tenant_id, user.user_id, user.project_ids, user.role_ids)
    return sa.and_(
        n.c.tenant_id == user.tenant_id,
        n.c.user_id == user.user_id,
        n.c.task_id.in_(sa.select(t.task.c.id).where(visible)),
    )


class SqlNotificationStore:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def page(
        self, user: UserPrincipal, *, unread_only: bool, before: tuple[datetime, str] | None, limit: int
    ) -> list[Any]:
        """Newest first, after the keyset position ``before`` (created at, notification id)."""
        query = sa.select(n).where(_mine(user))
        if unread_only:
            query = query.where(n.c.read_at.is_(None))
        if before is not None:
            created, notification_id = before
            query = query.where(
                sa.or_(
                    n.c.created_at < created,
                    sa.and_(n.c.created_at == created, n.c.notification_id < notification_id),
                )
            )
        query = query.order_by(n.c.created_at.desc(), n.c.notification_id.desc()).limit(limit)
        return list(self._conn.execute(query).all())

    def unread_by_bucket(self, user: UserPrincipal) -> dict[int | None, int]:
        prefix = sa.func.substr(n.c.task_id, 1, ids.BUCKET_PREFIX_LENGTH)
        rows = self._conn.execute(
            sa.select(prefix, sa.func.count()).where(_mine(user), n.c.read_at.is_(None)).group_by(prefix)
        ).all()
        counts: Counter[int | None] = Counter()
        for head, count in rows:
            counts[ids.prefix_bucket(str(head))] += int(count)
        return dict(counts)

    def mark_read(self, user: UserPrincipal, ids: Sequence[str] | None, now: datetime) -> int:
        where = [n.c.tenant_id == user.tenant_id, n.c.user_id == user.user_id, n.c.read_at.is_(None)]
        if ids is not None:
            where.append(n.c.notification_id.in_(list(ids)))
        return int(self._conn.execute(sa.update(n).where(*where).values(read_at=now)).rowcount or 0)
