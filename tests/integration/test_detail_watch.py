"""Detail messages only while someone may follow them (status/app/watching.py): a change nobody
can be watching in detail writes its summary alone; a grant makes every later change write its
detail; a follower back after its grant lapsed gets the current detail first."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from status.app.service import StatusService
from status.domain.auth import ServicePrincipal
from status.domain.model import Progress
from status.domain.watching import FOLLOW_MARGIN
from status.infra import tables as t
from tests.integration.conftest import Http
from tests.support.factories import activate, create_task, event, follow_detail, later
from tests.support.flows import activate as activate_http
from tests.support.flows import create_workflow, report
from tests.support.flows import follow_detail as follow_detail_http
from tests.support.outbox import Publication, publications
from tests.support.shards import engine_for


def _published(service: StatusService, task_id: str) -> list[Publication]:
    with engine_for(service, task_id).connect() as conn:
        return publications(conn, task_id)


def _detail_versions(service: StatusService, task_id: str) -> list[int]:
    return [p.aggregate_version for p in _published(service, task_id) if p.projection == "TASK_DETAIL"]


def test_a_change_nobody_follows_writes_its_summary_alone_and_a_grant_brings_the_detail_back(
    http: Http, service: StatusService
) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    ctx = activate_http(http, task_id)
    started = report(http, ctx, "STEP_STARTED", 1).json()
    unseen = [p for p in _published(service, task_id) if p.aggregate_version == int(started["taskVersion"])]
    assert {p.projection for p in unseen} == {"USER_SUMMARY"}, unseen
    rows_before = len(_published(service, task_id))
    grant = follow_detail_http(http, task_id)  # the owner opens the task: a detail grant
    assert grant["channel"] == f"task_detail:{http.tenant}/{task_id}"
    # Nobody ever followed it, so nobody holds a position to recover from: nothing to catch up.
    assert len(_published(service, task_id)) == rows_before
    progress = report(http, ctx, "STEP_PROGRESS", 2, progress={"current": 3, "total": 10}).json()
    seen = [p for p in _published(service, task_id) if p.aggregate_version == int(progress["taskVersion"])]
    detail = next(p for p in seen if p.projection == "TASK_DETAIL")
    assert detail.channel == grant["channel"] and detail.payload["triggerEvent"]["eventType"] == "STEP_PROGRESS"
    assert {p.projection for p in seen} == {"USER_SUMMARY", "TASK_DETAIL"}


def test_a_follower_back_after_its_grant_lapsed_gets_the_current_detail_before_anything_else(
    service: StatusService, coordinator: ServicePrincipal
) -> None:
    task_id = create_task(service, coordinator)
    claims = service._tokens.verify(activate(service, coordinator, task_id).execution_token, service.now())
    follow_detail(service, task_id, minutes=5)
    service.report_event(claims, event("STEP_STARTED", 1))
    followed = _detail_versions(service, task_id)
    assert followed, "a followed task's change writes its detail"
    # The grant lapsed (and its margin): changes meanwhile write no detail.
    lapsed = later(service, 5 * 60 + FOLLOW_MARGIN.total_seconds() + 1)
    last = lapsed.report_event(claims, event("STEP_PROGRESS", 2, progress=Progress(5, 10)))
    assert _detail_versions(service, task_id) == followed
    # The follower comes back: its grant renewed, the current detail is written at once, so its
    # recovery from the old position ends at the latest state.
    follow_detail(lapsed, task_id)
    caught_up = [p for p in _published(service, task_id) if p.projection == "TASK_DETAIL"][-1]
    assert caught_up.aggregate_version == int(last["taskVersion"]) and caught_up.payload["triggerEvent"] is None
    (step,) = [s for s in caught_up.payload["state"]["steps"] if s["lifecycleStatus"] == "RUNNING"]
    assert step["progress"]["current"] == 5
    # Renewed again with nothing changed: written once per version, not once per renewal.
    follow_detail(lapsed, task_id)
    assert _detail_versions(service, task_id) == [*followed, int(last["taskVersion"])]
    # Followed again: the next change writes its detail.
    after = lapsed.report_event(claims, event("STEP_PROGRESS", 3, progress=Progress(6, 10)))
    assert _detail_versions(service, task_id)[-1] == int(after["taskVersion"])


def test_a_task_from_before_the_follow_marks_publishes_its_detail_as_it_always_did(
    service: StatusService, coordinator: ServicePrincipal
) -> None:
    """A row that says nothing (NULL: written before the service kept this) may be followed: its
    changes write their detail, and its first grant writes its current detail."""
    task_id = create_task(service, coordinator)
    with engine_for(service, task_id).begin() as conn:
        conn.execute(sa.update(t.task).where(t.task.c.id == task_id).values(detail_watched_until=None))
    claims = service._tokens.verify(activate(service, coordinator, task_id).execution_token, service.now())
    started = service.report_event(claims, event("STEP_STARTED", 1))
    assert _detail_versions(service, task_id)[-1] == int(started["taskVersion"])
    rows = len(_published(service, task_id))
    follow_detail(service, task_id)
    catch_up = _published(service, task_id)[rows:]
    assert [(p.projection, p.aggregate_version) for p in catch_up] == [("TASK_DETAIL", int(started["taskVersion"]))]


def test_a_grant_marks_the_task_followed_until_its_expiry_and_a_margin_never_shorter(
    service: StatusService, coordinator: ServicePrincipal
) -> None:
    task_id = create_task(service, coordinator)

    def until() -> object:
        with engine_for(service, task_id).connect() as conn:
            return conn.execute(sa.select(t.task.c.detail_watched_until).where(t.task.c.id == task_id)).scalar()

    expires = service.now().replace(microsecond=0) + timedelta(minutes=5)
    service.watching.watch([task_id], expires)
    assert until() == expires + FOLLOW_MARGIN
    service.watching.watch([task_id], expires - timedelta(minutes=1))  # an older grant's renewal
    assert until() == expires + FOLLOW_MARGIN
