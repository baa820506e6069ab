"""After a restore, versions jump past what the discarded history may have shown a client: the
next change of every task and workflow is newer than anything issued before (design D7's
merge rule then shows it), and a fence run twice only jumps further."""

from __future__ import annotations

import sqlalchemy as sa

from status.app.service import StatusService
from status.infra import tables
from status.infra.fence import fence_versions
from tests.integration.conftest import Http
from tests.support.flows import activate, create_workflow, report
from tests.support.shards import engine_for


def _versions(engine: sa.Engine, table: sa.Table) -> dict[str, int]:
    with engine.connect() as conn:
        return {row.id: int(row.version) for row in conn.execute(sa.select(table.c.id, table.c.version))}


def test_every_version_jumps_in_batches_and_the_next_change_follows_the_jump(
    http: Http, service: StatusService
) -> None:
    created = [create_workflow(http) for _ in range(5)]  # one owner's: on one shard
    task_id = created[0]["tasks"][0]["taskId"]
    engine = engine_for(service, task_id)  # a restored database: the one shard that was restored
    ctx = activate(http, task_id)
    assert report(http, ctx, "STEP_STARTED", 1).status_code in (200, 202)
    tasks, workflows = _versions(engine, tables.task), _versions(engine, tables.workflow)
    assert len(tasks) >= 5 and len(workflows) >= 5

    moved = fence_versions(engine, jump=1000, batch=2)  # several batches of each table

    assert moved == {"task": len(tasks), "workflow": len(workflows)}
    assert _versions(engine, tables.task) == {k: v + 1000 for k, v in tasks.items()}
    assert _versions(engine, tables.workflow) == {k: v + 1000 for k, v in workflows.items()}
    answer = report(http, ctx, "STEP_PROGRESS", 2, progress={"current": 1, "total": 2})
    assert answer.status_code in (200, 202), answer.text
    assert int(answer.json()["taskVersion"]) == tasks[task_id] + 1001

    fence_versions(engine, jump=5)
    assert _versions(engine, tables.task)[task_id] == tasks[task_id] + 1001 + 5
