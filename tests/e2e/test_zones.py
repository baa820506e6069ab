"""Galera across zones (docs/operations.md, "Across three zones"): a commit is acknowledged only
once the other zones have its write set, so the distance between zones is paid on every commit
— and only the distance: without it the same path costs little.

The run is ``bench/zones.py`` (three nodes, each in a network namespace of its own, a relay
process delaying the packets between them); this test holds what the notes rely on, the bench
prints the figures. The bench's service figures are bench/ingest.py's (its ``--json``, run by
test_benches_run.py), here left out for the suite's time."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.processes import bench_figures, missing_service, needs_service

pytestmark = [pytest.mark.galera]

DELAYED_RTT_MS = 10.0


@pytest.mark.timeout(400)
def test_every_commit_waits_for_the_other_zones_and_for_nothing_else(tmp_path: Path) -> None:
    needs_service("Galera", "scripts/services install galera")
    if not Path("/usr/lib/galera/libgalera_smm.so").exists():
        missing_service("Galera", "scripts/services install galera")
    if os.geteuid() != 0 or not Path("/dev/net/tun").exists():
        pytest.fail("zones need root (network namespaces) and /dev/net/tun", pytrace=False)
    near, far = bench_figures(
        "zones.py",
        ["--rtt", f"0,{DELAYED_RTT_MS:g}", "--seconds", "1", "--connections", "4", "--producers", "0"],
        tmp_path / "zones.json",
        timeout=360,
    )
    # The relay delays what it carries: the round trip between zones is the one set.
    assert far["rtt_measured_ms"] >= DELAYED_RTT_MS
    assert near["rtt_measured_ms"] < DELAYED_RTT_MS / 4
    # Synchronous: no commit returns before its write set went to another zone and back.
    assert far["commit_p50_ms"] >= DELAYED_RTT_MS
    # ... and the distance is what it pays: the same commits without the delay wait far less.
    assert near["commit_p50_ms"] < DELAYED_RTT_MS / 2
    assert near["commits"] > far["commits"]
