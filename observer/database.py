"""The database server's own counters, and a watched replica's lag, onto the observer's /metrics
(design D12: lock waits and deadlocks, database failover; ``status.infra.db_status``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from observer import metrics
from status.infra import db_status

if TYPE_CHECKING:
    import sqlalchemy as sa


class DatabaseWatch:
    def __init__(self, engine: sa.Engine, replica: sa.Engine | None = None) -> None:
        self.engine = engine
        # REPLICA_STATUS_URL: a replica (or the standby of a failover pair) to watch, with an account
        # that may read its replication status. None: nothing is watched.
        self.replica = replica

    def run_once(self) -> dict[str, float]:
        status = db_status.server_status(self.engine)
        for name, gauge in metrics.DB_SERVER_STATUS.items():
            if name in status:
                gauge.set(status[name])
        if self.replica is not None:
            replica = db_status.replica_status(self.replica)
            running = replica is not None and replica.io_running and replica.sql_running
            metrics.REPLICA_RUNNING.set(1 if running else 0)
            lag = replica.lag_seconds if replica is not None and replica.lag_seconds is not None else math.nan
            metrics.REPLICA_LAG.set(lag)
            status = {**status, "replica_running": float(running), "replica_lag_seconds": lag}
        return status
