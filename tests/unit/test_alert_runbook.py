"""Every alert of deploy/prometheus/alerts.yml points at its own section of docs/runbook.md (what
the user sees, how to confirm, what to do), and every alert has a promtool test."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RULES = (ROOT / "deploy" / "prometheus" / "alerts.yml").read_text()
TESTS = (ROOT / "deploy" / "prometheus" / "alerts.test.yml").read_text()
RUNBOOK = (ROOT / "docs" / "runbook.md").read_text()


def _alerts() -> list[tuple[str, str]]:
    blocks = re.split(r"^\s+- alert: ", RULES, flags=re.M)[1:]
    found = []
    for block in blocks:
        name = block.split("\n", 1)[0].strip()
        anchor = re.search(r'runbook: "docs/runbook\.md#([a-z0-9-]+)"', block)
        found.append((name, anchor.group(1) if anchor else ""))
    return found


def test_each_alert_has_a_runbook_section_and_a_rules_test() -> None:
    alerts = _alerts()
    assert len(alerts) >= 20
    sections = {heading.strip().lower() for heading in re.findall(r"^## (.+)$", RUNBOOK, flags=re.M)}
    tested = set(re.findall(r"alertname: (\w+)", TESTS))
    for name, anchor in alerts:
        assert anchor == name.lower(), f"{name} points at #{anchor}"
        assert name.lower() in sections, f"docs/runbook.md has no section for {name}"
        for part in ("**Users see**", "**Confirm**", "**Do**"):
            section = RUNBOOK.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]
            assert part in section, f"{name}'s runbook section lacks {part}"
        assert name in tested, f"{name} has no promtool test"


def test_the_jobs_the_alerts_name_are_the_ones_the_scrape_configuration_scrapes() -> None:
    # (promtool check config, run by ./scripts/test, checks the file is valid; this checks it fits.)
    scrape = (ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text()
    jobs = set(re.findall(r"^\s+- job_name: (\S+)$", scrape, flags=re.M))
    named = set(re.findall(r'job="([^"]+)"', RULES))
    assert named and named <= jobs, named - jobs
    assert re.search(r"^rule_files:\n  - alerts\.yml$", scrape, flags=re.M)
