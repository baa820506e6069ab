"""What the database server itself says about contention and replication (design D12's lock waits,
deadlocks and failover), read by the observer every few seconds and exported on its /metrics.

The names follow mysqld_exporter's (``mysql_global_status_*``), so a deployment that runs it gets
the same series; these come from the service's own connection for deployments that do not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

# Cumulative server counters (since the server started): rates are Prometheus's business.
STATUS_VARIABLES = (
    "Innodb_row_lock_waits",  # row lock waits
    "Innodb_row_lock_time",  # ms spent waiting for row locks
    "Innodb_deadlocks",  # MariaDB; MySQL counts them in INNODB_METRICS (lock_deadlocks)
    "Threads_connected",
    "Threads_running",
)


def server_status(engine: sa.Engine) -> dict[str, float]:
    """The server's counters and gauges of ``STATUS_VARIABLES`` (empty on SQLite)."""
    if engine.dialect.name not in ("mysql", "mariadb"):
        return {}
    names = ", ".join(f"'{n}'" for n in STATUS_VARIABLES)
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(f"SHOW GLOBAL STATUS WHERE Variable_name IN ({names})").all()
        found = {str(name): float(value) for name, value in rows if str(value).replace(".", "", 1).isdigit()}
        if "Innodb_deadlocks" not in found:  # MySQL
            deadlocks = conn.exec_driver_sql(
                "SELECT COUNT FROM information_schema.INNODB_METRICS WHERE NAME = 'lock_deadlocks'"
            ).scalar()
            if deadlocks is not None:
                found["Innodb_deadlocks"] = float(deadlocks)
    return found


@dataclass(frozen=True)
class ReplicaStatus:
    io_running: bool
    sql_running: bool
    lag_seconds: float | None  # None while the SQL thread does not run (MySQL says NULL)


def replica_status(engine: sa.Engine) -> ReplicaStatus | None:
    """The replication state of the server ``engine`` connects to (an account with the REPLICATION
    CLIENT / SLAVE MONITOR privilege); None when it replicates from no one or is no MySQL/MariaDB."""
    if engine.dialect.name not in ("mysql", "mariadb"):
        return None
    with engine.connect() as conn:
        try:
            result = conn.exec_driver_sql("SHOW REPLICA STATUS")
        except sa.exc.ProgrammingError:  # syntax: MariaDB < 10.5, MySQL < 8.0.22
            result = conn.exec_driver_sql("SHOW SLAVE STATUS")
        return replica_status_of(result.mappings().first())


def replica_status_of(row: Mapping[Any, Any] | None) -> ReplicaStatus | None:
    """``SHOW REPLICA STATUS``'s row (either generation's column names) as what matters here."""
    if row is None:
        return None

    def pick(*names: str) -> Any:
        return next((row[n] for n in names if n in row), None)

    lag = pick("Seconds_Behind_Source", "Seconds_Behind_Master")
    return ReplicaStatus(
        io_running=str(pick("Replica_IO_Running", "Slave_IO_Running")).lower() == "yes",
        sql_running=str(pick("Replica_SQL_Running", "Slave_SQL_Running")).lower() == "yes",
        lag_seconds=float(lag) if lag is not None else None,
    )
