"""``task-observer``: the one console script of the project."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from status.settings import Settings, SettingsError


def _migrate(args: argparse.Namespace) -> int:
    from status.infra import migrate

    settings = Settings.from_env()
    if settings.database_url.startswith("sqlite"):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    migrate.upgrade(settings.database_url, args.revision)
    print(f"database migrated to {args.revision}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from status.api.app import create_app

    settings = Settings.from_env()
    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level="info")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="task-observer",
        description="Task Status Observer: live task status for Temporal work. "
        "Settings come from TASK_OBSERVER_* environment variables (see README).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, handler: Callable[[argparse.Namespace], int], help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(handler=handler)
        return sub

    migrate = add("migrate", _migrate, "apply database migrations (Alembic) to the configured database")
    migrate.add_argument("--revision", default="head")

    serve = add("serve", _serve, "run the status API")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except SettingsError as exc:
        print(f"task-observer: configuration error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
