"""Users' durable notifications (design D8.13): list, mark read.

Records are written with the change that caused them (events, corrections); here users read
them.  Read state is stored, so it is the same on every device; a notification of a task the
user can no longer see is not shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from status.app.context import AppContext
from status.app.cursors import decode_cursor, encode_cursor
from status.app.ports import Stores, UnitOfWork
from status.app.records import NotificationRecord
from status.domain import ids as identifiers
from status.domain.auth import UserPrincipal
from status.domain.errors import Invalid
from status.domain.notifications import Notification

MAX_IDS = 200


def _as_json(row: Any) -> dict[str, Any]:
    found = Notification.restored(
        row.task_id,
        int(row.task_version),
        row.notification_type,
        row.level,
        row.title,
        row.message,
        row.lifecycle_status,
        row.details,
    )
    return found.to_json(row.created_at, row.read_at)


class NotificationQueries:
    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    def list_for(self, user: UserPrincipal, *, unread_only: bool, cursor: str | None, limit: int) -> dict[str, Any]:
        """Newest first, keyset-paginated; ``unreadCount`` counts all unread ones."""
        limit = max(1, min(limit, 100))
        before = decode_cursor(cursor) if cursor else None
        # A user's notifications are written with the changes of their tasks, on those tasks'
        # shards: each shard's first keyset page, merged in list order.
        rows: list[NotificationRecord] = []
        unread = 0
        for name, database in self.ctx.shards.every():
            with database.reading() as stores:
                page = stores.notifications.page(user, unread_only=unread_only, before=before, limit=limit + 1)
                rows += [r for r in page if self.ctx.shards.holds(name, identifiers.bucket_hint(r.task_id))]
                unread += self._unread_held(name, stores, user)
        rows.sort(key=lambda r: (r.created_at, r.notification_id), reverse=True)
        page = rows[:limit]
        next_cursor = (
            encode_cursor(page[-1].created_at, page[-1].notification_id) if len(rows) > limit and page else None
        )
        return {"notifications": [_as_json(r) for r in page], "unreadCount": unread, "nextCursor": next_cursor}

    def mark_read(self, user: UserPrincipal, ids: Sequence[str] | None) -> dict[str, Any]:
        """Mark some (``ids``) or all (None) of the user's notifications read; idempotent."""
        if ids is not None and not 0 < len(ids) <= MAX_IDS:
            raise Invalid(f"ids must hold 1–{MAX_IDS} notification ids")
        now = self.ctx.now()
        marked = unread = 0
        for name, database in self.ctx.shards.every():

            def work(uow: UnitOfWork, shard: str = name) -> tuple[int, int]:
                # Counted as the shard holds them (a bucket on two shards is marked on both and
                # counted on one): what was unread before and after, in the same transaction.
                before = self._unread_held(shard, uow, user)
                uow.notifications.mark_read(user, ids, now)
                after = self._unread_held(shard, uow, user)
                uow.commit()
                return before - after, after

            done, left = database.run(work)
            marked, unread = marked + done, unread + left
        return {"marked": marked, "unreadCount": unread}

    def _unread_held(self, shard: str, stores: Stores, user: UserPrincipal) -> int:
        """The shard's unread count of the user, over the buckets it holds: a bucket being copied,
        or moved and not yet released, has its rows on two shards and is counted on one."""
        counts = stores.notifications.unread_by_bucket(user)
        return sum(count for bucket, count in counts.items() if self.ctx.shards.holds(shard, bucket))
