"""What one change stores in the outbox and costs the relay to read, one row per change against
one row per channel, compressed.

    .venv/bin/python bench/outbox_bytes.py [--steps 3 50] [--viewers 1 3] [--groups 0 2]

For a task with ``--steps`` known steps (one running), seen by ``--viewers`` users and ``--groups``
projects, it builds a progress change's messages with the service's own builders and prints the
JSON bytes stored per change — one row per channel (each with its projection, the earlier format)
and one row per change (each projection once), and what that row stores compressed — beside the
CPU the API spends compressing it and the relay spends turning the stored row back into its
publications (expanding and decoding the row, encoding each message's data). No services.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

import orjson

from status.app import outbox
from status.domain.lifecycle import Lifecycle
from status.domain.messages import Message
from status.domain.model import Progress
from status.domain.stepset import StepSet
from status.infra.outbox_rows import PACKED, compressed, pack, unpack
from tests.support.states import NOW, step_state, task_state


def change(steps: int, viewers: int, groups: int) -> list[Message]:
    task = task_state(version=40)
    states = [
        step_state(step_id=f"s{i:02d}", client_step_key=f"s{i:02d}", execution_id=f"exe_{i}", version=3)
        for i in range(steps)
    ]
    states[0] = replace(
        states[0], lifecycle=Lifecycle.RUNNING, business_status="RUNNING", progress=Progress(7, 10), started_at=NOW
    )
    for i in range(1, steps // 2):
        states[i] = replace(
            states[i],
            lifecycle=Lifecycle.SUCCEEDED,
            business_status="SUCCEEDED",
            started_at=NOW - timedelta(minutes=3),
            finished_at=NOW - timedelta(minutes=1),
        )
    return outbox.task_messages(
        task,
        StepSet.of(states),
        [task.owner_id, *(f"viewer-{i}" for i in range(1, viewers))],
        notice=None,
        trigger={"eventId": "evt-1", "eventType": "STEP_PROGRESS", "committedAt": "2026-12-02T12:00:00.000Z"},
        must_deliver=False,
        event_id="evt-1",
        broadcast=False,
        now=NOW,
        groups=[("PROJECT", f"p{i}") for i in range(groups)],
    )


def per_call(work: Callable[[], object], repeat: int) -> float:
    began = time.process_time()
    for _ in range(repeat):
        work()
    return (time.process_time() - began) / repeat * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[3, 10, 50])
    parser.add_argument("--viewers", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--groups", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--repeat", type=int, default=2000)
    args = parser.parse_args()
    print(
        f"{'steps':>5} {'viewers':>7} {'groups':>6} | {'rows/channel':>12} {'bytes':>8} | {'JSON/change':>11}"
        f" {'stored':>8} {'ratio':>6} | {'pack µs':>8} {'relay read µs':>13} {'detail share':>12}"
    )
    for steps in args.steps:
        for viewers, groups in zip(args.viewers, args.groups, strict=False):
            messages = change(steps, viewers, groups)
            per_channel = [orjson.dumps(m.payload) for m in messages for _ in m.channels]
            (row,) = pack(messages)
            document = {
                "messages": [{"projection": m.projection, "channels": m.channels, "data": m.payload} for m in messages]
            }
            text = len(orjson.dumps(document))
            stored, home = row.payload_zstd, row.channel
            packing = per_call(lambda document=document: compressed(document), args.repeat)
            read = per_call(lambda stored=stored, home=home: unpack(PACKED, home, None, stored), args.repeat)
            detail = next(len(orjson.dumps(m.payload)) for m in messages if m.projection == "TASK_DETAIL")
            old = sum(len(p) for p in per_channel)
            print(
                f"{steps:>5} {viewers:>7} {groups:>6} | {len(per_channel):>12} {old:>8,} | {text:>11,}"
                f" {len(stored):>8,} {text / len(stored):>5.1f}x | {packing:>8.1f} {read:>13.1f} {detail / text:>11.0%}"
            )


if __name__ == "__main__":
    main()
