"""What distance between zones costs a Galera commit (docs/operations.md, "Across three zones").

    .venv/bin/python bench/zones.py [--rtt 0,2,10] [--seconds 5] [--connections 16] [--json FILE]

Three MariaDB Galera nodes (deploy/galera/cluster.py), each in a network namespace of its own —
a zone — with an address of its own. The zones reach one another only through a relay process
holding one TUN device per zone: it reads each packet one zone sends and writes it into the zone
it is addressed to after the delay set for the run (half the round trip each way). This machine's
kernel has no netem or fq queueing discipline to delay a link; a TUN device and a process do the
same in user space. Every run goes through the relay, the one without delay included, so each
figure is read against the same path with nothing but the distance changed.

Per round trip: the round trip itself, measured from zone A to node 2's SQL port (``SELECT 1``);
one connection's commits on node 1 (each an INSERT and an UPDATE, as a change's rows are), their
latency p50 / p99 — the certification cost is p50 less that of the run without delay; then
``--connections`` connections committing at once, commits/s and the ratio to the run without
delay. Needs root (namespaces, TUN devices) and the Galera packages
(``scripts/services install galera``).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import heapq
import json
import os
import secrets
import selectors
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
from common import DRIVER, commits_at_once, percentile  # type: ignore[import-not-found]

REPO = Path(__file__).resolve().parent.parent
ZONES = 3
SUBNET = "10.77.0"  # zone n's address is SUBNET.n, inside its namespace only
CLIENTS = f"{SUBNET}.100"  # this namespace's address towards the zones
PROBE_USER, PROBE_PASSWORD = "zones", "zones"

_TUNSETIFF = 0x400454CA
_IFF_TUN, _IFF_NO_PI = 0x0001, 0x1000


# ------------------------------------------------------------------ the relay (its own process)
def _open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", name.encode(), _IFF_TUN | _IFF_NO_PI))
    return fd


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _zone_devices(namespaces: list[str], tag: str) -> dict[bytes, int]:
    """A TUN device per zone, moved into its namespace with the zone's address and a route to the
    other zones through it, and one left here for the clients (CLIENTS: the benches' processes and
    the service's, beside node 1): {an address (4 bytes): its device's descriptor}."""
    devices: dict[bytes, int] = {}
    for n, namespace in enumerate(namespaces, start=1):
        name = f"{tag}{n}"
        fd = _open_tun(name)
        _ip("link", "set", name, "netns", namespace)
        _ip("-n", namespace, "link", "set", "lo", "up")
        _ip("-n", namespace, "addr", "add", f"{SUBNET}.{n}/32", "dev", name)
        _ip("-n", namespace, "link", "set", name, "up")
        _ip("-n", namespace, "route", "add", f"{SUBNET}.0/24", "dev", name)
        devices[socket.inet_aton(f"{SUBNET}.{n}")] = fd
    name = f"{tag}c"
    fd = _open_tun(name)
    _ip("addr", "add", f"{CLIENTS}/32", "dev", name)
    _ip("link", "set", name, "up")
    _ip("route", "add", f"{SUBNET}.0/24", "dev", name)
    devices[socket.inet_aton(CLIENTS)] = fd
    return devices


class _Carrier:
    """Packets read from one device, written into their destination's: between two zones ``delay``
    later, between the clients and a zone at once (they stand beside node 1, in its zone)."""

    def __init__(self, devices: dict[bytes, int]) -> None:
        self.devices = devices
        self.clients = socket.inet_aton(CLIENTS)
        self.delay = 0.0
        self.due: list[tuple[float, int, int, bytes]] = []  # (when, order, device, packet)
        self.order = 0

    def timeout(self) -> float | None:
        return max(0.0, self.due[0][0] - time.monotonic()) if self.due else None

    def read(self, fd: int) -> None:
        while True:
            try:
                packet = os.read(fd, 65536)
            except BlockingIOError:
                return
            source, destination = packet[12:16], packet[16:20]  # an IPv4 header's addresses
            out = self.devices.get(destination)
            if out is None:
                continue
            if self.delay == 0 or self.clients in (source, destination):
                os.write(out, packet)
            else:
                self.order += 1
                heapq.heappush(self.due, (time.monotonic() + self.delay, self.order, out, packet))

    def release(self) -> None:
        now = time.monotonic()
        while self.due and self.due[0][0] <= now:
            _, _, out, packet = heapq.heappop(self.due)
            os.write(out, packet)


def relay(namespaces: list[str], tag: str) -> None:
    """Carry packets between the zones' devices. A line on stdin sets the one-way delay in ms
    (answered "ok"); the end of stdin ends the relay, and its devices with it (not persistent)."""
    carrier = _Carrier(_zone_devices(namespaces, tag))
    selector = selectors.DefaultSelector()
    for fd in carrier.devices.values():
        selector.register(fd, selectors.EVENT_READ)
    stdin = sys.stdin.fileno()
    selector.register(stdin, selectors.EVENT_READ)
    print("ready", flush=True)
    while True:
        for key, _ in selector.select(carrier.timeout()):
            if key.fd != stdin:
                carrier.read(key.fd)
                continue
            line = sys.stdin.readline()
            if not line:
                return
            carrier.delay = float(line) / 1000
            print("ok", flush=True)
        carrier.release()


class Relay:
    def __init__(self, namespaces: list[str], tag: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--relay", tag, *namespaces],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._expect("ready")

    def _expect(self, word: str) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != word:
            raise RuntimeError(f"the relay said {line!r} (exit {self.proc.poll()})")

    def set_rtt(self, rtt_ms: float) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{rtt_ms / 2}\n")
        self.proc.stdin.flush()
        self._expect("ok")

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ------------------------------------------------------------------ zones and the cluster
@contextlib.contextmanager
def zoned_cluster() -> Iterator[Any]:
    """Three namespaces, the relay between them, and a Galera node synced in each."""
    sys.path.insert(0, str(REPO / "deploy" / "galera"))
    from cluster import Cluster  # type: ignore[import-not-found]

    tag = f"tz{secrets.token_hex(3)}"
    namespaces = [f"{tag}-{n}" for n in range(1, ZONES + 1)]
    workdir = Path(tempfile.mkdtemp(prefix="zones-"))
    made: list[str] = []
    relay_proc: Relay | None = None
    cluster = Cluster(
        workdir, 3310, addresses=tuple(f"{SUBNET}.{n}" for n in range(1, ZONES + 1)), namespaces=tuple(namespaces)
    )
    try:
        for namespace in namespaces:
            _ip("netns", "add", namespace)
            made.append(namespace)
        relay_proc = Relay(namespaces, tag)
        cluster.up(balancer=False)
        yield cluster, relay_proc
    finally:
        cluster.down()
        if relay_proc is not None:
            relay_proc.close()
        for namespace in made:
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("netns", "del", namespace)
        shutil.rmtree(workdir, ignore_errors=True)


def _root(cluster: Any, node: int = 1, **kwargs: Any) -> pymysql.Connection[Any]:
    return pymysql.connect(unix_socket=str(cluster.datadir(node) / "mysqld.sock"), user="root", **kwargs)


def prepare(cluster: Any) -> None:
    """The probe's account (reached from the other zones over TCP), the service's account (reached
    from the clients' address) and the table the commits write to."""
    conn = _root(cluster, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE USER IF NOT EXISTS '{PROBE_USER}'@'{SUBNET}.%' IDENTIFIED BY '{PROBE_PASSWORD}'")
            cur.execute(f"GRANT USAGE ON *.* TO '{PROBE_USER}'@'{SUBNET}.%'")
            # The service's account as the benches' server has it, from the clients' address.
            cur.execute(f"CREATE USER IF NOT EXISTS 'tso'@'{CLIENTS}' IDENTIFIED BY 'tso'")
            cur.execute(f"GRANT ALL PRIVILEGES ON `tso\\_%`.* TO 'tso'@'{CLIENTS}'")
            cur.execute("CREATE DATABASE IF NOT EXISTS zones")
            cur.execute(
                "CREATE TABLE IF NOT EXISTS zones.log (id BIGINT AUTO_INCREMENT PRIMARY KEY,"
                " writer INT NOT NULL, body VARCHAR(600) NOT NULL)"
            )
            cur.execute("CREATE TABLE IF NOT EXISTS zones.head (writer INT PRIMARY KEY, version BIGINT NOT NULL)")
    finally:
        conn.close()


# ------------------------------------------------------------------ measurements
def probe_rtt(cluster: Any, namespace: str, rounds: int = 50) -> float:
    """The median round trip, in ms, of ``SELECT 1`` from zone A to node 2 (a process in zone A)."""
    done = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            namespace,
            sys.executable,
            __file__,
            "--probe",
            f"{cluster.address(2)}:{cluster.port(2)}",
            str(rounds),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return float(done.stdout.strip())


def probe(target: str, rounds: int) -> None:
    host, port = target.rsplit(":", 1)
    conn = pymysql.connect(host=host, port=int(port), user=PROBE_USER, password=PROBE_PASSWORD, connect_timeout=5)
    times = []
    with conn.cursor() as cur:
        for _ in range(rounds):
            start = time.perf_counter()
            cur.execute("SELECT 1")
            cur.fetchall()
            times.append((time.perf_counter() - start) * 1000)
    conn.close()
    print(f"{sorted(times)[len(times) // 2]:.3f}")


def _commit(cur: Any, writer: int, version: int, body: str) -> None:
    cur.execute("INSERT INTO zones.log (writer, body) VALUES (%s, %s)", (writer, body))
    cur.execute(
        "INSERT INTO zones.head (writer, version) VALUES (%s, %s) ON DUPLICATE KEY UPDATE version = VALUES(version)",
        (writer, version),
    )
    cur.connection.commit()


def commit_latencies(cluster: Any, seconds: float) -> list[float]:
    """One connection committing one change after another for ``seconds``: each commit's ms."""
    conn = _root(cluster, database="zones")
    body = "x" * 500
    times: list[float] = []
    deadline = time.monotonic() + seconds
    with conn.cursor() as cur:
        while time.monotonic() < deadline:
            start = time.perf_counter()
            _commit(cur, 0, len(times), body)
            times.append((time.perf_counter() - start) * 1000)
    conn.close()
    return times


def commits_per_second(cluster: Any, connections: int, seconds: float) -> float:
    """``connections`` connections committing at once (each its own rows: no conflicts)."""
    body = "y" * 500
    return float(
        commits_at_once(
            lambda n: _root(cluster, database="zones"),
            connections,
            seconds,
            lambda cur, n, done: _commit(cur, n + 1, done, body),
        )
    )


def service_ingest(cluster: Any, seconds: float, producers: int) -> dict[str, dict[str, float]]:
    """``bench/ingest.py``'s HTTP figures (its API process here, node 1 its database server): the
    bare statements' ceiling, single events and batches, each at this distance."""
    with tempfile.TemporaryDirectory() as tmp:
        figures = Path(tmp) / "ingest.json"
        server = f"{DRIVER}://tso:tso@{cluster.address(1)}:{cluster.port(1)}"
        done = subprocess.run(
            [
                *(sys.executable, str(REPO / "bench" / "ingest.py"), "--http-only", "--skip-growth"),
                *("--seconds", f"{seconds:g}", "--producers", str(producers), "--json", str(figures)),
            ],
            env={**os.environ, "TASK_OBSERVER_TEST_MYSQL_URL": server},
            capture_output=True,
            text=True,
            timeout=seconds * 10 + 180,
        )
        if done.returncode != 0:
            raise RuntimeError(f"bench/ingest.py exited {done.returncode}: {done.stderr[-2000:]}")
        figures_read: dict[str, dict[str, float]] = json.loads(figures.read_text())
        return figures_read


def measure(rtts: list[float], seconds: float, connections: int, producers: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with zoned_cluster() as (cluster, relay_proc):
        prepare(cluster)
        namespace = cluster.namespaces[0]
        for rtt in rtts:
            relay_proc.set_rtt(rtt)
            commits_per_second(cluster, connections, 1.0)  # warm up at this distance
            latencies = commit_latencies(cluster, seconds)
            rows.append(
                {
                    "rtt_set_ms": rtt,
                    "rtt_measured_ms": probe_rtt(cluster, namespace),
                    "commit_p50_ms": percentile(latencies, 0.5),
                    "commit_p99_ms": percentile(latencies, 0.99),
                    "commits": len(latencies),
                    "commits_per_s": commits_per_second(cluster, connections, seconds),
                    "service": service_ingest(cluster, seconds, producers) if producers else None,
                }
            )
    return rows


def report(rows: list[dict[str, Any]], connections: int, producers: int) -> None:
    base = rows[0]
    print(
        f"{'round trip set':>15} {'measured':>9} {'commit p50':>11} {'p99':>8} {'certification cost':>19}"
        f" {f'{connections} connections':>16} {'ratio':>6}"
    )
    for row in rows:
        cost = row["commit_p50_ms"] - base["commit_p50_ms"]
        print(
            f"{row['rtt_set_ms']:>12.1f} ms {row['rtt_measured_ms']:>6.2f} ms {row['commit_p50_ms']:>8.2f} ms"
            f" {row['commit_p99_ms']:>5.1f} ms {cost:>16.2f} ms {row['commits_per_s']:>9.0f} commits/s"
            f" {row['commits_per_s'] / base['commits_per_s']:>5.2f}x"
        )
    print("certification cost = commit p50 less that of the first row (the same relay, no delay)")
    if base["service"] is None:
        return
    print(f"the service (bench/ingest.py over HTTP, {producers} producers, its API beside node 1):")
    for row in rows:
        figures = row["service"]
        parts = [f"{row['rtt_set_ms']:>12.1f} ms"]
        for kind, name in (("ceiling", "bare statements"), ("single", "single events"), ("batch", "batches")):
            ratio = figures[kind]["events_per_s"] / base["service"][kind]["events_per_s"]
            parts.append(
                f"{name} {figures[kind]['events_per_s']:>6.0f}/s p99 {figures[kind]['p99_ms']:>5.0f} ms ({ratio:.2f}x)"
            )
        print("   ".join(parts))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--relay":
        relay(sys.argv[3:], sys.argv[2])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--probe":
        probe(sys.argv[2], int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rtt", default="0,2,10", help="round trips between zones to run, in ms (the first: 0)")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument(
        "--producers", type=int, default=16, help="bench/ingest.py's producers at each distance (0: skip the service)"
    )
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    rtts = [float(r) for r in args.rtt.split(",")]
    rows = measure(rtts, args.seconds, args.connections, args.producers)
    report(rows, args.connections, args.producers)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
