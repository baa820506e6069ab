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
