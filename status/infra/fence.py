"""The versions' fence after a restore: no version a client may have seen is issued again.

A restore to a point in time discards every change committed after it, but not what clients
saw of those changes: a client holds a task at the version the lost history gave it, and its
merge rule (design D9) ignores anything not newer. The restored database would issue those
same numbers again, to different states — the client would skip them and show the lost state
as current until the task happened to pass its version. So before the service starts on a
restored database every task's and workflow's version jumps by more than the lost history can
have added; the next snapshot or publication of each is then newer than anything a client
holds, and is shown. Done in batches of rows (a Galera write set stays small), each batch its
own transaction: a fence interrupted half-way is run again, and a row jumped twice is still
only newer (versions need only grow).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from status.infra import tables

# More than a task changes in the history a restore can discard: a thousand changes a second
# for eleven days. Versions are 64-bit: nine billion fences fit.
DEFAULT_JUMP = 1_000_000_000


def fence_versions(engine: Engine, jump: int = DEFAULT_JUMP, batch: int = 1000) -> dict[str, int]:
    """Add ``jump`` to every task's and workflow's version; how many rows of each moved."""
    if jump < 1:
        raise ValueError("the jump must be positive")
    moved: dict[str, int] = {}
    for table in (tables.task, tables.workflow):
        moved[table.name] = 0
        after = ""
        while True:
            with engine.begin() as conn:
                ids = list(
                    conn.scalars(sa.select(table.c.id).where(table.c.id > after).order_by(table.c.id).limit(batch))
                )
                if not ids:
                    break
                conn.execute(sa.update(table).where(table.c.id.in_(ids)).values(version=table.c.version + jump))
            moved[table.name] += len(ids)
            after = ids[-1]
    return moved
