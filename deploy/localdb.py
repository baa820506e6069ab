"""A MariaDB server's data directory and the service's account on it, for the servers the HA
runs and drills start on one machine (deploy/galera/cluster.py's nodes, deploy/backup/pitr.py's
primary): the same account and grants as ``scripts/services`` makes on the single server."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pymysql


def initialise(datadir: Path) -> bool:
    """An empty server's system tables in ``datadir`` (owned by mysql); False when already there."""
    if (datadir / "mysql").is_dir():
        return False
    datadir.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mariadb-install-db", "--user=mysql", f"--datadir={datadir}", "--skip-test-db"],
        check=True,
        capture_output=True,
    )
    shutil.chown(datadir, "mysql", "mysql")
    return True


def grant_service_account(socket: Path, user: str, password: str) -> None:
    """The account the service connects with (over TCP and the socket), allowed the project's
    databases (``task_observer`` and the tests' ``tso_*``) and to read replication status."""
    who = f"'{user}'@'127.0.0.1', '{user}'@'localhost'"
    statements = [
        f"CREATE USER IF NOT EXISTS '{user}'@'127.0.0.1' IDENTIFIED BY '{password}'",
        f"CREATE USER IF NOT EXISTS '{user}'@'localhost' IDENTIFIED BY '{password}'",
        f"GRANT ALL PRIVILEGES ON `tso\\_%`.* TO {who}",
        f"GRANT ALL PRIVILEGES ON `task_observer`.* TO {who}",
        "CREATE DATABASE IF NOT EXISTS task_observer CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        # Reading replication status (the observer's REPLICA_STATUS_URL), as on the single server.
        f"GRANT SLAVE MONITOR ON *.* TO {who}",
    ]
    run_as_root(socket, statements)


def run_as_root(socket: Path, statements: Iterable[str]) -> None:
    """Each statement in turn, as the server's root over its socket, each committed."""
    conn = pymysql.connect(unix_socket=str(socket), user="root", autocommit=True)
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
    finally:
        conn.close()
