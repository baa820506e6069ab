"""``task-observer archive …``: check, read back and restore the retention archive (event log and
corrections). The files' format and checks are status.infra.archive's; the restore's statements
status.infra.retention's. Exit codes as every command's (docs/operations.md, "Command line")."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

from status.settings import Settings

ARCHIVED_TABLES = ("task_event_log", "task_correction")


def _archive_dir(args: argparse.Namespace) -> Path | None:
    """The archive directory, or None (printed why) when archiving is off."""
    directory = Path(args.dir) if args.dir else Settings.from_env().archive_dir
    if directory is None:
        print("task-observer: archiving is off (TASK_OBSERVER_ARCHIVE_DIR is set and empty)", file=sys.stderr)
    return directory


def _instant(value: str) -> datetime:
    """An ISO 8601 date or instant of the command line, as the database's naive UTC (argparse's type:
    a malformed one is a usage error, exit 2)."""
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r} is not an ISO 8601 date or instant") from exc
    return moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment


def _archive_verify(args: argparse.Namespace) -> int:
    from status.infra.archive import verify_directory

    directory = _archive_dir(args)
    if directory is None:
        return 2
    if not directory.is_dir():
        # A fresh install: nothing was old enough to archive yet. Nothing to check is no failure.
        print(f"nothing archived yet ({directory} does not exist)", file=sys.stderr)
        return 0
    verdicts = verify_directory(directory)
    bad = [v for v in verdicts if not v.ok]
    for verdict in verdicts:
        where = verdict.path.relative_to(directory)
        problem = f" {verdict.problem}" if verdict.problem else ""
        print(f"{'ok  ' if verdict.ok else 'FAIL'} {where} rows={verdict.rows}{problem}")
    rows = sum(v.rows for v in verdicts if v.ok)
    print(f"{len(verdicts) - len(bad)} of {len(verdicts)} archive files verified, {rows} rows", file=sys.stderr)
    return 1 if bad else 0


def _archive_show(args: argparse.Namespace) -> int:
    import json

    from status.infra.archive import ArchiveError, find_event

    directory = _archive_dir(args)
    if directory is None:
        return 2
    try:
        found = find_event(directory, args.event_id, args.tenant) if directory.is_dir() else []
    except ArchiveError as exc:
        print(f"task-observer: {exc}", file=sys.stderr)
        return 1
    if not found:
        print(f"task-observer: no event {args.event_id!r} in the archive at {directory}", file=sys.stderr)
        return 1
    print(json.dumps(found, indent=2, sort_keys=True))
    return 0


def _archive_export(args: argparse.Namespace) -> int:
    import json

    from status.infra.archive import ArchiveError, archived_rows

    directory = _archive_dir(args)
    if directory is None:
        return 2
    count = 0
    try:
        if directory.is_dir():
            for row in archived_rows(directory, args.table, args.since, args.until):
                print(json.dumps(row, sort_keys=True, ensure_ascii=False))
                count += 1
    except ArchiveError as exc:
        print(f"task-observer: {exc} (exported {count} rows before it)", file=sys.stderr)
        return 1
    print(f"{count} {args.table} rows exported", file=sys.stderr)
    return 0


def _archive_restore(args: argparse.Namespace) -> int:
    import json

    import sqlalchemy as sa

    from status.domain.clock import utcnow
    from status.infra.archive import ArchiveError, archived_rows
    from status.infra.db import create_engine
    from status.infra.retention import restore_rows

    directory = _archive_dir(args)
    if directory is None:
        return 2
    since, until = args.since, args.until
    if since is not None and until is not None and until <= since:
        print("task-observer: --until must be after --from", file=sys.stderr)
        return 2
    try:
        engine = create_engine(args.database_url or Settings.from_env().database_url)
    except (sa.exc.ArgumentError, ValueError, ImportError) as exc:  # not a URL, or no driver for it
        print(f"task-observer: --database-url is not a usable database URL: {exc}", file=sys.stderr)
        return 2
    try:
        rows = archived_rows(directory, args.table, since, until) if directory.is_dir() else iter(())
        restored, present = restore_rows(engine, args.table, rows, utcnow())
    except ArchiveError as exc:
        print(f"task-observer: {exc}; nothing of that file was restored", file=sys.stderr)
        return 1
    finally:
        engine.dispose()
    print(json.dumps({"table": args.table, "restored": restored, "alreadyThere": present}))
    return 0


def add_archive_actions(archive: argparse.ArgumentParser) -> None:
    """The actions under ``task-observer archive``."""
    archive_actions = archive.add_subparsers(dest="action", required=True, metavar="ACTION")
    directory_help = "the archive directory (default: TASK_OBSERVER_ARCHIVE_DIR)"
    verify = archive_actions.add_parser(
        "verify",
        help="check every archive file against its manifest (rows, checksums); exit 1 on any failure",
    )
    verify.add_argument("--dir", default=None, help=directory_help)
    verify.set_defaults(handler=_archive_verify)
    show = archive_actions.add_parser(
        "show", help="print the archived event-log row of an eventId (JSON); exit 1 if the archive has none"
    )
    show.add_argument("event_id", metavar="EVENT_ID", help="the eventId a producer sent")
    show.add_argument("--tenant", default=None, help="only this tenant's event")
    show.add_argument("--dir", default=None, help=directory_help)
    show.set_defaults(handler=_archive_show)
    for name, handler, text in (
        ("export", _archive_export, "print the archived rows of a table dated in [--from, --until) as JSON lines"),
        (
            "restore",
            _archive_restore,
            "put the archived rows of a table dated in [--from, --until) back into the database (idempotent);"
            " the next retention pass deletes them again unless they are within its window by then",
        ),
    ):
        action = archive_actions.add_parser(name, help=text)
        action.add_argument(
            "--table", choices=ARCHIVED_TABLES, default="task_event_log", help="default: task_event_log"
        )
        action.add_argument(
            "--from", dest="since", type=_instant, default=None, help="ISO 8601 date or instant (UTC if no offset)"
        )
        action.add_argument("--until", type=_instant, default=None, help="ISO 8601 date or instant, exclusive")
        action.add_argument("--dir", default=None, help=directory_help)
        if name == "restore":
            action.add_argument(
                "--database-url",
                default=None,
                help="restore into this database instead of TASK_OBSERVER_DATABASE_URL (e.g. a scratch copy)",
            )
        action.set_defaults(handler=handler)
