"""A MariaDB server's data directory and the service's account on it, for the servers the HA
runs and drills start on one machine (deploy/galera/cluster.py's nodes, deploy/backup/pitr.py's
primary, the shards' servers of the tests and benches): the same account and grants as
``scripts/services`` makes on the single server."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql
from detached import Detached


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


@dataclass(frozen=True)
class LocalServer:
    """A plain MariaDB server of its own: ``dir/name`` its data directory, the process recorded in
    ``dir`` (deploy/detached.py), listening on ``port`` of the loopback interface and its socket."""

    name: str
    dir: Path
    port: int

    @property
    def datadir(self) -> Path:
        return self.dir / self.name

    @property
    def socket(self) -> Path:
        return self.datadir / "mysqld.sock"

    def start(self, *options: str) -> None:
        """Started on its data directory (made on the first start; kept across restarts)."""
        initialise(self.datadir)
        Detached(self.dir).spawn(
            self.name,
            [
                "mariadbd",
                "--no-defaults",
                f"--datadir={self.datadir}",
                f"--socket={self.socket}",
                f"--port={self.port}",
                "--bind-address=127.0.0.1",
                f"--log-error={self.datadir / 'error.log'}",
                f"--pid-file={self.datadir / 'mariadbd.pid'}",
                "--innodb-buffer-pool-size=64M",
                "--transaction-isolation=READ-COMMITTED",
                "--max-connections=300",
                "--user=mysql",
                *options,
            ],
        )

    def wait(self, timeout: float = 60.0) -> None:
        """Until it answers on its socket; its log's end in the error when it does not."""
        deadline = time.monotonic() + timeout
        while not self._listening():
            if Detached(self.dir).pid(self.name) is None or time.monotonic() > deadline:
                log = (self.datadir / "error.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{self.name} did not start; its log ends:\n{log}")
            time.sleep(0.2)
        self.root().close()

    def _listening(self) -> bool:
        # A plain socket, closed whatever happens: the driver leaves a refused one to the collector.
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(str(self.socket))
            except OSError:
                return False
        return True

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """Stopped (SIGKILL: killed as a crash kills it, nothing flushed or closed)."""
        Detached(self.dir).stop(self.name, sig, wait=60)

    def root(self, **kwargs: Any) -> Any:
        return pymysql.connect(unix_socket=str(self.socket), user="root", autocommit=True, **kwargs)

    def run(self, *statements: str) -> None:
        run_as_root(self.socket, statements)
