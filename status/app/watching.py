"""Detail messages only while someone may follow them (docs/architecture.md, "Detail messages
only while watched").

Every change used to write its task's detail message, though a detail channel is followed only
by a client holding a detail grant, for the few tasks a user has open: the rest were published
into histories nobody reads. A change now writes its detail message only while the task's row
says a grant may be in use (``task.detail_watched_until``), which the change reads with its lock.

The trap: a follower must never be left behind by the changes it did not receive. A grant is
given (or renewed) in its own transaction first; then, under the task's row lock, the row is
marked followed and, if changes may have gone unpublished since a client last could have
followed it, the task's current detail is written to the outbox. The row lock orders the two
against every change: a change locked before the mark committed before the detail was read (so
that detail includes it), and a change locked after it reads the mark (so it writes its detail
message). A follower coming back after its grant lapsed renews it, which writes the current
detail: recovery from its old position then ends at the latest state, which is all a client
needs of a channel whose every message carries the full state and its version. A first
follower has no position to recover from: it reads a snapshot when it subscribes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from status.app import outbox
from status.app.context import AppContext
from status.app.ports import UnitOfWork
from status.app.shards import run_for
from status.app.views import load_view
from status.domain import ids
from status.domain.watching import catch_up_needed, followed, followed_until


def unwatched(watched_until: Mapping[str, datetime | None], now: datetime) -> set[str]:
    """The tasks among these whose detail channel nobody may follow ``now``."""
    return {task_id for task_id, until in watched_until.items() if not followed(until, now)}


class DetailWatch:
    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    def watch(self, task_ids: Iterable[str], grant_expires: datetime) -> None:
        """Grants to follow these tasks' detail channels were given (committed) until
        ``grant_expires``: mark each task followed and, where changes may have gone unpublished
        since a client last could follow it, write its current detail message."""
        until = followed_until(grant_expires)
        for task_id in dict.fromkeys(task_ids):

            def work(uow: UnitOfWork, task_id: str = task_id) -> None:
                row = uow.tasks.lock_version(task_id, "")
                if row is None:
                    return  # gone since the grant: nothing to follow
                uow.tasks.watch_detail(task_id, until)
                now = self.ctx.now()
                if not catch_up_needed(row[3], now):
                    uow.commit()
                    return
                view = self.ctx.steps.get(task_id, row[0])
                if view is None:
                    task = uow.tasks.load(task_id)
                    assert task is not None  # locked above
                    view = load_view(uow, task)
                history = self.ctx.durations.for_task(uow, view.task, view.steps)
                message = outbox.detail_message(view.task, view.steps, now, history)
                # Written once per version: a renewal with nothing changed since finds it there
                # (in the channel's history, or on its way).
                if not uow.log.outbox_holds(message.aggregate):
                    uow.log.insert_outbox([message])
                uow.commit()

            run_for(self.ctx.shards, ids.bucket_hint(task_id), work)
