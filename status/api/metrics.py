"""Prometheus metrics of the status API (design D12); one registry per process."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from status.infra.metrics import REGISTRY

# transport: http or grpc, so the two adapters are seen alike (and apart).
EVENTS = Counter(
    "task_status_events_total",
    "Events by result, rejection code and transport",
    ["result", "code", "transport"],
    registry=REGISTRY,
)
INGEST_SECONDS = Histogram(
    "task_status_ingest_seconds",
    "Event ingest latency (request to commit) by transport and shape (one event, or a batch)",
    ["transport", "shape"],
    buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
    registry=REGISTRY,
)
# design D12: one operation's error codes surging (accepted STEP_FAILED reports; producers' codes,
# bounded per process by status.api.changes.MAX_FAILURE_LABELS).
STEP_FAILURES = Counter(
    "task_status_step_failures_total",
    "Accepted step failures by operation and error code",
    ["operation", "code"],
    registry=REGISTRY,
)
# design D12: one operation's schema rejections or error codes spiking. Only executions' reports
# (their operation is the one their token was issued for: a registered definition, a bounded set).
REJECTIONS_BY_OPERATION = Counter(
    "task_status_rejections_by_operation_total",
    "Executions' rejected reports by operation and rejection code",
    ["operation", "code"],
    registry=REGISTRY,
)
DEADLINE_EXCEEDED = Counter(
    "task_status_deadline_exceeded_total",
    "Requests answered 503 UNAVAILABLE because they did not finish within REQUEST_DEADLINE_SECONDS",
    ["transport"],
    registry=REGISTRY,
)
HEARTBEATS = Counter(
    "task_status_heartbeats_total",
    "Heartbeat items by result and transport",
    ["result", "transport"],
    registry=REGISTRY,
)
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

# What browsers report (POST /api/me/telemetry): state_commit_to_visible_seconds (design D12) and
# the realtime problems only clients see.
CLIENT_EVENTS = Counter(
    "client_events_total",
    "Browser realtime events: connects, reconnects, recovered_false, snapshots, snapshot_failures,"
    " unknown_messages, unknown_operations, unknown_schemas",
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
# Requests refused as a whole, by the stable code of the refusal (design D6.1's list: a fixed set);
# the authentication and permission codes among them are what a wrong credential or a probe makes.
REFUSALS = Counter(
    "task_status_refusals_total", "Requests refused, by the refusal's stable code", ["code"], registry=REGISTRY
)
# The availability objective's measure (docs/slo.md): every HTTP answer by status class.
HTTP_RESPONSES = Counter(
    "task_status_http_responses_total",
    "HTTP answers by status class (2xx, 3xx, 4xx, 5xx)",
    ["class"],
    registry=REGISTRY,
)
