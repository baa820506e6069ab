"""Broadcast notices (design D8.12, D9): system, tenant, project and user fan-out, idempotent by id."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from status.app import outbox
from status.app.context import AppContext
from status.app.ports import UnitOfWork
from status.domain.auth import Role, ServicePrincipal
from status.domain.errors import Forbidden, Invalid
from status.domain.messages import Aggregate
from status.domain.projections import (
    SYSTEM_CHANNEL,
    Projection,
    project_channel,
    system_broadcast,
    tenant_channel,
    user_channel,
)
from status.domain.reports import check_key


class BroadcastCommands:
    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    def broadcast(  # noqa: C901
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
        # One message per audience; a broadcast to users is written in rows of 500 channels (one
        # Centrifugo broadcast each), numbered as the broadcast's versions 1, 2, ...
        if audience == "SYSTEM":
            targets = [([SYSTEM_CHANNEL], Projection.SYSTEM_BROADCAST)]
        elif audience == "TENANT":
            targets = [([tenant_channel(caller.tenant_id)], Projection.TENANT_BROADCAST)]
        elif audience == "PROJECT" and project_id:
            check_key("projectId", project_id, 64)
            targets = [([project_channel(caller.tenant_id, project_id)], Projection.PROJECT_BROADCAST)]
        elif audience == "USERS" and user_ids:
            if len(user_ids) > 100_000:
                raise Invalid("at most 100000 users per broadcast")
            for user_id in user_ids:
                check_key("userId", user_id, 64)
            channels = [user_channel(caller.tenant_id, u) for u in dict.fromkeys(user_ids)]
            targets = [(channels[i : i + 500], Projection.USER_BROADCAST) for i in range(0, len(channels), 500)]
        else:
            raise Invalid("audience must be SYSTEM, TENANT, PROJECT (with projectId) or USERS (with userIds)")
        aggregate_id = f"{caller.tenant_id}:{broadcast_id}"
        messages = [
            outbox.broadcast_message(
                Aggregate("BROADCAST", aggregate_id, i, channels[0]), channels, projection, payload, now
            )
            for i, (channels, projection) in enumerate(targets, start=1)
        ]

        def work(uow: UnitOfWork) -> dict[str, Any]:
            seen = uow.log.outbox_rows_of("BROADCAST", aggregate_id)
            if not seen:
                uow.log.insert_outbox(messages)
            uow.commit()
            return {"broadcastId": broadcast_id, "messages": len(messages), "duplicate": bool(seen)}

        return self.ctx.db.run(work)
