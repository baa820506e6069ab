"""``task-observer shards …``: install the bucket map over the configured shards, show where a
bucket is, move one live, and release or abort a move (status.infra.bucket_move). Exit codes as
every command's (docs/operations.md, "Command line"): 0 done, 1 refused (said why), 2 usage."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from status.settings import Settings

if TYPE_CHECKING:
    import sqlalchemy as sa

    from status.infra.bucket_move import BucketMover


def _engines(settings: Settings) -> dict[str, sa.Engine]:
    from status.infra.db import create_engine

    urls = {settings.shard_name: settings.database_url, **settings.shards}
    return {name: create_engine(url) for name, url in urls.items()}


def _mover() -> tuple[BucketMover, set[str]]:
    """The mover over the configured shards, and their names."""
    from status.infra.bucket_move import BucketMover

    settings = Settings.from_env()
    engines = _engines(settings)
    return BucketMover(engines[settings.shard_name], engines), set(engines)


def _refused(what: str) -> int:
    print(f"task-observer: {what}", file=sys.stderr)
    return 1


def _init(args: argparse.Namespace) -> int:
    from status.domain.clock import utcnow
    from status.infra.shards import install_map

    settings = Settings.from_env()
    if not settings.sharded:
        return _refused("no shards are configured (TASK_OBSERVER_SHARDS)")
    engines = _engines(settings)
    try:
        installed = install_map(engines[settings.shard_name], engines, utcnow())
    except ValueError as exc:
        return _refused(str(exc))
    counts: dict[str, int] = {}
    for route in installed.routes:
        counts[route.shard] = counts.get(route.shard, 0) + 1
    print(json.dumps({"version": installed.version, "buckets": counts}))
    return 0


def _show(args: argparse.Namespace) -> int:
    from status.infra.bucket_move import MoveFailed

    mover, _ = _mover()
    try:
        route = mover.route(args.bucket)
    except MoveFailed as exc:
        return _refused(str(exc))
    print(
        json.dumps(
            {
                "bucket": route.bucket,
                "shard": route.shard,
                "epoch": route.epoch,
                "state": route.state.value,
                "target": route.target,
            }
        )
    )
    return 0


def _move(args: argparse.Namespace) -> int:
    import time

    import sqlalchemy as sa

    from status.infra.bucket_move import MoveFailed
    from status.infra.shards import MAP_REFRESH_SECONDS

    mover, names = _mover()
    if args.target not in names:
        return _refused(f"no shard {args.target!r} is configured")
    try:
        report = mover.move(args.bucket, args.target)
    except MoveFailed as exc:
        return _refused(f"the move was aborted; {exc}")
    released = None
    release_after = args.release_after
    if release_after is None:
        release_after = Settings.from_env().request_deadline_seconds + MAP_REFRESH_SECONDS
    if release_after >= 0:
        # Until its rows leave the shard it left, the bucket is on two shards (and what counts rows
        # there counts it twice). Not at once: a read that began before the switch may still be
        # reading them, and a process may hold the old map until it re-reads it.
        time.sleep(release_after)
        try:
            released = mover.release(report.bucket, report.source)
        except (MoveFailed, sa.exc.DBAPIError) as exc:
            print(
                f"task-observer: moved, but its rows stay on {report.source} ({exc}); run"
                f" `task-observer shards release {report.bucket} {report.source}`",
                file=sys.stderr,
            )
    print(
        json.dumps(
            {
                "bucket": report.bucket,
                "from": report.source,
                "to": report.target,
                "epoch": report.epoch,
                "tasks": report.tasks,
                "fencedMs": round(1000 * report.fenced_seconds),
                "tasksReleased": released,
            }
        )
    )
    return 0


def _release(args: argparse.Namespace) -> int:
    from status.infra.bucket_move import MoveFailed

    mover, names = _mover()
    if args.shard not in names:
        return _refused(f"no shard {args.shard!r} is configured")
    try:
        deleted = mover.release(args.bucket, args.shard)
    except MoveFailed as exc:
        return _refused(str(exc))
    print(json.dumps({"bucket": args.bucket, "shard": args.shard, "tasksDeleted": deleted}))
    return 0


def _abort(args: argparse.Namespace) -> int:
    from status.infra.bucket_move import MoveFailed

    mover, _ = _mover()
    try:
        route = mover.abort(args.bucket)
    except MoveFailed as exc:
        return _refused(str(exc))
    print(json.dumps({"bucket": route.bucket, "shard": route.shard, "epoch": route.epoch}))
    return 0


def _bucket(value: str) -> int:
    from status.domain.ids import BUCKET_COUNT

    try:
        bucket = int(value, 0)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r} is not a bucket number") from exc
    if not 0 <= bucket < BUCKET_COUNT:
        raise argparse.ArgumentTypeError(f"a bucket is 0–{BUCKET_COUNT - 1}")
    return bucket


def add_shard_actions(shards: argparse.ArgumentParser) -> None:
    """The actions under ``task-observer shards``."""
    actions = shards.add_subparsers(dest="action", required=True, metavar="ACTION")
    init = actions.add_parser(
        "init", help="install the first bucket map: every bucket over DATABASE_URL's shard and SHARDS, evenly"
    )
    init.set_defaults(handler=_init)
    show = actions.add_parser("show", help="print a bucket's route (shard, epoch, state, target)")
    show.add_argument("bucket", type=_bucket, help="the bucket (0–4095; 0x… for hexadecimal, as in ids)")
    show.set_defaults(handler=_show)
    move = actions.add_parser(
        "move", help="move a bucket live: copy, fence, drain, switch (aborted, the source kept, on failure)"
    )
    move.add_argument("bucket", type=_bucket, help="the bucket (0–4095; 0x… for hexadecimal, as in ids)")
    move.add_argument("target", help="the shard to move it to")
    move.add_argument(
        "--release-after",
        type=float,
        metavar="SECONDS",
        help="then delete its rows from the shard it left after this long (default: REQUEST_DEADLINE_SECONDS"
        " and the map's refresh, 20 s as shipped); negative: keep them for `shards release`",
    )
    move.set_defaults(handler=_move)
    release = actions.add_parser("release", help="delete a moved bucket's rows from the shard it left")
    release.add_argument("bucket", type=_bucket, help="the bucket")
    release.add_argument("shard", help="the shard it left")
    release.set_defaults(handler=_release)
    abort = actions.add_parser("abort", help="abort a bucket's move that was interrupted: its source writes it again")
    abort.add_argument("bucket", type=_bucket, help="the bucket")
    abort.set_defaults(handler=_abort)
