"""Realtime subscription grants (``realtime_grant``): which session holds which detail channel, until when.

A session's row with channel ``SESSION_GUARD`` always exists once the session asked for a grant:
it serializes that session's grants (see ``guard``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from status.domain.auth import UserPrincipal
from status.infra import tables as t

g = t.realtime_grant
# The row that serializes one login session's grants (no channel is named so).
SESSION_GUARD = ""


class SqlGrantStore:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def guard(self, session_id: str, user: UserPrincipal, expires: datetime, now: datetime) -> None:
        """Lock the session's guard row, creating it if need be.

        FOR UPDATE over the session's grants locks nothing while it has none, so concurrent first
        grants all saw zero held and together passed the limit. An upsert takes the guard row's
        exclusive lock at once (INSERT IGNORE then FOR UPDATE would upgrade a shared lock and
        deadlock two waiting grants).
        """
        guard = {
            "session_id": session_id,
            "channel": SESSION_GUARD,
            "tenant_id": user.tenant_id,
            "user_id": user.user_id,
            "expires_at": expires,
            "created_at": now,
        }
        if self._conn.dialect.name == "mysql":
            self._conn.execute(mysql_insert(g).values(guard).on_duplicate_key_update(expires_at=expires))
        else:
            self._conn.execute(
                sqlite_insert(g)
                .values(guard)
                .on_conflict_do_update(index_elements=[g.c.session_id, g.c.channel], set_={"expires_at": expires})
            )

    def drop_expired(self, session_id: str, now: datetime) -> list[str]:
        """Forget a session's expired grants; the channels they were for."""
        expired = list(
            self._conn.scalars(
                sa.select(g.c.channel).where(
                    g.c.session_id == session_id, g.c.expires_at <= now, g.c.channel != SESSION_GUARD
                )
            )
        )
        if expired:
            self._conn.execute(sa.delete(g).where(g.c.session_id == session_id, g.c.channel.in_(expired)))
        return expired

    def held(self, session_id: str) -> set[str]:
        return set(
            self._conn.scalars(sa.select(g.c.channel).where(g.c.session_id == session_id, g.c.channel != SESSION_GUARD))
        )

    def hold(self, session_id: str, channel: str, user: UserPrincipal, expires: datetime, now: datetime) -> None:
        """Grant (or extend) one channel to a session."""
        extended = self._conn.execute(
            sa.update(g).where(g.c.session_id == session_id, g.c.channel == channel).values(expires_at=expires)
        ).rowcount
        if not extended:
            self.insert(session_id, [channel], user, expires, now)

    def insert(
        self, session_id: str, channels: Iterable[str], user: UserPrincipal, expires: datetime, now: datetime
    ) -> None:
        rows = [
            {
                "session_id": session_id,
                "channel": channel,
                "tenant_id": user.tenant_id,
                "user_id": user.user_id,
                "expires_at": expires,
                "created_at": now,
            }
            for channel in sorted(channels)
        ]
        if rows:
            self._conn.execute(sa.insert(g), rows)

    def release(self, session_id: str, channel: str | None = None) -> int:
        """Drop one grant of a session (``channel``), or all of them."""
        where = [g.c.session_id == session_id]
        if channel is not None:
            where.append(g.c.channel == channel)
        return int(self._conn.execute(sa.delete(g).where(*where)).rowcount or 0)
