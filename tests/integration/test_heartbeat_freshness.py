"""The freshness objective's measure (docs/slo.md): how many running executions heartbeat, how many
are silent past their timeout, and how long ago each was last heard — counted in one read, and
exported by the reconciler as gauges and a gauge histogram."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from observer import metrics
from observer.loops import LoopConfig, Reconciler
from status.app import commands as c
from status.app.service import StatusService
from status.domain.auth import ServicePrincipal
from status.domain.clock import utcnow
from status.infra import migrate
from status.infra.db import create_engine
from status.infra.schemas import JsonSchemaValidator
from status.infra.tokens import ExecutionTokens
from status.infra.uow import SqlDatabase
from tests.support.factories import activate, create_task, event
from tests.support.processes import FAST_LANE


@pytest.fixture(params=["sqlite"] if FAST_LANE else ["sqlite", "mariadb"])
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database of this test's own: the counts are of every running execution in it."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fresh.sqlite3'}"
    return str(request.getfixturevalue("scratch_mariadb_url"))


def test_running_executions_are_counted_by_how_long_ago_they_were_heard(
    empty_database: str, coordinator: ServicePrincipal, worker: ServicePrincipal, execution_tokens: ExecutionTokens
) -> None:
    url = empty_database
    migrate.upgrade(url)
    engine = create_engine(url)
    clock = [utcnow()]

    def service_at() -> StatusService:
        svc = StatusService(
            SqlDatabase(engine),
            execution_tokens=execution_tokens,
            validator=JsonSchemaValidator(),
            clock=lambda: clock[0],
        )
        return svc

    service = service_at()
    service.install_default_definitions()
    beating: list[c.Heartbeat] = []
    for n in range(3):  # three executions, 5 s beats, silent after 20 s
        ctx = activate(
            service,
            coordinator,
            create_task(service, coordinator),
            heartbeat_interval_seconds=5,
            heartbeat_timeout_seconds=20,
        )
        service.report_event(service._tokens.verify(ctx.execution_token, clock[0]), event("STEP_STARTED", 1))
        beating.append(c.Heartbeat(n + 1, execution_handle=ctx.execution_handle))
    producer = ServicePrincipal("document-parser", worker.tenant_id, worker.authority_scope, worker.roles)
    assert all(r["accepted"] for r in service.record_heartbeats(producer, beating)["results"])

    def freshness(at: datetime) -> tuple[int, int, dict[int, int]]:
        clock[0] = at
        fresh = service.heartbeat_freshness((5, 30, 60))
        return fresh.running, fresh.overdue, fresh.heard_within

    start = clock[0]
    assert freshness(start + timedelta(seconds=1)) == (3, 0, {5: 3, 30: 3, 60: 3})
    # One keeps beating; two fall silent past their 20 s timeout.
    clock[0] = start + timedelta(seconds=25)
    assert service.record_heartbeats(producer, [c.Heartbeat(9, execution_handle=beating[0].execution_handle)])[
        "results"
    ][0]["accepted"]
    assert freshness(start + timedelta(seconds=26)) == (3, 2, {5: 1, 30: 3, 60: 3})
    assert freshness(start + timedelta(seconds=44)) == (3, 2, {5: 0, 30: 1, 60: 3})
    assert abs(service.heartbeat_freshness((5,)).age_sum_seconds - (19 + 44 + 44)) < 0.01

    Reconciler(service, LoopConfig())._count_overdue(clock[0])  # what the observer exports
    assert metrics.REGISTRY.get_sample_value("running_heartbeats") == 3
    assert metrics.REGISTRY.get_sample_value("running_heartbeats_overdue") == 2
    assert metrics.REGISTRY.get_sample_value("running_heartbeat_age_seconds_bucket", {"le": "30.0"}) == 1
    assert metrics.REGISTRY.get_sample_value("running_heartbeat_age_seconds_bucket", {"le": "+Inf"}) == 3
    exposed = generate_latest(metrics.REGISTRY).decode()  # what Prometheus scrapes
    assert "running_heartbeat_age_seconds_gcount 3.0" in exposed and "running_heartbeats_overdue 2.0" in exposed
    gsum = metrics.REGISTRY.get_sample_value("running_heartbeat_age_seconds_gsum")
    assert gsum is not None and abs(gsum - 107) < 0.01
    engine.dispose()
