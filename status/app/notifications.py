"""Users' durable notifications (seed "可选离线通知" and its unread paragraph): list, mark read.

Records are written with the change that caused them (events, corrections); here users read
them.  Read state is stored, so it is the same on every device; a notification of a task the
user can no longer see is not shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from status.app.context import AppContext
from status.app.cursors import decode_cursor, encode_cursor
from status.domain.auth import UserPrincipal
from status.domain.errors import Invalid
from status.domain.notifications import Notification
from status.infra import repository as repo
from status.infra import tables as t
from status.infra.uow import UnitOfWork, run_in_transaction

MAX_IDS = 200


def _as_json(row: Any) -> dict[str, Any]:
    found = Notification(row.task_id, int(row.task_version), row.notification_type, row.level, row.title, row.message)
    return found.to_json(row.created_at, row.read_at)


class NotificationQueries:
    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    def _mine(self, user: UserPrincipal) -> Any:
        n = t.user_notification
        visible = repo.visible_task_filter(user.tenant_id, user.user_id, user.project_ids, user.role_ids)
        return sa.and_(
            n.c.tenant_id == user.tenant_id,
            n.c.user_id == user.user_id,
            n.c.task_id.in_(sa.select(t.task.c.id).where(visible)),
        )

    def list_for(self, user: UserPrincipal, *, unread_only: bool, cursor: str | None, limit: int) -> dict[str, Any]:
        """Newest first, keyset-paginated; ``unreadCount`` counts all unread ones."""
        n = t.user_notification
        limit = max(1, min(limit, 100))
        query = sa.select(n).where(self._mine(user))
        if unread_only:
            query = query.where(n.c.read_at.is_(None))
        if cursor:
            created, notification_id = decode_cursor(cursor)
            query = query.where(
                sa.or_(
                    n.c.created_at < created,
                    sa.and_(n.c.created_at == created, n.c.notification_id < notification_id),
                )
            )
        query = query.order_by(n.c.created_at.desc(), n.c.notification_id.desc()).limit(limit + 1)
        with self.ctx.engine.connect() as conn:
            rows = conn.execute(query).all()
            unread = conn.execute(
                sa.select(sa.func.count()).select_from(n).where(self._mine(user), n.c.read_at.is_(None))
            ).scalar_one()
        page = rows[:limit]
        next_cursor = (
            encode_cursor(page[-1].created_at, page[-1].notification_id) if len(rows) > limit and page else None
        )
        return {"notifications": [_as_json(r) for r in page], "unreadCount": unread, "nextCursor": next_cursor}

    def mark_read(self, user: UserPrincipal, ids: Sequence[str] | None) -> dict[str, Any]:
        """Mark some (``ids``) or all (None) of the user's notifications read; idempotent."""
        if ids is not None and not 0 < len(ids) <= MAX_IDS:
            raise Invalid(f"ids must hold 1–{MAX_IDS} notification ids")
        n = t.user_notification
        now = self.ctx.now()

        def work(uow: UnitOfWork) -> int:
            where = [n.c.tenant_id == user.tenant_id, n.c.user_id == user.user_id, n.c.read_at.is_(None)]
            if ids is not None:
                where.append(n.c.notification_id.in_(list(ids)))
            changed = uow.conn.execute(sa.update(n).where(*where).values(read_at=now)).rowcount
            uow.commit()
            return int(changed or 0)

        marked = run_in_transaction(self.ctx.engine, work)
        with self.ctx.engine.connect() as conn:
            unread = conn.execute(
                sa.select(sa.func.count()).select_from(n).where(self._mine(user), n.c.read_at.is_(None))
            ).scalar_one()
        return {"marked": marked, "unreadCount": unread}
