"""What the choice of a shard engine rests on (docs/architecture.md, "Shards: the engine"),
held here so that a MariaDB whose Spider behaves otherwise is noticed: through Spider's head a
change commits on its bucket's shard as one transaction, but the relay's claim (``FOR UPDATE
SKIP LOCKED``) is not honoured, and the head's own way of moving a bucket (its partitions
redefined) moves no row — the bucket's data is simply no longer seen.

The run is ``bench/shard_engine.py`` (three shards and a head, each a MariaDB server of its own);
the bench prints the throughput and the head's CPU per change beside these."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.processes import REPO_ROOT, bench_figures, missing_service, needs_service

pytestmark = [pytest.mark.mariadb]


@pytest.mark.timeout(300)
def test_spider_routes_a_change_but_neither_claims_the_outbox_nor_moves_a_bucket(tmp_path: Path) -> None:
    needs_service("MariaDB's Spider engine", "scripts/services install spider")
    sys.path.insert(0, str(REPO_ROOT / "bench"))
    from shard_engine import SPIDER_PLUGIN  # type: ignore[import-not-found]

    if not SPIDER_PLUGIN.exists():
        missing_service("MariaDB's Spider engine", "scripts/services install spider")
    result = bench_figures(
        "shard_engine.py",
        ["--seconds", "1", "--threads", "4", "--rows", "2000"],
        tmp_path / "engine.json",
        timeout=240,
    )
    assert result["atomicity"] == {
        "commit_on_its_shard": True,
        "rollback_leaves_nothing": True,
        "elsewhere_nothing": True,
    }
    # A shard claims as the relay needs; through the head the second claimer is held by the
    # first's lock instead of skipping it.
    assert result["skip_locked_shard"] == "skipped"
    assert result["skip_locked_head"] != "skipped"
    move = result["move"]
    assert move["rows"] == 2000
    assert move["moved_rows_on_target"] == 0
    assert move["rows_seen_through_the_head_after"] == 0
    assert result["direct_changes_per_s"] > 0 and result["head_changes_per_s"] > 0
