"""The status service's Prometheus registry, and the database-level metrics (SPEC §12)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

REGISTRY = CollectorRegistry(auto_describe=True)

DB_RETRIES = Counter(
    "db_transaction_retries_total",
    "Transactions re-run after a deadlock, lock wait timeout or lost connection",
    ["reason"],
    registry=REGISTRY,
)
DB_GIVE_UPS = Counter(
    "db_transaction_unavailable_total", "Transactions that still failed after every retry", registry=REGISTRY
)
