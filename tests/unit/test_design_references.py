"""The design the code refers to is in the repository (docs/design.md), and every reference finds it.

Comments, docstrings and docs cite ``design D<n>`` (a section or rule) and ``design P<n>`` (a
property the suite proves). A reference to a section that does not exist fails here, and so does
a citation of a document the repository does not hold (the specification and the design notes
the project started from, the issue tracker: what they said that the code relies on is in
docs/design.md).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = (ROOT / "docs" / "design.md").read_text()
SOURCES = ["status", "observer", "task_observer", "interceptors", "migrations", "tests", "bench", "deploy", "docs",
           "scripts", "web/src", "web/test", "web/dashboard"]  # fmt: skip
SUFFIXES = {".py", ".ts", ".proto", ".md", ".yml", ".yaml", ".toml", ".sh", ".ini", ""}
CITED = re.compile(r"design ((?:[DP]\d+(?:\.\d+)*(?:, |/| and )?)+)")
# Written so that this file does not match itself.
OUTSIDE = re.compile("|".join([r"\bSP" + r"EC\b", r"\bse" + r"ed(?:'s)? §", r"(?<![\w-])A" + r"C\d{1,2}\b"]))
# The tracker's issues: code and docs say the reason themselves; the dated histories
# (CHANGELOG.md, docs/benchmarks.md) may say which issue a change answered.
TRACKER = re.compile(r"\(iss" + r"ue[ :]")
HISTORIES = {"CHANGELOG.md", "benchmarks.md"}


def _files() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", ROOT / "pyproject.toml"]
    for top in SOURCES:
        for path in (ROOT / top).rglob("*"):
            skipped = "node_modules" in path.parts or "dist" in path.parts
            if path.is_file() and path.suffix in SUFFIXES and not skipped:
                found.append(path)
    return [p for p in found if p.name != "openapi.json"]


def _sections() -> set[str]:
    headings = set(re.findall(r"^#+ (D\d+(?:\.\d+)*) ", DESIGN, re.M))
    rules = set(re.findall(r"^\*\*(D8\.\d+) ", DESIGN, re.M))
    properties = set(re.findall(r"^\* \*\*(P\d+)\*\*", DESIGN, re.M))
    return headings | rules | properties


def test_every_design_reference_names_a_section_of_the_design() -> None:
    known = _sections()
    assert {"D1", "D8.1", "D8.16", "P1", "P33"} <= known  # the reader below finds what it should
    unknown = [
        f"{path.relative_to(ROOT)}: design {ref}"
        for path in _files()
        for cited in CITED.findall(path.read_text(errors="replace"))
        for ref in re.findall(r"[DP]\d+(?:\.\d+)*", cited)
        if ref not in known
    ]
    assert not unknown, unknown


def test_nothing_cites_a_document_the_repository_does_not_hold() -> None:
    here = Path(__file__).resolve()
    outside = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}"
        for path in _files()
        if path.resolve() != here
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line) or (path.name not in HISTORIES and TRACKER.search(line))
    ]
    assert not outside, outside
