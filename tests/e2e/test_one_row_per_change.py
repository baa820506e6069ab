"""One outbox row per change: its messages stored once, every subscriber still gets its full projection.

A change seen by three users, two projects and its detail channel is one row; the relay publishes
each of its channels (a broadcast to the summary channels, a versioned publish to the detail
channel) with the same full state and version as one row per channel gave them.
"""

from __future__ import annotations

import sqlalchemy as sa

from observer.relay import OutboxRelay
from status.infra import tables as t
from status.infra.centrifugo import CentrifugoApi
from tests.integration.conftest import Http
from tests.support.flows import activate, create_workflow, follow_detail, report
from tests.support.outbox import publications
from tests.support.processes import CentrifugoNode

ot = t.task_outbox


async def _drain(relay: OutboxRelay) -> None:
    while (await relay.run_once()).claimed:
        pass


async def test_a_change_seen_by_three_users_and_two_projects_is_one_row_and_reaches_every_channel(
    api: Http, relay: OutboxRelay, centrifugo: CentrifugoNode, e2e_engine: sa.Engine
) -> None:
    task_id = create_workflow(api)["tasks"][0]["taskId"]
    for kind, principal in (("USER", "user-2"), ("USER", "user-3"), ("PROJECT", "p1"), ("PROJECT", "p2")):
        granted = api.client.put(
            f"/internal/v1/tasks/{task_id}/acl/{kind}/{principal}", json={}, headers=api.coordinator
        )
        assert granted.status_code == 200
    follow_detail(api, task_id)  # the owner has the task's detail open
    ctx = activate(api, task_id)
    assert report(api, ctx, "STEP_STARTED", 1).status_code == 200
    accepted = report(api, ctx, "STEP_PROGRESS", 2, progress={"current": 3, "total": 10})
    assert accepted.status_code == 200
    version = int(accepted.json()["taskVersion"])

    with e2e_engine.connect() as conn:
        rows = conn.execute(
            sa.select(sa.func.count()).where(ot.c.aggregate_id == task_id, ot.c.aggregate_version == version)
        ).scalar_one()
        stored = publications(conn, task_id, version=version)
    assert rows == 1
    tenant = api.tenant
    summary_channels = {f"task_user:{tenant}/{u}" for u in ("user-1", "user-2", "user-3")}
    summary_channels |= {f"task_shared:{tenant}/project.{p}" for p in ("p1", "p2")}
    detail = f"task_detail:{tenant}/{task_id}"
    assert {(p.projection, p.channel) for p in stored} == {("USER_SUMMARY", ch) for ch in summary_channels} | {
        ("TASK_DETAIL", detail)
    }

    await _drain(relay)
    history = CentrifugoApi(centrifugo.api_url, centrifugo.api_key)
    try:
        for p in stored:
            sent = [
                d
                for d in await history.history(p.channel, 100)
                if d.get("taskId") == task_id and d.get("taskVersion") == str(version)
            ]
            # exactly once on each channel, with the full projection the row holds
            assert sent == [p.payload], p.channel
    finally:
        await history.aclose()
    summary = next(p.payload for p in stored if p.projection == "USER_SUMMARY")
    detail_payload = next(p.payload for p in stored if p.projection == "TASK_DETAIL")
    assert summary["kind"] == "task.summary" and summary["currentStep"]["progress"]["current"] == 3
    assert detail_payload["kind"] == "task.detail" and detail_payload["state"]["steps"]
