"""The complexity budget: ruff refuses a function past ten paths (C901, pyproject.toml); the
functions that were past it when the check came are marked ``noqa: C901``, and their number may
only go down. Split one along its seams, remove its mark, and lower BUDGET here."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUDGET = 27
MARK = re.compile(r"#\s*noqa: C901\s*$")


def test_no_more_functions_are_excused_from_the_complexity_limit() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    marked = [
        f"{path}:{number}"
        for path in tracked
        if (REPO / path).exists()
        for number, line in enumerate((REPO / path).read_text().splitlines(), start=1)
        if MARK.search(line)
    ]
    assert len(marked) <= BUDGET, f"{len(marked)} functions excused (budget {BUDGET}): {marked}"
