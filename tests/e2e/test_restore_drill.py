"""The restore drill (docs/operations.md, "Backups and point-in-time recovery"): a backup taken
under load, the server restored to a point in time from it and its binary log, and the service
started on the restored database. Every change acknowledged before the point is there and none
after it; no version a client saw is issued again for another state (the fence); the client
shows every task at its restored version; the outbox drains; the archive still verifies.

The run is ``bench/restore_drill.py`` (its own primary, API, observer, Centrifugo node,
producers and WebSocket client); this test holds its invariants, the bench prints its timings."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.processes import bench_figures, missing_service, needs_service

pytestmark = [pytest.mark.centrifugo, pytest.mark.mariadb]


@pytest.mark.timeout(400)
def test_a_point_in_time_restore_keeps_what_was_acknowledged_before_it_and_clients_follow(tmp_path: Path) -> None:
    needs_service("mariadb-backup", "scripts/services install backup")
    if shutil.which("mariadb-backup") is None:
        missing_service("mariadb-backup", "scripts/services install backup")
    (run,) = bench_figures("restore_drill.py", [], tmp_path / "drill.json", timeout=360)
    assert run["acked_before"] > 0 and run["acked_after"] > 0 and run["acked_restored"] > 0
    assert run["lost"] == [], "a change acknowledged before the point is not in the restored database"
    assert run["resurrected"] == [], "a change acknowledged after the point came back with the restore"
    assert run["later_lost"] == [], "a change acknowledged by the restored service is missing"
    assert run["fence"]["task"] > 0 and run["not_fenced"] == [], "a restored version is not above what a client saw"
    assert run["reused"] == [], "a version a client had was issued again for another state"
    assert run["converged_s"] is not None, f"the client never showed the restored versions: {run['behind']}"
    assert run["outbox_pending"] == 0, "the relay did not drain what the point left unpublished"
    assert run["archive_ok"] and run["archive_manifests"] > 0, run["archive_report"]
