"""Commit → rendered in a real browser page, p50/p99 (design D16: p99 < 150 ms).

    .venv/bin/python bench/e2e_browser.py [--rate 20] [--seconds 15]

The status API (serving the dashboard) and the outbox relay (same idle sleep as
the observer) run on threads of this process, Centrifugo is its own process,
and the dashboard runs in headless Chromium. A producer thread commits
progress events through StatusService at a fixed rate; a MutationObserver in
the page records the wall-clock time at which each task version appeared in
the DOM. Latency = that time − the time the commit returned (same machine
clock). The page redraws once per animation frame, so versions that arrive in
the same frame are rendered together; only rendered versions are counted.
"""

from __future__ import annotations

import argparse
import time
import uuid

from common import dashboard_stack, percentile, running_task  # type: ignore[import-not-found]

from status.app import commands as c
from status.domain.clock import utcnow
from status.domain.model import Progress
from status.infra.tokens import UserTokens
from tests.support.browser import chromium, open_dashboard
from tests.support.relay_pump import RelayPump


def run(rate: float, seconds: float) -> None:
    with dashboard_stack() as (settings, engine, service, port, node):
        task_id, claims = running_task(service, "alice", "Report.pdf")
        token = UserTokens(settings.user_token_secret).issue("bench", "alice")
        committed: dict[int, float] = {}
        with RelayPump(engine, node.api_url, node.api_key), chromium() as (_, browser):
            page = open_dashboard(browser, f"http://127.0.0.1:{port}", token)
            page.wait_for_selector('#connection[data-state="LIVE"]', timeout=30_000)
            page.wait_for_selector(f'article.task[data-task-id="{task_id}"]', timeout=30_000)

            seq, next_at, end = 1, time.perf_counter(), time.perf_counter() + seconds
            while time.perf_counter() < end:
                seq += 1
                result = service.report_event(
                    claims,
                    c.ReportEvent(uuid.uuid4().hex, "STEP_PROGRESS", seq, utcnow(), progress=Progress(seq % 100, 100)),
                )
                committed[int(result["taskVersion"])] = time.time() * 1000
                next_at += 1 / rate
                time.sleep(max(0.0, next_at - time.perf_counter()))
            last = max(committed)
            page.wait_for_selector(f'article.task[data-task-id="{task_id}"][data-version="{last}"]', timeout=30_000)
            changes = page.evaluate("window.__versionChanges")
            regressions = page.evaluate("window.__versionRegressions")
            page.context.close()
    rendered = {int(ch["version"]): float(ch["at"]) for ch in changes if ch["id"] == task_id}
    latencies = [rendered[v] - committed[v] for v in committed if v in rendered]
    print(
        f"commit→rendered in Chromium  {len(latencies)}/{len(committed)} versions rendered "
        f"({len(committed) / seconds:.0f} events/s): p50 {percentile(latencies, 0.5):.0f} ms  "
        f"p99 {percentile(latencies, 0.99):.0f} ms  max {max(latencies or [0]):.0f} ms"
        "   (target p99 < 50 ms at 1,000 events/s over 1,000 tasks)"
    )
    print(f"versions shown out of order: {len(regressions)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=20)
    parser.add_argument("--seconds", type=float, default=15)
    args = parser.parse_args()
    run(args.rate, args.seconds)


if __name__ == "__main__":
    main()
