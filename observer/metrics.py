"""Prometheus metrics of the observer processes (design D12)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeHistogramMetricFamily
from prometheus_client.registry import Collector

REGISTRY = CollectorRegistry(auto_describe=True)

OUTBOX_ROWS = Gauge("outbox_rows", "Outbox rows by status", ["status"], registry=REGISTRY)
OLDEST_PENDING_AGE = Gauge(
    "outbox_oldest_pending_age_seconds", "Age of the oldest PENDING outbox row", registry=REGISTRY
)
OLDEST_MUST_DELIVER_AGE = Gauge(
    "outbox_oldest_must_deliver_pending_age_seconds",
    "Age of the oldest PENDING must-deliver outbox row (a terminal state, a failure, a notice not yet published)",
    registry=REGISTRY,
)
COMMIT_TO_PUBLISH = Histogram(
    "state_commit_to_publish_seconds",
    "From the outbox row's commit to Centrifugo accepting the publication",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
PUBLISH_SECONDS = Histogram("relay_publish_seconds", "Duration of one Centrifugo batch call", registry=REGISTRY)
PUBLISHED = Counter("relay_published_total", "Publications accepted by Centrifugo", registry=REGISTRY)
CLAIMED = Counter("relay_claimed_total", "Outbox rows read by the relay's claims", registry=REGISTRY)
CLAIM_SECONDS = Histogram(
    "relay_claim_seconds",
    "Duration of one claim of due outbox rows (the relay's read)",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1),
    registry=REGISTRY,
)
COALESCED = Counter("relay_coalesced_total", "Superseded summaries skipped under backlog", registry=REGISTRY)
DEAD = Counter("relay_dead_total", "Outbox rows that went DEAD", registry=REGISTRY)
# Partitions taken from a relay that stopped renewing its lease (it died, or paused past it).
PARTITION_TAKEOVERS = Counter(
    "relay_partition_takeovers_total",
    "Outbox partitions taken over from a relay whose lease ran out",
    registry=REGISTRY,
)
PUBLISH_ERRORS = Counter("relay_publish_errors_total", "Failed publications by class", ["kind"], registry=REGISTRY)
PURGED = Counter("retention_purged_total", "Rows deleted by retention", ["table"], registry=REGISTRY)
ARCHIVED = Counter(
    "retention_archived_rows_total",
    "Rows written to verified archive files before deletion",
    ["table"],
    registry=REGISTRY,
)
ARCHIVE_FAILURES = Counter(
    "retention_archive_failures_total",
    "Archive batches that could not be written or did not read back as written (nothing was deleted)",
    ["table"],
    registry=REGISTRY,
)
RETENTION_WATERMARK = Gauge(
    "retention_watermark_timestamp_seconds",
    "Date of the newest row each retention purge has removed (unix seconds)",
    ["purge"],
    registry=REGISTRY,
)
RETENTION_LAG = Gauge(
    "retention_lag_seconds",
    "How long past its window the oldest row each purge still keeps is (0: on time)",
    ["table"],
    registry=REGISTRY,
)
TABLE_ROWS = Gauge("database_table_rows", "Rows per table (the server's estimate)", ["table"], registry=REGISTRY)
TABLE_BYTES = Gauge(
    "database_table_bytes", "Bytes of data and indexes per table (the server's estimate)", ["table"], registry=REGISTRY
)
# The freshness objective (docs/slo.md): running executions that heartbeat, those past their
# timeout, and how old their last heartbeats are (counted by the reconciler every minute).
RUNNING_HEARTBEATS = Gauge("running_heartbeats", "Running step attempts that heartbeat", registry=REGISTRY)
RUNNING_HEARTBEATS_OVERDUE = Gauge(
    "running_heartbeats_overdue",
    "Running step attempts that heartbeat, silent past their heartbeat timeout (STALE or about to be)",
    registry=REGISTRY,
)
HEARTBEAT_AGE_BUCKETS = (5, 15, 30, 45, 60, 120, 300, 900)


class HeartbeatAges(Collector):
    """``running_heartbeat_age_seconds``: a gauge histogram (a distribution now, not events
    counted over time) of running executions' last heartbeat ages."""

    def __init__(self) -> None:
        self.running = 0
        self.heard_within: dict[int, int] = {}
        self.age_sum = 0.0

    def set(self, running: int, heard_within: dict[int, int], age_sum: float) -> None:
        self.running, self.heard_within, self.age_sum = running, dict(heard_within), age_sum

    def collect(self) -> list[GaugeHistogramMetricFamily]:
        if not self.heard_within:
            return []
        buckets = [(str(float(age)), self.heard_within[age]) for age in sorted(self.heard_within)]
        return [
            GaugeHistogramMetricFamily(
                "running_heartbeat_age_seconds",
                "How long ago running step attempts were last heard (the never heard count in +Inf)",
                buckets=[*buckets, ("+Inf", self.running)],
                gsum_value=self.age_sum,
            )
        ]


HEARTBEAT_AGES = HeartbeatAges()
REGISTRY.register(HEARTBEAT_AGES)
RECONCILER_TRANSITIONS = Counter(
    "reconciler_transitions_total", "Health transitions committed by the reconciler", ["to"], registry=REGISTRY
)
PROJECTOR_FOLDS = Counter("projector_folds_total", "Workflow aggregates recomputed", registry=REGISTRY)
LOOP_ERRORS = Counter("observer_loop_errors_total", "Errors in observer loops", ["loop"], registry=REGISTRY)
RUN_VERDICTS = Counter(
    "run_verdicts_total", "Tasks ended by Temporal's verdict after their run closed", ["status"], registry=REGISTRY
)
RUN_CLOSE_TO_TASK_END = Histogram(
    "run_close_to_task_end_seconds",
    "From a Temporal run's close to the commit ending a task it left open (the run-end objective)",
    buckets=(0.25, 0.5, 1, 2, 5, 10, 30, 60, 300),
    registry=REGISTRY,
)
RUN_HANDOVERS = Counter(
    "run_handovers_total", "Open tasks handed to the run that continues a closed one", registry=REGISTRY
)
STALE_SUSPENDED = Gauge(
    "reconciler_stale_suspended",
    "1 while STALE marking is suspended because no executor anywhere is heard (an ingest outage)",
    registry=REGISTRY,
)
OVERDUE_TASKS = Gauge(
    "overdue_tasks",
    "Tasks RUNNING or STALE beyond their operation's maxRuntimeSeconds or OVERDUE_AFTER_SECONDS",
    registry=REGISTRY,
)

# The database server's own view (status.infra.db_status), read on the gauges pass; names as
# mysqld_exporter's, values as the server reports them (counters since it started).
DB_SERVER_STATUS = {
    "Innodb_row_lock_waits": Gauge(
        "mysql_global_status_innodb_row_lock_waits", "Row lock waits since the server started", registry=REGISTRY
    ),
    "Innodb_row_lock_time": Gauge(
        "mysql_global_status_innodb_row_lock_time",
        "Milliseconds spent waiting for row locks since the server started",
        registry=REGISTRY,
    ),
    "Innodb_deadlocks": Gauge(
        "mysql_global_status_innodb_deadlocks", "Deadlocks since the server started", registry=REGISTRY
    ),
    "Threads_connected": Gauge("mysql_global_status_threads_connected", "Open connections", registry=REGISTRY),
    "Threads_running": Gauge("mysql_global_status_threads_running", "Statements running now", registry=REGISTRY),
}
REPLICA_LAG = Gauge(
    "mysql_replica_lag_seconds",
    "Seconds the watched replica is behind its primary (REPLICA_STATUS_URL; NaN while it does not apply)",
    registry=REGISTRY,
)
REPLICA_RUNNING = Gauge(
    "mysql_replica_running", "1 while the watched replica's IO and SQL threads both run", registry=REGISTRY
)
