"""Broadcast notices (R12, seed §6.6): system, tenant, project and user fan-out, idempotent by id."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from status.app import outbox
from status.app.context import AppContext, check_key
from status.app.ports import UnitOfWork
from status.domain.auth import Role, ServicePrincipal
from status.domain.errors import Forbidden, Invalid
from status.domain.projections import (
    SYSTEM_CHANNEL,
    Projection,
    project_channel,
    system_broadcast,
    tenant_channel,
    user_channel,
)


class BroadcastCommands:
    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    def broadcast(
        self,
        caller: ServicePrincipal,
        *,
        broadcast_id: str,
        audience: str,
        level: str,
        text: str,
        project_id: str | None = None,
        user_ids: Sequence[str] = (),
    ) -> dict[str, Any]:
        """A notice to a wider audience; the wider it goes, the smaller the payload (text only).

        ``SYSTEM`` needs ADMIN; ``TENANT``/``PROJECT``/``USERS`` stay inside the caller's tenant.
        ``USERS`` fans out to each user's summary channel in batches of 500 (one
        Centrifugo broadcast call each).  Idempotent by ``broadcastId``.
        """
        check_key("broadcastId", broadcast_id)
        if audience == "SYSTEM" and not caller.has(Role.ADMIN):
            raise Forbidden("system broadcasts need the ADMIN role")
        if not (caller.has(Role.COORDINATOR) or caller.has(Role.ADMIN)):
            raise Forbidden("broadcasts need the COORDINATOR or ADMIN role")
        if level not in ("INFO", "WARNING", "ERROR") or not 0 < len(text) <= 500:
            raise Invalid("level must be INFO, WARNING or ERROR and text 1–500 characters")
        now = self.ctx.now()
        payload = system_broadcast(broadcast_id, level, text, now)
        if audience == "SYSTEM":
            targets = [(SYSTEM_CHANNEL, Projection.SYSTEM_BROADCAST, payload)]
        elif audience == "TENANT":
            targets = [(tenant_channel(caller.tenant_id), Projection.TENANT_BROADCAST, payload)]
        elif audience == "PROJECT" and project_id:
            check_key("projectId", project_id, 64)
            targets = [(project_channel(caller.tenant_id, project_id), Projection.PROJECT_BROADCAST, payload)]
        elif audience == "USERS" and user_ids:
            if len(user_ids) > 100_000:
                raise Invalid("at most 100000 users per broadcast")
            for user_id in user_ids:
                check_key("userId", user_id, 64)
            channels = [user_channel(caller.tenant_id, u) for u in dict.fromkeys(user_ids)]
            targets = [
                (
                    f"fanout:{broadcast_id}:{i // 500}",
                    Projection.USER_FANOUT,
                    {"channels": channels[i : i + 500], "data": payload},
                )
                for i in range(0, len(channels), 500)
            ]
        else:
            raise Invalid("audience must be SYSTEM, TENANT, PROJECT (with projectId) or USERS (with userIds)")
        rows = [
            outbox.broadcast_row(f"{caller.tenant_id}:{broadcast_id}", channel, projection, body, now)
            for channel, projection, body in targets
        ]

        def work(uow: UnitOfWork) -> dict[str, Any]:
            seen = uow.log.outbox_rows_of("BROADCAST", rows[0]["aggregate_id"])
            if not seen:
                uow.log.insert_outbox(rows)
            uow.commit()
            return {"broadcastId": broadcast_id, "messages": len(rows), "duplicate": bool(seen)}

        return self.ctx.db.run(work)
