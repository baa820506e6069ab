"""The database's part of /metrics: transaction latency
and pool waits from the service's own units of work, and lock waits, deadlocks and replication from
the server itself (read by the observer; names as mysqld_exporter's)."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest
import sqlalchemy as sa

from observer import metrics as observer_metrics
from observer.database import DatabaseWatch
from observer.relay import OutboxRelay
from status.app.service import StatusService
from status.domain.auth import ServicePrincipal
from status.infra import db_status
from status.infra import tables as t
from status.infra.metrics import REGISTRY
from tests.support.factories import create_task


def _sample(registry: Any, name: str, labels: dict[str, str] | None = None) -> float:
    value = registry.get_sample_value(name, labels or {})
    return float(value) if value is not None else 0.0


def test_units_of_work_report_their_latency_and_pool_waits(
    service: StatusService, coordinator: ServicePrincipal
) -> None:
    committed = _sample(REGISTRY, "db_transaction_seconds_count", {"outcome": "committed"})
    failed = _sample(REGISTRY, "db_transaction_seconds_count", {"outcome": "failed"})
    checkouts = _sample(REGISTRY, "db_pool_checkout_seconds_count")
    create_task(service, coordinator)
    assert _sample(REGISTRY, "db_transaction_seconds_count", {"outcome": "committed"}) > committed
    assert _sample(REGISTRY, "db_pool_checkout_seconds_count") > checkouts

    def broken(uow: Any) -> None:
        uow.conn.exec_driver_sql("SELECT 1")
        raise LookupError("a fault in the work")

    with pytest.raises(LookupError):
        service.db.run(broken)
    assert _sample(REGISTRY, "db_transaction_seconds_count", {"outcome": "failed"}) == failed + 1


def test_the_pool_is_on_metrics(mariadb_url: str) -> None:
    from status.infra.db import create_engine

    engine = create_engine(mariadb_url)
    limit = _sample(REGISTRY, "db_pool_connections", {"state": "limit"})
    assert limit >= 40  # pool_size + max_overflow of every engine this process made
    with engine.connect():
        in_use = _sample(REGISTRY, "db_pool_connections", {"state": "in_use"})
        assert in_use >= 1
    assert _sample(REGISTRY, "db_pool_connections", {"state": "in_use"}) == in_use - 1
    engine.dispose()


def test_the_relay_counts_its_claims(engine: sa.Engine, service: StatusService, coordinator: ServicePrincipal) -> None:
    create_task(service, coordinator)
    relay = OutboxRelay(engine, None, "claims-metric")  # type: ignore[arg-type]  # claims, never publishes
    claims = _sample(observer_metrics.REGISTRY, "relay_claim_seconds_count")
    rows = relay.claim()
    relay.release_partitions()
    assert _sample(observer_metrics.REGISTRY, "relay_claim_seconds_count") == claims + 1
    assert _sample(observer_metrics.REGISTRY, "relay_claimed_total") >= len(rows) > 0


def test_lock_waits_and_deadlocks_come_from_the_server(mariadb_url: str) -> None:
    """A real row-lock wait and a real deadlock, and the observer's gauges move with the server's counters."""
    engine = sa.create_engine(mariadb_url, isolation_level="READ COMMITTED")
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE IF NOT EXISTS lock_probe (id INT PRIMARY KEY, n INT) ENGINE=InnoDB"))
        conn.execute(sa.text("INSERT IGNORE INTO lock_probe VALUES (1, 0), (2, 0)"))
    watch = DatabaseWatch(engine)
    before = watch.run_once()
    assert {"Innodb_row_lock_waits", "Innodb_deadlocks", "Threads_connected"} <= set(before)

    # A deadlock: each transaction holds one row and asks for the other's.
    both_hold = threading.Barrier(2)
    outcomes: list[str] = []

    def cross(first: int, second: int) -> None:
        with engine.connect() as conn:
            conn.execute(sa.text("SET SESSION innodb_lock_wait_timeout = 10"))
            conn.commit()  # (SQLAlchemy began a transaction for the SET)
            tx = conn.begin()
            conn.execute(sa.text("UPDATE lock_probe SET n = n + 1 WHERE id = :i"), {"i": first})
            both_hold.wait(10)
            try:
                conn.execute(sa.text("UPDATE lock_probe SET n = n + 1 WHERE id = :i"), {"i": second})
                tx.commit()
                outcomes.append("committed")
            except sa.exc.OperationalError as exc:
                outcomes.append("deadlock" if "1213" in str(exc.orig) else str(exc.orig))
                tx.rollback()

    threads = [threading.Thread(target=cross, args=pair) for pair in ((1, 2), (2, 1))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == ["committed", "deadlock"], outcomes
    after = watch.run_once()
    assert after["Innodb_deadlocks"] >= before["Innodb_deadlocks"] + 1
    assert after["Innodb_row_lock_waits"] >= before["Innodb_row_lock_waits"] + 1  # the one that waited
    assert _sample(observer_metrics.REGISTRY, "mysql_global_status_innodb_deadlocks") == after["Innodb_deadlocks"]
    with engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE lock_probe"))
    engine.dispose()


def test_a_watched_server_that_does_not_replicate_is_reported_as_not_running(mariadb_url: str) -> None:
    """REPLICA_STATUS_URL names the replica to watch; this server replicates from no one, so the
    alert that replication stopped would fire — as it must for a replica that lost its primary."""
    engine = sa.create_engine(mariadb_url)
    assert db_status.replica_status(engine) is None
    observer_metrics.REPLICA_RUNNING.set(1)
    status = DatabaseWatch(engine, replica=engine).run_once()
    assert status["replica_running"] == 0.0 and math.isnan(status["replica_lag_seconds"])
    assert _sample(observer_metrics.REGISTRY, "mysql_replica_running") == 0.0
    engine.dispose()


def test_replication_status_reads_either_generation_of_column_names() -> None:
    assert db_status.replica_status_of(None) is None
    # What MariaDB's SHOW SLAVE STATUS and MySQL 8's SHOW REPLICA STATUS say, in their own words.
    mariadb = {"Slave_IO_Running": "Yes", "Slave_SQL_Running": "Yes", "Seconds_Behind_Master": 7}
    mysql = {"Replica_IO_Running": "Yes", "Replica_SQL_Running": "No", "Seconds_Behind_Source": None}
    assert db_status.replica_status_of(mariadb) == db_status.ReplicaStatus(True, True, 7.0)
    assert db_status.replica_status_of(mysql) == db_status.ReplicaStatus(True, False, None)


def test_the_gauges_pass_of_the_temporal_mode_observer_keeps_the_outbox_gauges(
    engine: sa.Engine, service: StatusService, coordinator: ServicePrincipal
) -> None:
    """In --mode temporal (the default) the relay pass does the housekeeping ObserverLoops does:
    without it the outbox-age alerts would never fire."""
    from observer.runner import Observer

    create_task(service, coordinator)
    with engine.connect() as conn:
        pending = conn.execute(
            sa.select(sa.func.count()).select_from(t.task_outbox).where(t.task_outbox.c.status == "PENDING")
        ).scalar_one()
    relay = OutboxRelay(engine, None, "housekeeping")  # type: ignore[arg-type]
    observer = Observer.__new__(Observer)
    observer.relay, observer.database = relay, DatabaseWatch(engine)
    observer_metrics.OUTBOX_ROWS.labels(status="pending").set(-1)
    observer.housekeeping()
    assert _sample(observer_metrics.REGISTRY, "outbox_rows", {"status": "pending"}) == pending
