"""``python -m task_status_interceptors undeliverable …``: what a worker's outbox kept as refused.

In a worker's own environment (the plugin alone, no service installed):

    python -m task_status_interceptors undeliverable list OUTBOX_FILE
    python -m task_status_interceptors undeliverable resend OUTBOX_FILE --url URL --token TOKEN [--event-id ID …]

``list`` prints one JSON line per refused report (its eventId, why, when, the report). ``resend``
puts them (all, or those named) back in the outbox and sends them now, with the same eventIds —
after the cause was fixed (a definition loaded, a schema widened, a credential renewed); what the
service refuses again goes back to the list with its new reason. With ``--queue-only`` they are
only queued, for the worker that uses the file to send. Exit codes: 0 done (everything resent was
delivered), 1 something was refused again or is still waiting, 2 the command cannot run as given.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path

from task_status_interceptors._outbox import Outbox, UnreadableOutbox, read_undeliverable
from task_status_interceptors._reporter import Reporter, ReporterConfig


def _list(args: argparse.Namespace) -> int:
    if not Path(args.outbox).is_file():
        print(f"no outbox file at {args.outbox}", file=sys.stderr)
        return 2
    try:
        rows = read_undeliverable(args.outbox)
    except UnreadableOutbox as exc:
        print(str(exc), file=sys.stderr)
        return 1
    for row in rows:
        print(json.dumps(row, sort_keys=True))
    damaged = [row["eventId"] for row in rows if row.get("problem")]
    print(f"{len(rows)} undeliverable reports", file=sys.stderr)
    if damaged:
        print(
            f"{len(damaged)} of them cannot be read (listed with their problem): {', '.join(damaged)}", file=sys.stderr
        )
        return 1
    return 0


async def _send(path: Path, url: str, token: str, producer: str, timeout: float) -> tuple[int, int]:
    """Send what the outbox holds now (bounded); (still waiting, refused again)."""
    before = len(read_undeliverable(path))
    reporter = Reporter(ReporterConfig(status_url=url, service_token=token, producer_id=producer, outbox_path=path))
    await reporter.start()
    try:
        await reporter.drained(timeout)
    except TimeoutError:
        pass
    finally:
        waiting = await asyncio.to_thread(reporter.pending_events)
        await reporter.stop(flush_timeout=0)
    return waiting, len(read_undeliverable(path)) - before


def _resend(args: argparse.Namespace) -> int:
    path = Path(args.outbox)
    if not path.is_file():
        print(f"no outbox file at {args.outbox}", file=sys.stderr)
        return 2
    if not args.queue_only and not (args.url and args.token):
        print("resend needs --url and --token (the worker's), or --queue-only", file=sys.stderr)
        return 2
    try:
        outbox = Outbox(path)  # an existing file is opened (and checked) at once
        try:
            requeued, kept = outbox.requeue(args.event_id or None)
        finally:
            outbox.close()
    except sqlite3.DatabaseError as exc:
        print(f"{path} is not a readable outbox file: {exc}", file=sys.stderr)
        return 1
    for event_id in kept:
        print(f"{event_id}: kept from before the file recorded executions; it cannot be bound again", file=sys.stderr)
    print(f"{len(requeued)} reports queued again", file=sys.stderr)
    if args.queue_only or not requeued:
        return 0 if not kept else 1
    from task_status_interceptors._plugin import _subject

    try:
        producer = args.producer or _subject(args.token)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    waiting, refused = asyncio.run(_send(path, args.url, args.token, producer, args.timeout))
    print(
        f"{len(requeued) - waiting - refused} delivered, {refused} refused again, {waiting} still waiting",
        file=sys.stderr,
    )
    return 0 if waiting == 0 and refused == 0 and not kept else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m task_status_interceptors", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    undeliverable = commands.add_parser(
        "undeliverable", help="reports the service refused for good, kept in the outbox"
    )
    actions = undeliverable.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="one JSON line per refused report: eventId, reason, refusedAt, event")
    listing.add_argument("outbox", help="the plugin's outbox file (TaskStatusPlugin outbox_path)")
    listing.set_defaults(handler=_list)
    resend = actions.add_parser("resend", help="queue refused reports again and send them now (same eventIds)")
    resend.add_argument("outbox", help="the plugin's outbox file (TaskStatusPlugin outbox_path)")
    resend.add_argument("--event-id", action="append", default=[], help="only this eventId; repeat (default: all)")
    resend.add_argument("--url", default=None, help="the status service, as the worker's plugin has it")
    resend.add_argument("--token", default=None, help="the worker's service token")
    resend.add_argument("--producer", default=None, help="producerId (default: the token's subject)")
    resend.add_argument("--timeout", type=float, default=60.0, help="seconds to keep sending (default 60)")
    resend.add_argument(
        "--queue-only", action="store_true", help="only queue them: the worker that uses the file sends them"
    )
    resend.set_defaults(handler=_resend)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
