"""The plugin's reporter on its own: the worker's CPU per activity for recording and sending.

    .venv/bin/python bench/reporter_path.py [--activities 1500] [--concurrency 1 4 20] [--rounds 3]
        [--spread MS] [--answer-ms MS]

Each activity reports as the plugin does — its STEP_STARTED as it begins, a progress, its ending
— through a ``Reporter`` with its real outbox file, writer thread and sender, whose transport
answers in memory at once (each binding bound with its STARTED, each event accepted). Activities
run ``--concurrency`` at a time, the loop idling 2 ms between waves: at 1, an activity alone, as
a worker running one activity at a time sees it. With ``--spread`` they run in lanes instead (a
workflow each, a pause of up to MS ms before each activity), so reports arrive apart as in a
worker, and ``--answer-ms`` gives the service's answers a round trip. No Temporal and no service: the figure is the
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
import random
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from task_status_interceptors._context import StepBinding
from task_status_interceptors._reporter import Reporter, ReporterConfig


class InstantService:
    """A transport that answers at once (or after ``answer_s``, as a service's round trip takes):
    every binding bound (the events sent with it accepted), every event accepted. It encodes what
    it is sent, as a real transport would."""

    def __init__(self, answer_s: float = 0.0) -> None:
        self.requests = 0
        self.answer_s = answer_s

    def report_events(
        self, body: list[dict[str, Any]], beats: list[dict[str, Any]] | None = None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        self.requests += 1
        json.dumps({"events": body, "heartbeats": beats or []})
        self._answer()
        return [{"accepted": True} for _ in body], None

    def report_pass(
        self, bindings: list[dict[str, Any]], body: list[dict[str, Any]], beats: list[dict[str, Any]]
    ) -> tuple[list[tuple[int, Any]] | None, list[dict[str, Any]], list[dict[str, Any]] | None]:
        self.requests += 1
        json.dumps({"bindings": bindings, "events": body, "heartbeats": beats})
        self._answer()
        return self._bound(bindings), [{"accepted": True} for _ in body], None

    def record_heartbeats(self, beats: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        self.requests += 1
        self._answer()
        return [{"accepted": True} for _ in beats]

    def _answer(self) -> None:
        if self.answer_s:
            time.sleep(self.answer_s)

    def bind_batch(self, items: list[dict[str, Any]]) -> list[tuple[int, Any]] | None:
        self.requests += 1
        json.dumps({"items": items})
        self._answer()
        return self._bound(items)

    @staticmethod
    def _bound(items: list[dict[str, Any]]) -> list[tuple[int, Any]]:
        answers: list[tuple[int, Any]] = []
        for i, item in enumerate(items):
            (body,) = item.values()
            answer = {
                "executionHandle": f"exh_{i:0>180}",
                "executionId": f"exe_{i}",
                "startedEvent": {"accepted": True},
            }
            answers.append((201, answer | {"events": [{"accepted": True} for _ in body.get("events", ())]}))
        return answers

    def close(self) -> None:
        pass


async def run_round(
    activities: int, concurrency: int, spread: float = 0.0, answer_s: float = 0.0
) -> tuple[float, float]:
    """(CPU ms per activity, requests per activity) of one round on a fresh outbox file."""
    reporter = Reporter(
        ReporterConfig("http://127.0.0.1:9", "token", "bench-worker", Path(tempfile.mkdtemp()) / "outbox.sqlite3")
    )
    await reporter.start()
    service = InstantService(answer_s)
    reporter._events = reporter._binds_over = service  # the sender's transport, answering in memory

    async def activity(n: int) -> None:
        execution = reporter.begin(f"run-{n}/1/1", StepBinding("tsk_bench", "02_parse"), 1)
        await asyncio.sleep(0)
        execution.progress(1, 2, "page")
        await asyncio.sleep(0)
        execution.completed()

    try:
        cpu = time.process_time()
        if spread:
            await lanes(activities, concurrency, spread, activity)
        else:
            for start in range(0, activities, concurrency):
                await asyncio.gather(*(activity(n) for n in range(start, min(activities, start + concurrency))))
                await asyncio.sleep(0.002)
        await reporter.drained(120)
        cpu = time.process_time() - cpu
    finally:
        await reporter.stop()
    return 1000 * cpu / activities, service.requests / activities


async def lanes(activities: int, concurrency: int, spread: float, activity: Callable[[int], Awaitable[None]]) -> None:
    """``concurrency`` lanes (a workflow each), each running its activities one after another with a
    pause of up to ``spread`` seconds before each (Temporal's round trips between a workflow's
    steps): reports of different lanes arrive in different loop iterations, as in a worker."""
    rng = random.Random(7)
    numbers = iter(range(activities))

    async def lane() -> None:
        for n in numbers:
            await asyncio.sleep(rng.uniform(0, spread))
            await activity(n)

    await asyncio.gather(*(lane() for _ in range(concurrency)))


async def bare_round(activities: int, concurrency: int, spread: float) -> float:
    """The lanes' own CPU per activity (their pauses and tasks) without a reporter: subtracted."""

    async def activity(n: int) -> None:
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    cpu = time.process_time()
    await lanes(activities, concurrency, spread, activity)
    return 1000 * (time.process_time() - cpu) / activities


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--activities", type=int, default=1500)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 20])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--spread",
        type=float,
        default=0.0,
        metavar="MS",
        help="lanes instead of waves: each activity after a pause of up to MS ms (its lane's workflow"
        " round trip), so reports arrive apart as in a worker; the lanes' own CPU is measured bare"
        " and subtracted",
    )
    parser.add_argument("--answer-ms", type=float, default=0.0, help="the service's answer takes this long")
    args = parser.parse_args()
    spread, answer = args.spread / 1000, args.answer_ms / 1000
    shape = f"lanes, pauses up to {args.spread:g} ms" if spread else "waves"
    print(
        f"{args.activities} activities a round, {args.rounds} rounds; STARTED, a progress and the ending"
        f" each; {shape}; answers after {args.answer_ms:g} ms"
    )
    for concurrency in args.concurrency:
        rounds = [asyncio.run(run_round(args.activities, concurrency, spread, answer)) for _ in range(args.rounds)]
        bare = (
            [asyncio.run(bare_round(args.activities, concurrency, spread)) for _ in range(args.rounds)]
            if spread
            else []
        )
        cpu = [r[0] - (statistics.median(bare) if bare else 0.0) for r in rounds]
        requests = statistics.median(r[1] for r in rounds)
        print(
            f"{concurrency:>3} at a time: {statistics.median(cpu):6.3f} ms CPU per activity (median;"
            f" rounds {' / '.join(f'{c:.3f}' for c in cpu)}), {requests:5.3f} requests per activity"
            + (f" (the lanes' own {statistics.median(bare):.3f} ms subtracted)" if bare else "")
        )


if __name__ == "__main__":
    main()
