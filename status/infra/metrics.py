"""The status service's Prometheus registry, and the database-level metrics (design D12)."""

from __future__ import annotations

import weakref
from collections.abc import Iterator

import sqlalchemy as sa
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

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
DB_TRANSACTION_SECONDS = Histogram(
    "db_transaction_seconds",
    "A unit of work from taking its connection to its commit or rollback, by outcome",
    ["outcome"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
    registry=REGISTRY,
)
DB_POOL_WAIT_SECONDS = Histogram(
    "db_pool_checkout_seconds",
    "Time to get a connection from the pool (long when every pooled connection is busy)",
    buckets=(0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30),
    registry=REGISTRY,
)


class PoolCollector(Collector):
    """``db_pool_connections{state}`` of every engine this process made, read at scrape time
    (in use, idle in the pool, and the pool's configured size)."""

    def __init__(self) -> None:
        self._engines: weakref.WeakSet[sa.Engine] = weakref.WeakSet()

    def watch(self, engine: sa.Engine) -> None:
        self._engines.add(engine)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("db_pool_connections", "Database pool connections by state", labels=["state"])
        in_use = idle = size = 0
        for engine in list(self._engines):
            pool = engine.pool
            if isinstance(pool, sa.pool.QueuePool):
                in_use += pool.checkedout()
                idle += pool.checkedin()
                size += pool.size() + pool._max_overflow  # the most it opens
        family.add_metric(["in_use"], in_use)
        family.add_metric(["idle"], idle)
        family.add_metric(["limit"], size)
        yield family


POOLS = PoolCollector()
REGISTRY.register(POOLS)
