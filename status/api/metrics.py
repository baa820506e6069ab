"""Prometheus metrics of the status API (SPEC §12); one registry per process."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from status.infra.metrics import REGISTRY

EVENTS = Counter(
    "task_status_events_total", "Events by result and rejection code", ["result", "code"], registry=REGISTRY
)
INGEST_SECONDS = Histogram(
    "task_status_ingest_seconds",
    "HTTP event ingest latency (request to commit)",
    buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
    registry=REGISTRY,
)
# Seed §14.3: one operation's schema rejections or error codes spiking. Only executions' reports
# (their operation is the one their token was issued for: a registered definition, a bounded set).
REJECTIONS_BY_OPERATION = Counter(
    "task_status_rejections_by_operation_total",
    "Executions' rejected reports by operation and rejection code",
    ["operation", "code"],
    registry=REGISTRY,
)
HEARTBEATS = Counter("task_status_heartbeats_total", "Heartbeat items by result", ["result"], registry=REGISTRY)
READY = Gauge(
    "task_status_ready", "1 while this replica's /readyz answers ready (last health check)", registry=REGISTRY
)
DRAINING = Gauge("task_status_draining", "1 once this replica drains (SIGTERM received)", registry=REGISTRY)
GRPC_CALLS = Counter(
    "task_status_grpc_calls_total",
    "gRPC adapter calls by method and result code",
    ["method", "code"],
    registry=REGISTRY,
)

# What browsers report (POST /api/me/telemetry): the seed's state_commit_to_visible_seconds and
# the realtime problems only clients see.
CLIENT_EVENTS = Counter(
    "client_events_total",
    "Browser realtime events: connects, reconnects, recovered_false, snapshots, unknown_messages",
    ["kind"],
    registry=REGISTRY,
)
CLIENT_SNAPSHOT_SECONDS = Histogram(
    "client_snapshot_seconds",
    "How long a browser's snapshot load took",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
COMMIT_TO_VISIBLE = Histogram(
    "state_commit_to_visible_seconds",
    "From a change's commit to a browser applying it (reported by browsers)",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
    registry=REGISTRY,
)
CLIENT_REPORTS = Counter(
    "client_telemetry_reports_total", "Browser telemetry reports by transport", ["transport"], registry=REGISTRY
)
