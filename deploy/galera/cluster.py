"""A three-node MariaDB Galera cluster behind HAProxy on one machine, for the HA runs and tests.

    python deploy/galera/cluster.py up    --dir DIR [--base-port 3310] [--user tso --password tso]
    python deploy/galera/cluster.py kill  --dir DIR --node 1     # kill -9 of one node's server
    python deploy/galera/cluster.py start --dir DIR --node 1     # it rejoins (IST, or SST by rsync)
    python deploy/galera/cluster.py down  --dir DIR

Ports from the base: SQL base+1..3, Galera replication base+11..13, IST base+21..23, SST
base+31..33, health checks base+41..43, and HAProxy's writer address base (the one address
clients use). Node configs come from ``node.cnf``, HAProxy's from ``../haproxy/galera.cfg``,
the health checks are ``clustercheck.py``. Processes are detached and recorded in DIR, so
``up`` returns with the cluster running and ``down`` stops it from any process.

The account made on the first node (replicated to the others) may use the project's
databases, as ``scripts/services`` grants on the single server.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pymysql

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from detached import Detached  # noqa: E402 (deploy/detached.py, beside this folder)
from localdb import grant_service_account, initialise  # noqa: E402

NODES = (1, 2, 3)
UP_TIMEOUT = 120.0  # a node's start, SST included


@dataclass(frozen=True)
class Cluster:
    dir: Path
    base_port: int = 3310
    user: str = "tso"
    password: str = "tso"
    # Each node's address and, when set, the network namespace it runs in (bench/zones.py puts
    # the nodes in zones of their own, a delay between them); by default all on loopback.
    addresses: tuple[str, ...] = ("127.0.0.1",) * len(NODES)
    namespaces: tuple[str, ...] | None = None

    @property
    def writer_port(self) -> int:
        """HAProxy's address: where clients send every connection."""
        return self.base_port

    def port(self, node: int) -> int:
        return self.base_port + node

    def check_port(self, node: int) -> int:
        return self.base_port + 40 + node

    def address(self, node: int) -> str:
        return self.addresses[node - 1]

    def datadir(self, node: int) -> Path:
        return self.dir / f"node{node}"

    def url(self, database: str, driver: str = "pymysql") -> str:
        return f"mysql+{driver}://{self.user}:{self.password}@127.0.0.1:{self.writer_port}/{database}?charset=utf8mb4"

    # ------------------------------------------------------------ processes
    @property
    def _procs(self) -> Detached:
        return Detached(self.dir)

    # ------------------------------------------------------------ nodes
    def _config(self, node: int) -> Path:
        others = ",".join(f"{self.address(n)}:{self.base_port + 10 + n}" for n in NODES)
        text = (
            (HERE / "node.cnf")
            .read_text()
            .format(
                datadir=self.datadir(node),
                socket=self.datadir(node) / "mysqld.sock",
                address=self.address(node),
                port=self.port(node),
                name=f"node{node}",
                cluster_address=others,
                gcomm_port=self.base_port + 10 + node,
                ist_port=self.base_port + 20 + node,
                sst_port=self.base_port + 30 + node,
            )
        )
        path = self.dir / f"node{node}.cnf"
        path.write_text(text)
        return path

    def start_node(self, node: int, *, bootstrap: bool = False) -> None:
        initialise(self.datadir(node))
        if self._procs.pid(f"node{node}") is not None:
            return
        command = ["mariadbd", f"--defaults-file={self._config(node)}", "--user=mysql"]
        if self.namespaces is not None:
            command = ["ip", "netns", "exec", self.namespaces[node - 1], *command]
        if bootstrap:
            grastate = self.datadir(node) / "grastate.dat"
            if grastate.exists():  # the cluster is started again from this node: it is the one to trust
                grastate.write_text(re.sub(r"safe_to_bootstrap: 0", "safe_to_bootstrap: 1", grastate.read_text()))
            command.append("--wsrep-new-cluster")
        self._procs.spawn(f"node{node}", command)

    def kill_node(self, node: int) -> None:
        self._procs.stop(f"node{node}", signal.SIGKILL)

    def stop_node(self, node: int) -> None:
        self._procs.stop(f"node{node}", signal.SIGTERM, wait=60)

    def node_state(self, node: int) -> tuple[str | None, str | None]:
        """(wsrep_ready, wsrep_local_state) of a node, or (None, None) when it does not answer."""
        try:
            conn = pymysql.connect(
                unix_socket=str(self.datadir(node) / "mysqld.sock"), user="root", connect_timeout=1, read_timeout=2
            )
        except pymysql.err.MySQLError:
            return None, None
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_ready', 'wsrep_local_state')")
                status = dict(cur.fetchall())
            return status.get("wsrep_ready"), status.get("wsrep_local_state")
        except pymysql.err.MySQLError:
            return None, None
        finally:
            conn.close()

    def wait_synced(self, node: int, timeout: float = UP_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.node_state(node) == ("ON", "4"):
                return
            if self._procs.pid(f"node{node}") is None:
                raise RuntimeError(f"node{node} exited; see {self.datadir(node) / 'error.log'}")
            time.sleep(0.2)
        raise TimeoutError(f"node{node} not synced within {timeout:.0f} s; see {self.datadir(node) / 'error.log'}")

    def cluster_size(self, node: int) -> int:
        conn = pymysql.connect(unix_socket=str(self.datadir(node) / "mysqld.sock"), user="root", connect_timeout=1)
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW GLOBAL STATUS LIKE 'wsrep_cluster_size'")
                row = cur.fetchone()
                return int(row[1]) if row else 0
        finally:
            conn.close()

    # ------------------------------------------------------------ the balancer and its checks
    def _start_balancer(self) -> None:
        if self._procs.pid("clustercheck") is None:
            nodes = [f"{self.check_port(n)}=127.0.0.1:{self.port(n)}" for n in NODES]
            self._procs.spawn(
                "clustercheck",
                [
                    sys.executable,
                    str(HERE / "clustercheck.py"),
                    "--user",
                    self.user,
                    "--password",
                    self.password,
                    *nodes,
                ],
            )
        self._wait_checks()
        if self._procs.pid("haproxy") is None:
            config = (HERE.parent / "haproxy" / "galera.cfg").read_text()
            ports = {f"port{n}": self.port(n) for n in NODES} | {f"check{n}": self.check_port(n) for n in NODES}
            path = self.dir / "haproxy.cfg"
            path.write_text(config.format(listen_port=self.writer_port, **ports))
            self._procs.spawn("haproxy", [shutil.which("haproxy") or "/usr/sbin/haproxy", "-db", "-f", str(path)])

    def _wait_checks(self, timeout: float = 30.0) -> None:
        """Until every node's check answers 200: a balancer started earlier would mark a node down
        at its first look and the stick table would pick another node to write to."""
        deadline = time.monotonic() + timeout
        for node in NODES:
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{self.check_port(node)}/", timeout=2):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)

    def wait_writable(self, timeout: float = 30.0) -> None:
        """Until a write through the balancer's address succeeds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                conn = pymysql.connect(
                    host="127.0.0.1",
                    port=self.writer_port,
                    user=self.user,
                    password=self.password,
                    database="task_observer",
                    connect_timeout=1,
                    read_timeout=2,
                )
                with conn.cursor() as cur:
                    cur.execute("SELECT 1")
                conn.close()
                return
            except pymysql.err.MySQLError:
                if self._procs.pid("haproxy") is None:
                    log = (self.dir / "haproxy.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"HAProxy exited; its log ends:\n{log}") from None
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    # ------------------------------------------------------------ whole cluster
    def up(self, *, balancer: bool = True) -> None:
        """Every node started and synced, then (``balancer``) HAProxy in front of them."""
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o755)
        running = [n for n in NODES if self._procs.pid(f"node{n}") is not None]
        if not running:
            self.start_node(1, bootstrap=True)
            self.wait_synced(1)
            grant_service_account(self.datadir(1) / "mysqld.sock", self.user, self.password)
        for node in NODES:  # joiners one at a time: each takes its state from a synced node
            self.start_node(node)
            self.wait_synced(node)
        if balancer:
            self._start_balancer()
            self.wait_writable()

    def down(self) -> None:
        for name in ("haproxy", "clustercheck"):
            self._procs.stop(name, signal.SIGTERM)
        for node in reversed(NODES):  # the last to stop is the one safe to bootstrap from
            self.stop_node(node)

    def writer(self) -> int | None:
        """The node HAProxy sends connections to now (by the server id a connection lands on)."""
        conn = pymysql.connect(
            host="127.0.0.1", port=self.writer_port, user=self.user, password=self.password, connect_timeout=2
        )
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT @@port")
                row = cur.fetchone()
        finally:
            conn.close()
        return int(row[0]) - self.base_port if row else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["up", "down", "kill", "start", "status"])
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--base-port", type=int, default=3310)
    parser.add_argument("--user", default="tso")
    parser.add_argument("--password", default="tso")
    parser.add_argument("--node", type=int, choices=NODES)
    args = parser.parse_args()
    cluster = Cluster(args.dir.resolve(), args.base_port, args.user, args.password)
    if args.command == "up":
        cluster.up()
        print(f"Galera cluster up; writer address 127.0.0.1:{cluster.writer_port} (node{cluster.writer()})")
    elif args.command == "down":
        cluster.down()
    elif args.command == "kill":
        cluster.kill_node(args.node)
    elif args.command == "start":
        cluster.start_node(args.node)
        cluster.wait_synced(args.node)
    else:
        for node in NODES:
            print(f"node{node}: {cluster.node_state(node)}")


if __name__ == "__main__":
    main()
