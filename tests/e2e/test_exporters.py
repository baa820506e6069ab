"""The dependency alerts read metrics the exporters really expose (deploy/prometheus): Debian's
prometheus-mysqld-exporter beside a node of a real three-node Galera cluster, and
prometheus-redis-exporter beside the test Redis. A metric an alert names that the exporter does
not serve (a renamed metric, a typo) would leave the alert silent forever; this fails instead."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.processes import REPO_ROOT, free_port, missing_service, needs_service, wait_until

pytestmark = [pytest.mark.galera, pytest.mark.redis]

RULES = (REPO_ROOT / "deploy" / "prometheus" / "alerts.yml").read_text()


def _named(job: str) -> set[str]:
    """The metrics the alerts read from ``job``."""
    return set(re.findall(r"\b([a-z_]+)\{job=\"" + job + r"\"", RULES))


def _exporter(binary: str) -> str:
    path = shutil.which(binary) or f"/usr/bin/{binary}"
    if not Path(path).exists():
        missing_service(binary, "scripts/services install exporters")
    return path


def _scrape(args: list[str], port: int, tmp: Path, name: str) -> set[str]:
    log = (tmp / f"{name}.log").open("w")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/metrics"

        def up() -> bool:
            try:
                return httpx.get(url, timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(up, 30, f"{name} answering")
        text = httpx.get(url, timeout=10).text
        return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


@pytest.fixture(scope="module")
def galera_node() -> Iterator[int]:
    """Node 1's port in a three-node Galera cluster of its own (deploy/galera/cluster.py, run as
    scripts/services runs it)."""
    needs_service("Galera", "scripts/services install galera")
    if not Path("/usr/lib/galera/libgalera_smm.so").exists():
        missing_service("Galera", "scripts/services install galera")
    sys.path.insert(0, str(REPO_ROOT / "bench"))
    from common import free_port_block  # type: ignore[import-not-found]

    base = free_port_block(50)
    workdir = Path(tempfile.mkdtemp(prefix="galera-exporter-"))
    cluster = [sys.executable, str(REPO_ROOT / "deploy" / "galera" / "cluster.py")]
    where = ["--dir", str(workdir), "--base-port", str(base)]
    try:
        subprocess.run([*cluster, "up", *where], check=True, capture_output=True, timeout=240)
        yield base + 1  # node 1 (deploy/galera/cluster.py: Cluster.port)
    finally:
        subprocess.run([*cluster, "down", *where], capture_output=True, timeout=120)
        shutil.rmtree(workdir, ignore_errors=True)


def test_the_galera_alerts_read_what_mysqld_exporter_serves(galera_node: int, tmp_path: Path) -> None:
    named = _named("mysqld")
    assert {"mysql_global_status_wsrep_cluster_status", "mysql_global_status_wsrep_local_state"} <= named
    cnf = tmp_path / "exporter.cnf"
    cnf.write_text(f"[client]\nuser=tso\npassword=tso\nhost=127.0.0.1\nport={galera_node}\n")
    port = free_port()
    args = [_exporter("prometheus-mysqld-exporter"), f"--config.my-cnf={cnf}", f"--web.listen-address=127.0.0.1:{port}"]
    served = _scrape(args, port, tmp_path, "mysqld-exporter")
    assert "mysql_up" in served
    assert named <= served, f"alerts read metrics the exporter does not serve: {sorted(named - served)}"


def test_the_redis_alerts_read_what_redis_exporter_serves(tmp_path: Path) -> None:
    needs_service("Redis", "scripts/services up redis")
    named = _named("redis")
    assert {"redis_up", "redis_connected_slaves", "redis_instance_info"} <= named
    port = free_port()
    exporter = _exporter("prometheus-redis-exporter")
    args = [exporter, "-redis.addr", "redis://127.0.0.1:6379", "-web.listen-address", f"127.0.0.1:{port}"]
    served = _scrape(args, port, tmp_path, "redis-exporter")
    assert named <= served, f"alerts read metrics the exporter does not serve: {sorted(named - served)}"
