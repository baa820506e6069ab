"""``task-observer dev`` (the README's first command).

It starts, the example run reaches SUCCEEDED on the dashboard, and Ctrl-C stops it cleanly.
"""

from __future__ import annotations

import contextlib
import os
import re
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


REPO = Path(__file__).resolve().parents[2]
# Each example bounds its own waits (two minutes at most); this bounds the lines as a whole.
EXAMPLES_TIMEOUT = 240


def readme_examples() -> str:
    """The shell lines of the README's "Run the examples" block."""
    text = (REPO / "README.md").read_text()
    section = text.split("### Run the examples", 1)[1]
    return section.split("```bash\n", 1)[1].split("```", 1)[0]


def run_the_readme_examples(
    tmp_path: Path, env: dict[str, str], api: int, temporal: int, user_token: str, log: Path
) -> None:
    """The README's example commands, next to the running dev stack: they work, print only their
    own runs, and never take the demo's (different task queues)."""
    demo_runs_before = log.read_text().count("demo run ")
    script = readme_examples().replace("127.0.0.1:8080", f"127.0.0.1:{api}")
    script = script.replace("127.0.0.1:7233", f"127.0.0.1:{temporal}")
    lines = [line for line in script.splitlines() if "TASK_STATUS_USER_TOKEN=" not in line]  # set below
    venv_bin = str(Path(sys.executable).parent)
    # Into a file, unbuffered, in a session of its own: what each example printed is in the failure
    # message, and a process the lines left behind is stopped with them instead of holding a pipe open.
    printed = tmp_path / "examples.out"
    with printed.open("w") as out:
        examples = subprocess.Popen(
            ["bash", "-euc", "\n".join(lines)],
            cwd=REPO,
            env={
                **env,
                "PATH": f"{venv_bin}:{env['PATH']}",
                "TASK_STATUS_USER_TOKEN": user_token,
                "PYTHONUNBUFFERED": "1",
            },
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            returncode = examples.wait(EXAMPLES_TIMEOUT)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(examples.pid, signal.SIGKILL)
    output = printed.read_text()
    assert returncode == 0, (
        f"the README's examples {'exited with ' + str(returncode) if returncode is not None else 'did not finish'}:\n"
        + output[-4000:]
        + "\n--- task-observer dev ---\n"
        + log.read_text()[-3000:]
    )
    watched = [line for line in output.splitlines() if line.startswith("contract-")]
    assert watched and any("SUCCEEDED" in line for line in watched), output
    titles = {line.split()[0] for line in watched}
    assert len(titles) == 1  # its own run only, though the demo's runs went on meanwhile
    assert "exported " in output
    # The demo's runs go on (none were taken by the example workers: no demo run hangs) …
    wait_until(lambda: log.read_text().count("demo run ") > demo_runs_before, 120, "a demo run after the examples")
    # … and every report of a demo task came from the demo's worker, every example task's from the examples'.
    import sqlite3

    with sqlite3.connect(tmp_path / "task-observer.sqlite3") as db:
        producers = db.execute(
            "SELECT t.title, e.producer_id FROM task_event_log e JOIN task t ON t.id = e.task_id"
            " WHERE e.event_type LIKE 'STEP_%' AND e.event_type != 'STEP_HEALTH_CHANGED'"
        ).fetchall()
    demo = {producer for title, producer in producers if title.startswith("document-")}
    examples = {producer for title, producer in producers if not title.startswith("document-")}
    assert demo == {"demo-worker"}, demo
    assert examples and "demo-worker" not in examples, examples


def _start_dev(tmp_path: Path) -> tuple[tuple[int, ...], dict[str, str], Path, subprocess.Popen[bytes]]:
    """`task-observer dev` on free ports with its data in ``tmp_path``: (ports, env, its output file, the process)."""
    ports = api, cent, temporal, temporal_ui, metrics = tuple(free_port() for _ in range(5))
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
                "--temporal-ui-port",
                str(temporal_ui),
                "--metrics-port",
                str(metrics),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return ports, env, log, proc


@pytest.mark.timeout(600)  # the sum of its bounded waits: each fails first, with what it saw
def test_dev_stack_runs_the_demo_and_stops_cleanly(tmp_path: Path) -> None:
    require_dashboard()
    (api, cent, temporal, temporal_ui, metrics), env, log, proc = _start_dev(tmp_path)
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
        # What it prints answers: the observer's metrics, and Temporal's web UI showing the same runs.
        printed_out = log.read_text()
        assert f"http://127.0.0.1:{metrics}/metrics" in printed_out and f"http://127.0.0.1:{temporal_ui}" in printed_out
        assert "the example   runs 10 times, 30 s apart" in printed_out  # paced: a user's own runs stay visible
        observer_metrics = httpx.get(f"http://127.0.0.1:{metrics}/metrics", timeout=5)
        assert observer_metrics.status_code == 200 and "outbox_oldest_pending_age_seconds" in observer_metrics.text
        wait_until(
            lambda: httpx.get(f"http://127.0.0.1:{temporal_ui}/", timeout=5).status_code == 200, 30, "Temporal UI"
        )

        run_the_readme_examples(tmp_path, env, api, temporal, token, log)

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


def _outbox(data_dir: Path, query: str) -> int:
    import sqlite3

    with contextlib.closing(sqlite3.connect(data_dir / "task-observer.sqlite3")) as db:
        return int(db.execute(query).fetchone()[0] or 0)


def _pid_of(printed: str, name: str) -> int:
    """The pid the stack printed for a service last (the banner, then each restart)."""
    pids = re.findall(rf"^  {name} .*\bpid (\d+)\)$", printed, re.MULTILINE)
    assert pids, printed
    return int(pids[-1])


@pytest.mark.timeout(420)
def test_dev_stack_restarts_a_dead_child_and_stops_with_a_clear_message_when_it_keeps_dying(tmp_path: Path) -> None:
    (api, cent, temporal, temporal_ui, metrics), env, log, proc = _start_dev(tmp_path)
    try:
        wait_until(lambda: "Press Ctrl-C" in log.read_text() or proc.poll() is not None, 120, "the dev stack")
        assert proc.poll() is None, log.read_text()
        printed = log.read_text()
        # Each service with its address and pid.
        assert re.search(rf"status API +http://127\.0\.0\.1:{api} .*pid {proc.pid}\b", printed), printed
        centrifugo_pid, temporal_pid = _pid_of(printed, "centrifugo"), _pid_of(printed, "temporal")
        assert f"127.0.0.1:{cent}" in printed and f"127.0.0.1:{temporal}" in printed

        def runs_finished() -> int:
            return log.read_text().count("demo run ")

        wait_until(lambda: runs_finished() >= 1, 120, "a first demo run")

        # Centrifugo killed: named, restarted on its port, and live delivery resumes (the relay publishes again).
        os.kill(centrifugo_pid, signal.SIGKILL)
        wait_until(lambda: "centrifugo restarted" in log.read_text(), 60, "Centrifugo restarted")
        printed = log.read_text()
        assert f"centrifugo (pid {centrifugo_pid}) exited (killed by SIGKILL); restarting it (1 of 3)" in printed
        restarted = _pid_of(printed, "centrifugo")
        assert restarted != centrifugo_pid
        assert httpx.get(f"http://127.0.0.1:{cent}/health", timeout=5).status_code == 200
        # Rows committed after the restart reach it (the relay publishes again, nothing waits).
        newest = _outbox(tmp_path, "SELECT MAX(id) FROM task_outbox")
        wait_until(
            lambda: _outbox(tmp_path, "SELECT MAX(id) FROM task_outbox WHERE status = 'PUBLISHED'") > newest,
            60,
            "a row committed after the restart published",
        )

        # Temporal killed: restarted with its data, and the demo's runs go on (worker and observer reconnect).
        os.kill(temporal_pid, signal.SIGKILL)
        wait_until(lambda: "temporal restarted" in log.read_text(), 90, "Temporal restarted")
        assert f"temporal (pid {temporal_pid}) exited (killed by SIGKILL)" in log.read_text()
        finished = runs_finished()
        wait_until(lambda: runs_finished() > finished, 120, "a demo run after Temporal's restart")

        # A child that keeps dying is not restarted forever: the stack stops, saying what to do.
        for kill in range(3):
            restarts = log.read_text().count("centrifugo restarted")
            os.kill(_pid_of(log.read_text(), "centrifugo"), signal.SIGKILL)
            if kill < 2:  # the second and third restarts are allowed
                wait_until(lambda n=restarts: log.read_text().count("centrifugo restarted") > n, 60, "a restart")
        proc.wait(60)
        printed = log.read_text()
        assert proc.returncode == 1, printed[-2000:]
        assert "restarted 3 times within 10 minutes; the demo stack stops" in printed
        assert f"Its log: {tmp_path / 'centrifugo.log'}" in printed
        assert "run `task-observer dev` again" in printed
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
    leftovers = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert leftovers == [], "processes left behind: " + " ".join(leftovers)
