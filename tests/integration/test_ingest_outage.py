"""No STALE burst after an ingest outage, while one silent worker still goes STALE.

Its own SQLite database: the reconciler's census covers every running step, so other tests' steps
must not be in it. Time passes through the service's clock, never by sleeping.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from observer.loops import LoopConfig, Reconciler
from status.app import commands as c
from status.app.executions import ExecutionContext
from status.app.service import StatusService
from status.domain.auth import Role, ServicePrincipal
from status.infra import migrate
from status.infra import tables as t
from status.infra.db import create_engine
from status.infra.tokens import ExecutionTokens
from status.infra.uow import SqlDatabase
from tests.support.factories import activate, create_task, event, now

STEPS = 50
PRODUCER: dict[str, str] = {}  # execution id -> its worker


class Clock:
    def __init__(self) -> None:
        self.at = now()

    def __call__(self) -> datetime:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


@pytest.fixture
def fleet(tmp_path: Path) -> tuple[StatusService, Clock, list[ExecutionContext]]:
    url = f"sqlite:///{tmp_path / 'outage.sqlite3'}"
    migrate.upgrade(url)
    clock = Clock()
    from status.infra.schemas import JsonSchemaValidator

    service = StatusService(
        SqlDatabase(create_engine(url)),
        execution_tokens=ExecutionTokens("x" * 32),
        validator=JsonSchemaValidator(),
        clock=clock,
    )
    service.install_default_definitions()
    coordinator = ServicePrincipal("coord", "tenant-outage", "content", frozenset({Role.COORDINATOR}))
    executions = []
    for i in range(STEPS):  # 50 running steps on two workers, beating every 5 s, STALE after 20 s
        ctx = activate(
            service,
            coordinator,
            create_task(service, coordinator),
            producer=f"worker-{i % 2}",
            heartbeat_interval_seconds=5,
            heartbeat_timeout_seconds=20,
        )
        service.report_event(service._tokens.verify(ctx.execution_token, clock()), event("STEP_STARTED", 1))
        PRODUCER[ctx.execution_id] = f"worker-{i % 2}"
        executions.append(ctx)
    return service, clock, executions


def _beat(service: StatusService, executions: list[ExecutionContext], seq: int) -> None:
    """Each worker's heartbeat batch for its executions; every beat must land."""
    for producer in ("worker-0", "worker-1"):
        worker = ServicePrincipal(producer, "tenant-outage", "content", frozenset({Role.WORKER}))
        mine = [e for e in executions if PRODUCER[e.execution_id] == producer]
        results = service.record_heartbeats(
            worker, [c.Heartbeat(seq, execution_handle=e.execution_handle) for e in mine]
        )
        assert all(r["accepted"] for r in results["results"]), results


def _stale(service: StatusService) -> set[str]:
    with service.db.engine.connect() as conn:
        return set(conn.scalars(sa.select(t.task_step.c.execution_id).where(t.task_step.c.health == "STALE")))


def test_a_30_s_ingest_outage_produces_no_stale_while_a_silent_worker_still_goes_stale(
    fleet: tuple[StatusService, Clock, list[ExecutionContext]],
) -> None:
    service, clock, executions = fleet
    reconciler = Reconciler(service, LoopConfig(heartbeat_grace_seconds=30))
    clock.advance(31)  # past the reconciler's start-up grace
    _beat(service, executions, 1)
    # The status API is unreachable for every worker for 30 s: nobody's heartbeat lands, and
    # every step passes its 20 s deadline. The reconciler keeps passing every 5 s.
    for _ in range(6):
        clock.advance(5)
        assert reconciler.run_once() == 0
    assert _stale(service) == set()
    # Reports resume — except from one execution whose worker died during the outage.
    dead, alive = executions[0], executions[1:]
    clock.advance(2)
    _beat(service, alive, 2)
    for _ in range(6):  # the grace design D8.7 asks for after reports resume: nothing turns STALE
        clock.advance(5)
        _beat(service, alive, 3 + _)
        assert reconciler.run_once() == 0 or clock.at >= reconciler.quiet_until
    clock.advance(5)
    _beat(service, alive, 20)
    reconciler.run_once()
    assert _stale(service) == {dead.execution_id}  # the silent one, and only it


def test_one_silent_worker_among_beating_ones_goes_stale_without_waiting(
    fleet: tuple[StatusService, Clock, list[ExecutionContext]],
) -> None:
    service, clock, executions = fleet
    reconciler = Reconciler(service, LoopConfig(heartbeat_grace_seconds=30))
    clock.advance(31)
    dead, alive = executions[0], executions[1:]
    _beat(service, executions, 1)
    for seq in range(2, 7):  # 25 s: the others beat every 5 s, one never again
        clock.advance(5)
        _beat(service, alive, seq)
    assert reconciler.run_once() == 1
    assert _stale(service) == {dead.execution_id}
