"""Observer passes without Centrifugo: projector folds, reconciler grace, retention (design D8.7, D8.15, D8.16)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa

from observer.loops import LoopConfig, Reconciler, Retention
from observer.relay import OutboxRelay
from status.app import commands as c
from status.app.service import StatusService
from status.domain.aggregate import fold
from status.domain.auth import ServicePrincipal
from status.domain.clock import utcnow
from status.domain.lifecycle import Health, Lifecycle
from status.domain.retention import RetentionPolicy
from status.infra import tables as t
from tests.support.factories import activate, create_task, event, later
from tests.support.outbox import message
from tests.support.shards import engine_for
from tests.support.wiring import projector_for


def test_fold_is_descriptive_and_never_decides() -> None:
    running = (Lifecycle.RUNNING, Health.HEALTHY)
    failed = (Lifecycle.FAILED, Health.HEALTHY)
    done = (Lifecycle.SUCCEEDED, Health.HEALTHY)
    assert fold([])[0].value == "PENDING"
    lifecycle, health, aggregate = fold([running, failed])
    assert (lifecycle.value, health.value) == ("RUNNING", "DEGRADED")  # a failed task doesn't end the others
    assert aggregate["counts"]["FAILED"] == 1 and aggregate["percent"] == 50.0
    assert fold([done, done])[0].value == "SUCCEEDED"
    assert fold([done, failed])[0].value == "FAILED"
    # Once all have ended, the gravest ending: FAILED, then TIMED_OUT, then CANCELLED.
    timed_out = (Lifecycle.TIMED_OUT, Health.HEALTHY)
    cancelled = (Lifecycle.CANCELLED, Health.HEALTHY)
    assert fold([timed_out])[0].value == "TIMED_OUT"
    assert fold([done, timed_out, cancelled])[0].value == "TIMED_OUT"
    assert fold([timed_out, failed])[0].value == "FAILED"
    assert fold([done, cancelled])[0].value == "CANCELLED"
    assert fold([running, timed_out])[0].value == "RUNNING"


def test_projector_bumps_the_workflow_once_per_real_change(
    service: StatusService, coordinator: ServicePrincipal
) -> None:
    task_id = create_task(service, coordinator)
    engine = engine_for(service, task_id)  # its shard's: the observer's parts work per shard
    projector = projector_for(engine)
    while projector.run_once():
        pass
    with engine.connect() as conn:
        workflow_id = conn.execute(sa.select(t.task.c.workflow_id).where(t.task.c.id == task_id)).scalar_one()
        before = conn.execute(sa.select(t.workflow.c.version).where(t.workflow.c.id == workflow_id)).scalar_one()
    ctx = activate(service, coordinator, task_id)
    claims = service._tokens.verify(ctx.execution_token, service.now())
    service.report_event(claims, event("STEP_STARTED", 1))
    service.report_event(claims, event("STEP_PROGRESS", 2))
    assert projector.run_once() >= 1
    assert projector.run_once() == 0  # the feed is consumed
    with engine.connect() as conn:
        after = conn.execute(
            sa.select(t.workflow.c.version, t.workflow.c.lifecycle_status).where(t.workflow.c.id == workflow_id)
        ).one()
        left = conn.execute(
            sa.select(sa.func.count())
            .select_from(t.workflow_change)
            .where(t.workflow_change.c.workflow_id == workflow_id)
        ).scalar_one()
    assert after == (before + 1, "RUNNING") and left == 0


def test_only_lifecycle_and_health_changes_feed_the_projector(
    service: StatusService, coordinator: ServicePrincipal
) -> None:
    """Progress cannot move a workflow's aggregate, so it costs the projector nothing."""
    task_id = create_task(service, coordinator)
    engine = engine_for(service, task_id)  # its shard's: the observer's parts work per shard
    wc = t.workflow_change

    def feed() -> int:
        with engine.connect() as conn:
            return int(
                conn.execute(sa.select(sa.func.count()).select_from(wc).where(wc.c.task_id == task_id)).scalar_one()
            )

    ctx = activate(service, coordinator, task_id)
    claims = service._tokens.verify(ctx.execution_token, service.now())
    fed = feed()
    service.report_event(claims, event("STEP_STARTED", 1))  # the task goes RUNNING
    assert feed() == fed + 1
    for seq in range(2, 6):
        service.report_event(claims, event("STEP_PROGRESS", seq))
    assert feed() == fed + 1
    service.report_event(claims, event("STEP_COMPLETED", 6))  # the task finishes (or moves on): fed again
    with engine.connect() as conn:
        lifecycle = conn.execute(sa.select(t.task.c.lifecycle_status).where(t.task.c.id == task_id)).scalar_one()
    assert feed() == fed + (2 if lifecycle != "RUNNING" else 1)


def test_no_false_stale_burst_after_a_restart(
    service: StatusService, coordinator: ServicePrincipal, worker: ServicePrincipal
) -> None:
    """After the observer (re)starts or the database comes back, heartbeats that could not land must
    not turn into STALE at once: the reconciler waits a grace period first (design D8.7, P23)."""
    task_id = create_task(service, coordinator)
    ctx = activate(service, coordinator, task_id, heartbeat_interval_seconds=5, heartbeat_timeout_seconds=20)
    claims = service._tokens.verify(ctx.execution_token, service.now())
    service.report_event(claims, event("STEP_STARTED", 1))
    two_minutes_on = later(service, 120)  # the step is overdue from here
    # The rest of the fleet kept beating through the restart (no ingest outage): a neighbour's beat.
    neighbour = activate(
        service, coordinator, create_task(service, coordinator), producer="neighbour", heartbeat_interval_seconds=5
    )
    service.report_event(service._tokens.verify(neighbour.execution_token, service.now()), event("STEP_STARTED", 1))
    beating = ServicePrincipal("neighbour", worker.tenant_id, worker.authority_scope, worker.roles)
    beat = two_minutes_on.record_heartbeats(beating, [c.Heartbeat(1, execution_handle=neighbour.execution_handle)])
    assert beat["results"][0]["accepted"]
    restarted = Reconciler(two_minutes_on, LoopConfig(heartbeat_grace_seconds=3600))
    assert restarted.run_once() == 0  # within the grace period: nothing turns STALE
    settled = Reconciler(two_minutes_on, LoopConfig(heartbeat_grace_seconds=0))
    assert settled.run_once() >= 1  # after it, the overdue execution does
    settled.database_failed()
    settled.config.heartbeat_grace_seconds = 3600
    settled.database_failed()
    assert settled.run_once() == 0  # and a database error starts a new grace period


def test_retention_purges_old_rows_in_bounded_batches(
    service: StatusService, coordinator: ServicePrincipal, tmp_path: Path
) -> None:
    task_id = create_task(service, coordinator)
    engine = engine_for(service, task_id)  # its shard's: the observer's parts work per shard
    relay = OutboxRelay(engine, None, "retention", clock=lambda: utcnow() + timedelta(days=60))  # type: ignore[arg-type]
    with engine.begin() as conn:
        conn.execute(
            sa.update(t.task_outbox)
            .where(t.task_outbox.c.aggregate_id == task_id)
            .values(status="PUBLISHED", published_at=utcnow())
        )
    retention = Retention(
        engine,
        relay,
        LoopConfig(
            retention=RetentionPolicy(outbox=timedelta(days=1), dedup=timedelta(days=7), events=timedelta(days=30)),
            archive_dir=tmp_path,
            retention_batch=1,
            retention_batches_per_pass=1,
        ),
    )
    purged = retention.run_once()
    # Old rows exist in each of these tables; each purge is bounded by the batch.
    assert [purged[name] for name in ("task_outbox", "task_event_dedup", "task_event_log")] == [1, 1, 1]
    retention.config.retention_batch = 100_000
    retention.run_once()
    with engine.connect() as conn:
        remaining = conn.execute(
            sa.select(sa.func.count()).select_from(t.task_outbox).where(t.task_outbox.c.aggregate_id == task_id)
        ).scalar_one()
    assert remaining == 0


def test_retention_says_how_far_each_purge_is_behind_and_how_large_the_tables_are(
    service: StatusService, coordinator: ServicePrincipal, tmp_path: Path
) -> None:
    from observer import metrics

    def lag(table: str) -> float:
        value = metrics.REGISTRY.get_sample_value("retention_lag_seconds", {"table": table})
        assert value is not None
        return value

    task_id = create_task(service, coordinator)
    engine = engine_for(service, task_id)  # its shard's: the observer's parts work per shard
    ctx = activate(service, coordinator, task_id)
    claims = service._tokens.verify(ctx.execution_token, service.now())
    for seq, kind in enumerate(("STEP_STARTED", "STEP_PROGRESS", "STEP_COMPLETED"), start=1):
        service.report_event(claims, event(kind, seq))
    later = utcnow() + timedelta(days=60)
    relay = OutboxRelay(engine, None, "retention", clock=lambda: later)  # type: ignore[arg-type]
    config = LoopConfig(
        retention=RetentionPolicy(dedup=timedelta(days=7), events=timedelta(days=30)),
        archive_dir=tmp_path,
        retention_batch=1,
        retention_batches_per_pass=1,
    )
    retention = Retention(engine, relay, config)
    with engine.begin() as conn:
        # Another test's purge, on a clock far ahead, may have left a watermark past these rows
        # (a purge scans from its watermark): start the purges over, as on a fresh database.
        conn.execute(sa.delete(t.retention_watermark))
    retention.run_once()  # one row of each (more are past their windows)
    # What is left is at least 53 days past the dedup results' 7-day window (this test's rows; a
    # shared database may hold older ones), at least 30 past the event log's 30.
    assert lag("task_event_dedup") > 52 * 86400
    assert lag("task_event_log") > 29 * 86400
    if engine.dialect.name == "mysql":
        rows = metrics.REGISTRY.get_sample_value("database_table_rows", {"table": "task"})
        size = metrics.REGISTRY.get_sample_value("database_table_bytes", {"table": "task_event_log"})
        assert rows is not None and size is not None and size > 0
    retention.config.retention_batch = 100_000
    retention.run_once()
    assert lag("task_event_dedup") == 0 and lag("task_event_log") == 0  # caught up


def test_the_gauges_tell_apart_what_users_must_see_from_what_may_be_coalesced(tmp_path: Path) -> None:
    """``outbox_oldest_must_deliver_pending_age_seconds`` backs the alert "a terminal state is committed
    but not published"."""
    from status.infra import migrate
    from status.infra.db import create_engine
    from status.infra.stores import sql

    url = f"sqlite:///{tmp_path / 'gauges.sqlite3'}"
    migrate.upgrade(url)
    engine = create_engine(url)
    now = utcnow()
    with engine.begin() as conn:
        sql.insert_outbox(conn, [message("tsk_progress", 1, "task_user:t/u", created_at=now - timedelta(seconds=90))])
        sql.insert_outbox(
            conn,
            [message("tsk_failed", 1, "task_user:t/u", must_deliver=True, created_at=now - timedelta(seconds=30))],
        )
    gauges = OutboxRelay(engine, None, "gauges", clock=lambda: now).update_gauges()  # type: ignore[arg-type]
    assert gauges["pending"] == 2
    assert 89 <= gauges["oldest_pending_age_seconds"] <= 91
    assert 29 <= gauges["oldest_must_deliver_age_seconds"] <= 31
    engine.dispose()
