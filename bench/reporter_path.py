"""The plugin's reporter on its own: the worker's CPU per activity for recording and sending.

    .venv/bin/python bench/reporter_path.py [--activities 1500] [--concurrency 1 4 20] [--rounds 3]

Each activity reports as the plugin does — its STEP_STARTED as it begins, a progress, its ending
— through a ``Reporter`` with its real outbox file, writer thread and sender, whose transport
answers in memory at once (each binding bound with its STARTED, each event accepted). Activities
run ``--concurrency`` at a time, the loop idling 2 ms between waves: at 1, an activity alone, as
a worker running one activity at a time sees it. No Temporal and no service: the figure is the
reporter's part of ``plugin_overhead.py``'s worker figure, without the dev server's and the
API's noise on the same cores — steady enough to compare designs of the outbox and the sender
(docs/benchmarks.md, 2026-12-06 seventh session). Printed per concurrency: the process's CPU per
activity (every thread: the loop, the writer, the thread pool; each round's, then the median),
and the sender's requests per activity (fewer, fuller requests are what the service pays less
for).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from task_status_interceptors._context import StepBinding
from task_status_interceptors._reporter import Reporter, ReporterConfig


class InstantService:
    """A transport that answers at once: every binding bound (its STARTED accepted), every event
    accepted. It encodes what it is sent, as a real transport would."""

    def __init__(self) -> None:
        self.requests = 0

    async def report_events(
        self, body: list[dict[str, Any]], beats: list[dict[str, Any]] | None = None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        self.requests += 1
        json.dumps({"events": body, "heartbeats": beats or []})
        return [{"accepted": True} for _ in body], None

    async def record_heartbeats(self, beats: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        self.requests += 1
        return [{"accepted": True} for _ in beats]

    async def bind_batch(self, items: list[dict[str, Any]]) -> list[tuple[int, Any]] | None:
        self.requests += 1
        json.dumps({"items": items})
        return [
            (201, {"executionHandle": f"exh_{i:0>180}", "executionId": f"exe_{i}", "startedEvent": {"accepted": True}})
            for i in range(len(items))
        ]

    async def close(self) -> None:
        pass


async def run_round(activities: int, concurrency: int) -> tuple[float, float]:
    """(CPU ms per activity, requests per activity) of one round on a fresh outbox file."""
    reporter = Reporter(
        ReporterConfig("http://127.0.0.1:9", "token", "bench-worker", Path(tempfile.mkdtemp()) / "outbox.sqlite3")
    )
    await reporter.start()
    service = InstantService()
    reporter._events = reporter._binds_over = service  # the sender's transport, answering in memory

    async def activity(n: int) -> None:
        execution = reporter.begin(f"run-{n}/1/1", StepBinding("tsk_bench", "02_parse"), 1)
        await asyncio.sleep(0)
        execution.progress(1, 2, "page")
        await asyncio.sleep(0)
        execution.completed()

    try:
        cpu = time.process_time()
        for start in range(0, activities, concurrency):
            await asyncio.gather(*(activity(n) for n in range(start, min(activities, start + concurrency))))
            await asyncio.sleep(0.002)
        await reporter.drained(120)
        cpu = time.process_time() - cpu
    finally:
        await reporter.stop()
    return 1000 * cpu / activities, service.requests / activities


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--activities", type=int, default=1500)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 20])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"{args.activities} activities a round, {args.rounds} rounds; STARTED, a progress and the ending each")
    for concurrency in args.concurrency:
        rounds = [asyncio.run(run_round(args.activities, concurrency)) for _ in range(args.rounds)]
        cpu = [r[0] for r in rounds]
        requests = statistics.median(r[1] for r in rounds)
        print(
            f"{concurrency:>3} at a time: {statistics.median(cpu):6.3f} ms CPU per activity (median;"
            f" rounds {' / '.join(f'{c:.3f}' for c in cpu)}), {requests:5.3f} requests per activity"
        )


if __name__ == "__main__":
    main()
