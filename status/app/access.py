"""Access to tasks (design D3AC26): grants and revocations, each a new task version.

A grant sends the current summary to the new viewer: a USER's summary channel,
or the shared channel of a PROJECT or ROLE (its members' connections subscribe
to it; design D9). Revoking sends a ``task.removed`` tombstone to the channel
that received the task.  Reads and subscription tokens check ``task_acl`` at
the time of asking, so a revocation also blocks them.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from status.app import outbox
from status.app.change import Change, write_change
from status.app.context import AppContext, lock_task_for
from status.app.group import Group
from status.app.ports import Stores, UnitOfWork
from status.app.shards import run_for
from status.app.views import load_view
from status.domain import ids
from status.domain.auth import Role, ServicePrincipal
from status.domain.errors import Forbidden, Invalid
from status.domain.ids import is_principal_id
from status.domain.lifecycle import EventType
from status.domain.messages import Message
from status.domain.model import TaskState
from status.domain.projections import Projection, detail_channel, shared_channel, user_channel

# Each PROJECT or ROLE grant adds a channel to every change of the task: the fan-out of one event
# stays bounded (design D9: wider audiences, bounded work).
MAX_GROUP_GRANTS = 20


class AccessCommands:
    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    def grant_access(
        self, caller: ServicePrincipal, task_id: str, principal_type: str, principal_id: str, permission: str = "VIEW"
    ) -> dict[str, Any]:
        """Grant a principal access; the new user's summary channel gets the current state (design D5)."""
        return self._change_access(caller, task_id, principal_type, principal_id, permission, grant=True)

    def revoke_access(
        self, caller: ServicePrincipal, task_id: str, principal_type: str, principal_id: str
    ) -> dict[str, Any]:
        """Revoke access; the user's summary channel gets a ``task.removed`` tombstone (design P26)."""
        return self._change_access(caller, task_id, principal_type, principal_id, "VIEW", grant=False)

    def _change_access(  # noqa: C901
        self,
        caller: ServicePrincipal,
        task_id: str,
        principal_type: str,
        principal_id: str,
        permission: str,
        *,
        grant: bool,
    ) -> dict[str, Any]:
        if not (caller.has(Role.COORDINATOR) or caller.has(Role.ADMIN)):
            raise Forbidden("changing access needs the COORDINATOR or ADMIN role")
        if principal_type not in ("USER", "PROJECT", "ROLE"):
            raise Invalid("principalType must be USER, PROJECT or ROLE")
        if permission not in ("VIEW", "OPERATE", "ADMIN"):
            raise Invalid("permission must be VIEW, OPERATE or ADMIN")
        if not is_principal_id(principal_id):  # it becomes part of channel names
            raise Invalid("principalId must be 1-64 of A-Z a-z 0-9 . _ @ + = | - starting with a letter or digit")

        def work(uow: UnitOfWork) -> dict[str, Any]:
            now = self.ctx.now()
            task = lock_task_for(uow, caller.tenant_id, caller.authority_scope, task_id)
            row = uow.access.grant_of(task_id, principal_type, principal_id)
            active = row is not None and row.revoked_at is None
            if grant and active and row is not None and row.permission == permission:
                uow.commit()
                return {"taskId": task_id, "taskVersion": str(task.version), "changed": False}
            if not grant and not active:
                uow.commit()
                return {"taskId": task_id, "taskVersion": str(task.version), "changed": False}
            if grant and not active and principal_type != "USER":
                groups = outbox.groups_of(uow.tasks.acl_grants(task_id))
                if len(groups) >= MAX_GROUP_GRANTS:
                    raise Invalid(
                        f"a task may be shared with at most {MAX_GROUP_GRANTS} projects and roles; revoke one first"
                    )
            if grant and row is None:
                uow.access.insert_grant(task_id, task.tenant_id, principal_type, principal_id, permission, now)
            elif grant:
                uow.access.renew_grant(task_id, principal_type, principal_id, permission)
            else:
                uow.access.revoke_grant(task_id, principal_type, principal_id, now)
            task = replace(task, version=task.version + 1, updated_at=now)
            uow.tasks.update(task)
            what = {
                "principalType": principal_type,
                "principalId": principal_id,
                "change": "GRANT" if grant else "REVOKE",
                "permission": permission,
            }
            group = Group()
            change = Change.of_service(
                task, load_view(uow, task), EventType.TASK_ACCESS_CHANGED, caller.producer_id, what, now
            )
            write_change(self.ctx, uow, group, change)
            if not grant:
                group.outbox = [*self._revoked_messages(uow, task, principal_type, principal_id, group.messages(), now)]
            group.flush(uow)
            uow.commit()
            return {"taskId": task_id, "taskVersion": str(task.version), "changed": True}

        return run_for(self.ctx.shards, ids.bucket_hint(task_id), work)

    @staticmethod
    def _revoked_messages(
        stores: Stores,
        task: TaskState,
        principal_type: str,
        principal_id: str,
        messages: list[Message],
        now: datetime,
    ) -> list[Message]:
        """What a revoke tells the world besides the change itself: live data stops at once.

        Whoever may have lost the task loses its detail subscriptions (Centrifugo ends them,
        through the relay, ahead of this change's own detail message on that channel) and
        their SSE watch entries for it. For a USER that is the user; for a PROJECT or ROLE
        the service does not know the members, so it is every current holder of the task's
        detail channel other than the owner and users granted directly — one who can still
        see the task through another grant subscribes again (tokens re-check the ACL).
        A USER also gets a ``task.removed`` tombstone on their summary channel, a PROJECT or
        ROLE on its shared channel (where it received the task); a member who still sees the task
        another way reads it again (the client asks for a removed task's snapshot).
        """
        event_id = messages[0].event_id or ""
        channel = detail_channel(task.tenant_id, task.task_id)
        if principal_type == "USER":
            users = [] if principal_id == task.owner_id else [principal_id]
        else:
            direct = stores.access.users_granted(task.task_id)
            holders = stores.access.subscribers_of(task.tenant_id, channel)
            users = sorted(holders - direct - {task.owner_id})
        if users:
            messages = [outbox.unsubscribe(task, users, event_id, now), *messages]
            stores.access.drop_subscriptions(task.tenant_id, users, channel)
        if principal_type == "USER" and users:
            own = user_channel(task.tenant_id, principal_id)
            messages.append(outbox.removal(task, own, Projection.USER_SUMMARY, event_id, now))
        elif principal_type != "USER":
            shared = shared_channel(task.tenant_id, principal_type, principal_id)
            messages.append(outbox.removal(task, shared, Projection.USER_SUMMARY, event_id, now))
        return messages
