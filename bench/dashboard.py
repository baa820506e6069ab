"""Dashboard main-thread cost in headless Chromium with 1,000 tasks.

    .venv/bin/python bench/dashboard.py [--tasks 1000] [--busy 100] [--rate 100] [--seconds 10]

The status API (serving the dashboard) and the outbox relay run on threads of this process,
Centrifugo is its own process, the dashboard runs in headless Chromium, and the load generator
is a separate process posting progress events over HTTP at a fixed rate spread over ``--busy``
running tasks.  Measured in the page: long tasks (> 50 ms, PerformanceObserver) and the main
thread's busy time (Chrome's TaskDuration metric), first while the page loads ``--tasks`` tasks,
then while the events arrive.  Targets (1,000 tasks, 100 events/s): no long task over 50 ms,
main thread busy < 20 %.
"""

from __future__ import annotations

import argparse
import multiprocessing
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from common import dashboard_stack  # type: ignore[import-not-found]

from status.app import commands as c
from status.domain.auth import Role, ServicePrincipal
from status.infra.tokens import UserTokens
from tests.support.browser import VERSION_WATCH, chromium
from tests.support.relay_pump import RelayPump

LONG_TASKS = """
window.__longTasks = [];
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) window.__longTasks.push({ start: entry.startTime, duration: entry.duration });
}).observe({ type: 'longtask', buffered: true });
"""


def produce(base_url: str, tokens: list[str], rate: float, seconds: float, clients: int = 4) -> None:
    """The load generator (its own process): STEP_PROGRESS events round-robin over the executions."""
    import httpx

    def client(offset: int) -> None:
        mine = tokens[offset::clients]
        seqs = dict.fromkeys(mine, 1)
        interval = clients / rate
        next_at, end = time.perf_counter(), time.perf_counter() + seconds
        with httpx.Client(base_url=base_url, timeout=30) as http:
            i = 0
            while time.perf_counter() < end:
                token = mine[i % len(mine)]
                i += 1
                seqs[token] += 1
                body = {
                    "eventId": uuid.uuid4().hex,
                    "eventType": "STEP_PROGRESS",
                    "sourceSeq": seqs[token],
                    "occurredAt": datetime.now(UTC).isoformat(),
                    "progress": {"current": seqs[token] % 100, "total": 100, "unit": "page"},
                }
                http.post("/internal/v1/task-events", json=body, headers={"Authorization": f"Bearer {token}"})
                next_at += interval
                time.sleep(max(0.0, next_at - time.perf_counter()))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _figures(page: Any, cdp: Any, since: float) -> tuple[list[float], float]:
    long = [t["duration"] for t in page.evaluate("window.__longTasks") if t["start"] >= since]
    metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    return long, float(metrics["TaskDuration"])


def _print_profile(profile: dict[str, Any], top: int = 25) -> None:
    """Self time by function from a CDP CPU profile (samples × interval)."""
    nodes = {n["id"]: n for n in profile["nodes"]}
    counts: dict[int, int] = {}
    for sample in profile.get("samples", []):
        counts[sample] = counts.get(sample, 0) + 1
    total = sum(counts.values()) or 1
    by_function: dict[str, int] = {}
    for node_id, count in counts.items():
        frame = nodes[node_id]["callFrame"]
        name = f"{frame['functionName'] or '(anonymous)'} {Path(frame['url']).name}:{frame['lineNumber']}"
        by_function[name] = by_function.get(name, 0) + count
    print("page CPU profile, self time:")
    for name, count in sorted(by_function.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {100 * count / total:5.1f} %  {name}")


def run(tasks: int, busy: int, rate: float, seconds: float, profile: bool = False) -> None:
    with dashboard_stack(internal_rate_per_second=0, public_rate_per_second=0) as (
        settings,
        engine,
        service,
        port,
        node,
    ):
        coordinator = ServicePrincipal("bench", "bench", "s", frozenset({Role.COORDINATOR}))
        task_ids: list[str] = []
        for start in range(0, tasks, 100):
            created = service.create_workflow(
                coordinator,
                c.CreateWorkflow(
                    client_workflow_key=uuid.uuid4().hex,
                    owner_id="alice",
                    title=f"Batch {start // 100}",
                    initial_tasks=tuple(
                        c.NewTask(f"t{i}", f"Document {i}.pdf", known_steps=(c.KnownStep("s", "DOCUMENT.PARSE"),))
                        for i in range(start, min(tasks, start + 100))
                    ),
                ),
            )
            task_ids += [t["taskId"] for t in created["tasks"]]
        tokens = []
        for task_id in task_ids[-busy:]:  # the newest: on the first page and off it
            ctx = service.activate_step(coordinator, c.ActivateStep(task_id, "s", 1, "p"))
            claims = service._tokens.verify(ctx.execution_token, service.now())
            service.report_event(claims, c.ReportEvent(uuid.uuid4().hex, "STEP_STARTED", 1, datetime.now(UTC)))
            tokens.append(ctx.execution_token)
        user_token = UserTokens(settings.user_token_secret).issue("bench", "alice")
        with RelayPump(engine, node.api_url, node.api_key), chromium() as (_, browser):
            context = browser.new_context(viewport={"width": 1280, "height": 860})
            context.add_init_script(VERSION_WATCH)
            context.add_init_script(LONG_TASKS)
            page = context.new_page()
            cdp = context.new_cdp_session(page)
            cdp.send("Performance.enable")
            wall = time.perf_counter()
            task_before = 0.0
            if profile:
                cdp.send("Profiler.enable")
                cdp.send("Profiler.setSamplingInterval", {"interval": 200})
                cdp.send("Profiler.start")
            page.goto(f"http://127.0.0.1:{port}/dashboard/#token={user_token}")
            page.wait_for_selector('#connection[data-state="LIVE"]', timeout=60_000)
            page.wait_for_function(f"window.taskStatus.store.taskIds().length >= {tasks}", timeout=60_000)
            page.wait_for_selector("article.task", timeout=60_000)
            loaded_s = time.perf_counter() - wall
            long_load, task_loaded = _figures(page, cdp, 0)
            if profile:
                print("-- while loading")
                _print_profile(cdp.send("Profiler.stop")["profile"])
            mark = page.evaluate("performance.now()")
            started = time.perf_counter()
            producer = multiprocessing.get_context("spawn").Process(
                target=produce, args=(f"http://127.0.0.1:{port}", tokens, rate, seconds)
            )
            if profile:
                cdp.send("Profiler.enable")
                cdp.send("Profiler.start")
            producer.start()
            producer.join()
            if profile:
                print("-- while events arrive")
                _print_profile(cdp.send("Profiler.stop")["profile"])
            page.wait_for_timeout(1000)  # let the last publications arrive and render
            elapsed = time.perf_counter() - started
            long_run, task_run = _figures(page, cdp, mark)
            regressions = page.evaluate("window.__versionRegressions")
            cards = page.locator("article.task").count()
            context.close()
    print(f"machine: {multiprocessing.cpu_count()} cores; {tasks} tasks, {busy} running, {rate:.0f} events/s")
    print(
        f"load   all {tasks} tasks in the store after {loaded_s:.2f} s ({cards} cards drawn);"
        f" long tasks {len(long_load)}, {sum(long_load):.0f} ms, max {max(long_load or [0]):.0f} ms;"
        f" main thread {task_loaded - task_before:.2f} s"
    )
    busy_pct = 100 * (task_run - task_loaded) / elapsed
    print(
        f"events {seconds:.0f} s at {rate:.0f}/s: long tasks {len(long_run)} ({sum(long_run):.0f} ms),"
        f" max {max(long_run or [0]):.0f} ms (target: none over 50 ms);"
        f" main thread busy {busy_pct:.1f} % (target < 20 %)"
    )
    print(f"versions shown out of order: {len(regressions)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--busy", type=int, default=100)
    parser.add_argument("--rate", type=float, default=100)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--profile", action="store_true", help="print the page's CPU profile of the event phase")
    args = parser.parse_args()
    run(args.tasks, args.busy, args.rate, args.seconds, args.profile)


if __name__ == "__main__":
    main()
