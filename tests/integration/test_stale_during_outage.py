"""STALE and the reporting path's silence (design D8.7, D18): the reconciler on a real database,
time passed in.

A fleet of six steps on two producers beats every 5 s with a 10 s timeout. One step's last
beat came 3 s before the others'. When the beats stop everywhere at once — the status API
down for the workers — that step reaches its deadline 7 s into the outage, long before the
fleet's silence is recognised (several intervals): it must not go STALE, nor any other, while
nobody is heard. When the rest of the fleet goes on beating, the same silence is that step's
own and it goes STALE on time; when the whole fleet stays silent past the suspension limit, it
died together and every step goes STALE.

The reconciler reads a census of the whole database, so each test has a database of its own."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from observer.loops import LoopConfig, Reconciler
from status.app import commands as c
from status.app.service import StatusService
from status.domain.auth import Role, ServicePrincipal
from status.infra import migrate
from status.infra import tables as t
from status.infra.db import create_engine
from status.infra.schemas import JsonSchemaValidator
from status.infra.tokens import ExecutionTokens
from status.infra.uow import SqlDatabase
from tests.support.factories import activate, event, wide_task
from tests.support.states import Clock

INTERVAL, TIMEOUT = 5, 10
SUSPENSION_LIMIT = 60.0


@pytest.fixture(params=["mariadb", "sqlite"])
def own_database(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[sa.Engine]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('outage') / 'status.sqlite3'}"
        migrate.upgrade(url)
        engine = create_engine(url)
        yield engine
        engine.dispose()
        return
    url = request.getfixturevalue("scratch_mariadb_url")
    migrate.upgrade(url)
    engine = create_engine(url)
    yield engine
    engine.dispose()


class Fleet:
    """Six running steps of one task, three per producer, and a reconciler on the same clock."""

    def __init__(self, engine: sa.Engine) -> None:
        self.clock = Clock()
        self.service = StatusService(
            SqlDatabase(engine),
            execution_tokens=ExecutionTokens(secrets.token_hex(32)),
            validator=JsonSchemaValidator(),
            clock=self.clock,
        )
        self.service.install_default_definitions()
        tenant = f"tenant-{secrets.token_hex(4)}"
        coordinator = ServicePrincipal("coordinator-1", tenant, "content", frozenset({Role.COORDINATOR}))
        self.engine = engine
        self.task_id = wide_task(self.service, coordinator, 6)
        self.steps = {}
        self.workers = {}
        for n in range(6):
            producer = f"worker-{n % 2}"
            ctx = activate(
                self.service,
                coordinator,
                self.task_id,
                step_id=f"s{n}",
                producer=producer,
                heartbeat_interval_seconds=INTERVAL,
                heartbeat_timeout_seconds=TIMEOUT,
            )
            claims = self.service._tokens.verify(ctx.execution_token, self.service.now())
            self.service.report_event(claims, event("STEP_STARTED", 1))
            self.steps[f"s{n}"] = ctx
            self.workers[f"s{n}"] = ServicePrincipal(producer, tenant, "content", frozenset({Role.WORKER}))
        self.seq = 0
        config = LoopConfig(heartbeat_grace_seconds=0, stale_suspension_limit_seconds=SUSPENSION_LIMIT)
        self.reconciler = Reconciler(self.service, config)

    def at(self, seconds: float) -> Fleet:
        self.clock.seconds = seconds
        return self

    def beat(self, *steps: str) -> None:
        self.seq += 1
        for step in steps:
            ctx = self.steps[step]
            heartbeat = c.Heartbeat(self.seq, execution_handle=ctx.execution_handle)
            result = self.service.record_heartbeats(self.workers[step], [heartbeat])
            assert result["results"][0]["accepted"] is True, result

    def stale(self) -> set[str]:
        with self.engine.connect() as conn:
            return set(
                conn.scalars(
                    sa.select(t.task_step.c.step_id).where(
                        t.task_step.c.task_id == self.task_id, t.task_step.c.health == "STALE"
                    )
                )
            )

    def reconcile_each_second(self, start: int, end: int) -> dict[int, set[str]]:
        """The reconciler's passes from ``start`` to ``end`` (inclusive), and what was STALE after each."""
        seen = {}
        for second in range(start, end + 1):
            self.at(second).reconciler.run_once()
            seen[second] = self.stale()
        return seen


OTHERS = ("s1", "s2", "s3", "s4", "s5")


def test_no_step_goes_stale_while_the_whole_fleet_is_unheard(own_database: sa.Engine) -> None:
    fleet = Fleet(own_database)
    fleet.at(1).beat("s0")
    fleet.at(4).beat(*OTHERS)
    # The beats stop everywhere at 4 s. s0's deadline passes at 11 s; the fleet's silence is
    # recognised some seconds later; nobody is heard before 40 s.
    seen = fleet.reconcile_each_second(5, 39)
    assert all(stale == set() for stale in seen.values()), {s: v for s, v in seen.items() if v}
    # Heartbeats arrive again: everyone beats, nobody went STALE.
    fleet.at(40).beat("s0", *OTHERS)
    assert all(stale == set() for stale in fleet.reconcile_each_second(40, 45).values())


def test_a_step_the_others_were_heard_after_goes_stale_at_its_deadline(own_database: sa.Engine) -> None:
    fleet = Fleet(own_database)
    fleet.at(1).beat("s0")  # and never again: its worker is gone
    for second in (4, 8):
        fleet.at(second).beat(*OTHERS)
        assert all(stale == set() for stale in fleet.reconcile_each_second(second, second + 3).values())
    # s0's deadline passed at 11 s; at 12 s the others are heard after it: its silence is its own.
    fleet.at(12).beat(*OTHERS)
    fleet.reconciler.run_once()
    assert fleet.stale() == {"s0"}


def test_a_fleet_silent_past_the_suspension_limit_goes_stale(own_database: sa.Engine) -> None:
    fleet = Fleet(own_database)
    fleet.at(4).beat("s0", *OTHERS)
    deadline = 4 + TIMEOUT
    seen = fleet.reconcile_each_second(5, deadline + int(SUSPENSION_LIMIT) + 20)
    # Held from the deadline until the silence had lasted the suspension limit...
    assert all(seen[second] == set() for second in range(5, deadline + int(SUSPENSION_LIMIT)))
    # ...then a silent fleet is a silent fleet: every step is STALE.
    assert seen[max(seen)] == {"s0", *OTHERS}
