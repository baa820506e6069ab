"""CPU of an idle observer (design D16: ≤ 1 % of a core), woken by commits vs. polling every 20 ms.

    .venv/bin/python bench/observer_idle.py [--seconds 60]

Starts ``task-observer observer --mode loops`` on a throwaway MariaDB database
with a Centrifugo node, waits until it has registered and settled, then reads
its CPU from /proc over ``--seconds`` with nothing to do.  The same is then
measured with the safety poll at 20 ms (what polling alone needs for the
latency target) for comparison.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import tempfile
import time

from common import (  # type: ignore[import-not-found]
    REPO,
    centrifugo_node,
    process_tree_cpu,
    scratch_database,
    wait_observer_settled,
)


def idle_cpu(url: str, node: object, seconds: float, poll_ms: int) -> float:
    env = {
        **os.environ,
        "TASK_OBSERVER_ENV": "test",
        "TASK_OBSERVER_DATABASE_URL": url,
        "TASK_OBSERVER_CENTRIFUGO_API_URL": node.api_url,  # type: ignore[attr-defined]
        "TASK_OBSERVER_CENTRIFUGO_API_KEY": node.api_key,  # type: ignore[attr-defined]
        "TASK_OBSERVER_OBSERVER_METRICS_PORT": "0",
        "TASK_OBSERVER_RELAY_IDLE_MS": str(poll_ms),
        # Polling for the latency target polls at a fixed rate; woken, the safety poll backs off.
        "TASK_OBSERVER_RELAY_IDLE_BACKOFF": "8" if poll_ms >= 1000 else "1",
        "TASK_OBSERVER_DATA_DIR": tempfile.mkdtemp(),
        **{
            f"TASK_OBSERVER_{n}": secrets.token_hex(32)
            for n in ("CENTRIFUGO_TOKEN_SECRET", "SERVICE_TOKEN_SECRET", "EXECUTION_TOKEN_SECRET", "USER_TOKEN_SECRET")
        },
    }
    observer = subprocess.Popen(
        [str(REPO / ".venv" / "bin" / "task-observer"), "observer", "--mode", "loops"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_observer_settled(url, 5)  # imports, first passes and lease rounds are start-up, not idling
        before = process_tree_cpu(observer.pid)
        time.sleep(seconds)
        return process_tree_cpu(observer.pid) - before
    finally:
        observer.terminate()
        observer.wait(15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    with centrifugo_node() as node:
        with scratch_database() as url:
            woken = idle_cpu(url, node, args.seconds, 1000)
        with scratch_database() as url:
            polling = idle_cpu(url, node, args.seconds, 20)
    for name, cpu in (("woken by commits, safety poll 1 s -> 8 s", woken), ("polling every 20 ms", polling)):
        print(
            f"idle observer, {name:34s}: {cpu:6.3f} s CPU in {args.seconds:g} s"
            f" = {100 * cpu / args.seconds:5.2f} % of a core"
        )
    print(f"target: <= 1 % of a core; polling / woken = {polling / max(woken, 1e-9):.0f}x")


if __name__ == "__main__":
    sys.exit(main())
