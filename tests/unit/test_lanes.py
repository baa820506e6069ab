"""The fast lane (``./scripts/test --fast``) skips what needs a service, saying which; every other
run (CI runs every lane) fails on a missing service instead of skipping it quietly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROBE = """
from tests.support.processes import missing_service, needs_service


def test_acquires_a_service():
    needs_service("a service", "its command")


def test_finds_a_service_missing():
    missing_service("a service", "its command")
"""


@pytest.mark.parametrize(("lane", "outcome"), [("fast", "2 skipped"), ("", "1 failed, 1 passed")])
def test_a_missing_service_skips_only_in_the_fast_lane(tmp_path: Path, lane: str, outcome: str) -> None:
    (tmp_path / "test_probe.py").write_text(PROBE)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-c", os.devnull, str(tmp_path)],
        env={**os.environ, "TASK_OBSERVER_TEST_LANE": lane, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert outcome in result.stdout, result.stdout + result.stderr
    if lane == "fast":
        assert "the fast lane runs without a service (`its command` provides it)" in result.stdout + result.stderr
