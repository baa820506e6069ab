"""Every bench still runs on main: each once, with parameters of seconds, in its
own process as an operator runs it. Nothing here asserts a figure — performance lives in bench/
and docs/benchmarks.md; this only keeps a bench from rotting unnoticed (bench/dashboard.py once
crashed on main for weeks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import REPO_ROOT

pytestmark = [pytest.mark.centrifugo, pytest.mark.temporal]

TINY_OUTAGE_AND_BACKLOG = ["--outage", "2", "--backlog", "2000"]
# bench file, tiny arguments, a line its report always prints
BENCHES = [
    ("detail_bytes.py", ["--steps", "5", "--changes", "5"], "ratio full / delta"),
    ("outbox_bytes.py", ["--steps", "3", "--viewers", "3", "--groups", "2", "--repeat", "10"], "relay read µs"),
    ("e2e_latency.py", ["--rate", "10", "--seconds", "2"], "versions received"),
    ("e2e_browser.py", ["--rate", "5", "--seconds", "2"], "versions shown out of order: 0"),
    (
        "dashboard.py",
        ["--tasks", "20", "--busy", "5", "--rate", "5", "--seconds", "2"],
        "versions shown out of order: 0",
    ),
    ("observer_idle.py", ["--seconds", "3"], "polling / woken"),
    ("relay.py", ["--backlog", "500", "--seconds", "2", "--rate", "50", "--producers", "1"], "per publication"),
    (
        "ingest.py",
        ["--seconds", "2", "--producers", "2", "--skip-growth", "--json", "{tmp}/ingest.json"],
        "heartbeats/s",
    ),
    ("plugin_overhead.py", ["--workflows", "2", "--steps", "2"], "plugin / OpenTelemetry"),
    (
        "plugin_overhead.py",
        ["--rounds", "2", "--rate", "40", "--workflows", "2", "--steps", "2"],
        "rounds: worker CPU ratio",
    ),
    ("activity_path.py", ["--activities", "20", "--rounds", "1", "--steps", "2"], "per activity"),
    ("http_layer.py", ["--requests", "200", "--rounds", "1"], "HTTP layer per single-event request"),
    ("reporter_path.py", ["--activities", "40", "--concurrency", "1", "4", "--rounds", "1"], "requests per activity"),
    (
        "reporter_path.py",
        ["--activities", "40", "--concurrency", "4", "--rounds", "1", "--spread", "2", "--answer-ms", "1"],
        "lanes' own",
    ),
    ("activity_path.py", ["--shards", "2", "--activities", "20", "--rounds", "1", "--steps", "2"], "routed over 2"),
    ("run_verdicts.py", ["--seconds", "3", "--rate", "2", "--idle", "10"], "RPCs per minute"),
    ("push_vs_poll.py", ["--workflows", "2", "--steps", "1", "--step-seconds", "1"], "ratios (poll / push)"),
    ("faults.py", ["--fault", "api-kill", "--seconds", "2"], "api-kill"),
    (
        "capacity.py",
        ["--connections", "200", "--tasks", "40", "--seconds", "3", *TINY_OUTAGE_AND_BACKLOG],
        "7. API down",
    ),
    # A bucket map over two databases, an observer each, beside the single database.
    (
        "capacity.py",
        ["--shards", "1,2", "--steady-only", "--move", "--connections", "200", "--tasks", "40", "--seconds", "3"],
        "shards compared",
    ),
    # The Go idle clients (bench/idle-clients, built here): connections, stats, arrivals, and the
    # reconnects that recover or load snapshots.
    (
        "capacity.py",
        ["--client", "go", "--connections", "200", "--tasks", "40", "--seconds", "3", *TINY_OUTAGE_AND_BACKLOG],
        "the Go clients",
    ),
]


def _id(bench: str, args: list[str], _: str) -> str:
    return f"{bench} {' '.join(args[:2])}" if {"--client", "--shards", "--spread", "--rate"} & set(args) else bench


@pytest.mark.timeout(420)
@pytest.mark.parametrize(("bench", "args", "expected"), BENCHES, ids=[_id(*b) for b in BENCHES])
def test_the_bench_runs(bench: str, args: list[str], expected: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench" / bench), *(arg.format(tmp=tmp_path) for arg in args)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, f"{bench} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert expected in done.stdout, done.stdout[-3000:]


# Benches whose whole run is a test of its own, which holds its invariants: not run twice.
OWN_TEST = {
    "restore_drill.py": "test_restore_drill.py",
    "zones.py": "test_zones.py",
    "shard_engine.py": "test_shard_engine.py",
}


def test_every_bench_is_run_here() -> None:
    runnable = {p.name for p in (REPO_ROOT / "bench").glob("*.py") if "__main__" in p.read_text()}
    run = {bench for bench, _, _ in BENCHES} | set(OWN_TEST)
    assert runnable == run, runnable ^ run
    for bench, test in OWN_TEST.items():
        assert bench in (REPO_ROOT / "tests" / "e2e" / test).read_text(), f"{test} does not run {bench}"
