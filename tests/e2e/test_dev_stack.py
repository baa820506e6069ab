"""``task-observer dev`` (the README's first command).

It starts, the example run reaches SUCCEEDED on the dashboard, and Ctrl-C stops it cleanly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect

from status.infra.tokens import UserTokens
from tests.support.browser import chromium, open_dashboard, require_dashboard, screenshot
from tests.support.processes import free_port, wait_until

pytestmark = [pytest.mark.temporal, pytest.mark.centrifugo]


def test_dev_stack_runs_the_demo_and_stops_cleanly(tmp_path: Path) -> None:
    require_dashboard()
    api, cent, temporal = free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASK_OBSERVER_")}
    env.update({"TASK_OBSERVER_DATA_DIR": str(tmp_path), "TASK_OBSERVER_ENV": "dev"})
    log = tmp_path / "dev.out"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("task-observer")),
                "dev",
                "--port",
                str(api),
                "--centrifugo-port",
                str(cent),
                "--temporal-port",
                str(temporal),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: "Press Ctrl-C" in log.read_text() or proc.poll() is not None, 120, "the dev stack")
        assert proc.poll() is None, log.read_text()
        secrets_env = dict(
            line.split("=", 1) for line in (tmp_path / "dev-secrets.env").read_text().splitlines() if "=" in line
        )
        token = UserTokens(secrets_env["TASK_OBSERVER_USER_TOKEN_SECRET"]).issue("demo", "alice")

        def succeeded() -> bool:
            response = httpx.get(
                f"http://127.0.0.1:{api}/api/me/tasks", headers={"Authorization": f"Bearer {token}"}, timeout=5
            )
            return any(t["lifecycleStatus"] == "SUCCEEDED" for t in response.json().get("tasks", []))

        wait_until(succeeded, 120, "an example run reaching SUCCEEDED")

        # The login it prints opens the dashboard, which shows that run as SUCCEEDED.
        printed = next(line for line in log.read_text().splitlines() if "/dashboard/#token=" in line)
        dashboard_token = printed.split("#token=", 1)[1].strip()
        with chromium() as (_, browser):
            page = open_dashboard(browser, f"http://127.0.0.1:{api}", dashboard_token)
            expect(page.locator("#connection")).to_have_attribute("data-state", "LIVE", timeout=30_000)
            expect(page.locator('article.task[data-status="SUCCEEDED"]').first).to_be_visible(timeout=30_000)
            screenshot(page, "dev-stack-dashboard")
            page.context.close()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail("task-observer dev did not stop on Ctrl-C")
    assert proc.returncode == 0, log.read_text()[-2000:]
    leftovers = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert leftovers == [], "processes left behind: " + " ".join(leftovers)
