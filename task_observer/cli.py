"""``task-observer``: the one console script of the project."""

from __future__ import annotations

import argparse
import copy
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from status.domain.auth import Role
from status.settings import Settings, SettingsError
from task_observer.archive_cli import add_archive_actions
from task_observer.shards_cli import add_shard_actions


def _migrate(args: argparse.Namespace) -> int:
    from status.infra import migrate

    settings = Settings.from_env()
    if settings.database_url.startswith("sqlite"):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    for url in (settings.database_url, *settings.shards.values()):  # every shard has the schema
        migrate.upgrade(url, args.revision)
    print(f"database migrated to {args.revision}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    import socket

    import uvicorn

    from status import logs
    from status.api.asgi import app_for
    from status.api.serving import DrainingServer, DrainingSupervisor
    from status.bootstrap import Components

    logs.configure()
    if args.grpc_port is not None:
        # Through the environment, so every worker process of --workers reads it too.
        os.environ["TASK_OBSERVER_GRPC_PORT"] = str(args.grpc_port)
    settings = Settings.from_env()
    parts = Components(settings)
    parts.service.install_default_definitions()
    options: dict[str, Any] = {
        "host": args.host,
        "port": args.port,
        "log_level": "info",
        "access_log": args.access_log,
        "log_config": _uvicorn_log_config(),
    }
    if args.workers > 1:
        # Several processes share the port; each builds its own engine and caches (all are version-checked).
        parts.engine.dispose()
        config = uvicorn.Config("status.api.asgi:app_from_env", factory=True, workers=args.workers, **options)
        # uvicorn binds with protocol 0, and asyncio turns Nagle's algorithm off only for sockets
        # marked IPPROTO_TCP: every response then waited ~40 ms for a delayed ACK. Re-read the
        # protocol from the descriptor so accepted connections get TCP_NODELAY.
        sock = socket.socket(fileno=config.bind_socket().detach())
        sock.set_inheritable(True)
        DrainingSupervisor(config, [sock], settings.drain_seconds).run()
    else:
        config = uvicorn.Config(app_for(parts), **options)
        DrainingServer(config, parts.readiness.drain, settings.drain_seconds).run()
    return 0


def _observer(args: argparse.Namespace) -> int:
    import asyncio
    import faulthandler
    import logging
    import signal

    from observer.runner import run_loops, run_temporal
    from status import logs

    logs.configure(logging.INFO)
    # SIGUSR1 prints every thread's stack to stderr: what a stuck observer is waiting for.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    settings = Settings.from_env()
    if args.mode == "loops":
        asyncio.run(run_loops(settings))
    elif not asyncio.run(run_temporal(settings)):
        # The worker's shutdown did not finish (warned): leave without waiting for its threads.
        logging.shutdown()
        os._exit(0)
    return 0


def _dev(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from status import logs
    from task_observer.devstack import DemoPace, DevPorts, FrontEnd, run_dev

    settings = Settings.from_env()
    if settings.is_production:
        print(
            "task-observer: dev is a demo stack; it refuses to run with TASK_OBSERVER_ENV=production", file=sys.stderr
        )
        return 2
    ports = DevPorts(args.port, args.centrifugo_port, args.temporal_port, args.temporal_ui_port, args.metrics_port)
    for origin in args.allowed_origin:
        scheme, _, rest = origin.partition("://")
        if scheme not in ("http", "https") or not rest or "/" in rest.rstrip("/"):
            raise UsageError(f"--allowed-origin {origin!r} is not an origin (scheme://host[:port])")
    front = FrontEnd(tuple(o.rstrip("/") for o in args.allowed_origin), args.centrifugo_public_url)
    pace = DemoPace(args.demo_runs, max(0.0, args.demo_interval))
    # The terminal shows the banner and what needs a person; the API's, observer's and worker's
    # routine lines (every refused report of a cancelled demo run, say) go to a file of their own.
    log_path = None if args.verbose else settings.data_dir / "dev.log"
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        logs.configure(logging.INFO, stream=log_path.open("a", encoding="utf-8", buffering=1))
    else:
        logs.configure(logging.INFO)
    return asyncio.run(run_dev(settings, ports, pace, front, log_path))


# Exit codes (docs/operations.md, "Command line"): 0 done; 1 what was asked for is not there or not right (an
# unknown eventId, a failed check, a refused correction, a stack that stopped on a dying child);
# 2 the command cannot run as given (usage, configuration, a feature turned off); 3 an unexpected
# failure (its traceback is printed).
EXIT_OK, EXIT_NOT_SO, EXIT_USAGE, EXIT_FAILED = 0, 1, 2, 3


class UsageError(Exception):
    """The command line asks for something that cannot be (exit 2, with the message)."""


def _roles(values: list[str]) -> list[Role]:
    try:
        return [Role(v.upper()) for v in values]
    except ValueError as exc:
        raise UsageError(f"unknown role ({exc}); use {', '.join(r.value for r in Role)}") from exc


DEFINITIONS_FORMAT = """Store versioned status and operation definitions from a JSON file.

The file is an object with "operations" and/or "statuses" (the shipped defaults,
status/definitions/default.json, are a complete example):

  {"operations": [{"operationCode": "DOCUMENT.PARSE", "version": 2,
                   "displayName": "Parse document",
                   "allowedEventTypes": ["STEP_STARTED", "STEP_PROGRESS", "STEP_COMPLETED", "STEP_FAILED"],
                   "producerPattern": "*", "taskTypePattern": "*",
                   "failurePolicy": "FAIL_TASK", "maxRuntimeSeconds": 600,
                   "allowedDataSchemas": {"STEP_PROGRESS": ["document.parse.progress.v1"]},
                   "schemas": {"document.parse.progress.v1": {"type": "object"}}}],
   "statuses": [{"taskType": "document", "version": 1,
                 "statuses": [{"code": "RUNNING", "lifecycle": "RUNNING"}, ...one per lifecycle]}]}

A stored version is frozen: sending it again must be identical (DEFINITION_FROZEN otherwise);
publish a new version to change it. Without --tenant the definitions are the global defaults.
"""


def _signing_settings(secret: str) -> Settings | None:
    """Settings to sign credentials with — only with a secret the service knows.

    Outside production the dev secrets live in the stack's DATA_DIR; run anywhere else, settings
    would invent new ones there and print a token every service refuses. Say where the secret
    comes from instead, or refuse."""
    import os

    from status.settings import DEV_SECRETS_FILE, PREFIX

    data_dir = Path(os.environ.get(PREFIX + "DATA_DIR") or Path.cwd() / ".cache").resolve()
    from_env = bool(os.environ.get(PREFIX + secret))
    dev_file = data_dir / DEV_SECRETS_FILE
    if not from_env and os.environ.get(PREFIX + "ENV", "dev") != "production" and not dev_file.is_file():
        print(
            f"task-observer: no {PREFIX}{secret} and no dev secrets at {dev_file}: run this where the stack"
            f" runs (its checkout), set {PREFIX}DATA_DIR to the stack's data folder, or set {PREFIX}{secret}."
            " Refusing to invent a secret the service does not know.",
            file=sys.stderr,
        )
        return None
    print(f"(signed with {PREFIX}{secret} from {'the environment' if from_env else dev_file})", file=sys.stderr)
    return Settings.from_env()


def _service_token(args: argparse.Namespace) -> int:
    from status.infra.tokens import ServiceTokens

    settings = _signing_settings("SERVICE_TOKEN_SECRET")
    if settings is None:
        return 2
    token = ServiceTokens(settings.service_token_secret).issue(
        args.producer, args.tenant, args.scope, _roles(args.role), args.ttl or None
    )
    print(token)
    return 0


def _revoke_service_token(args: argparse.Namespace) -> int:
    from status.infra.db import create_engine
    from status.infra.tokens import RevokedCredentials

    settings = Settings.from_env()
    engine = create_engine(settings.database_url)
    try:
        jti = RevokedCredentials.revoke(engine, args.credential, args.reason)
    except ValueError as exc:
        print(f"task-observer: {exc}", file=sys.stderr)
        return 2
    finally:
        engine.dispose()
    print(f"revoked {jti}")
    return 0


def _undeliverable(args: argparse.Namespace) -> int:
    # The plugin's own command (python -m task_status_interceptors undeliverable list), where the service is installed.
    from task_status_interceptors.__main__ import main as plugin_main

    return plugin_main(["undeliverable", "list", args.outbox])


def _overdue(args: argparse.Namespace) -> int:
    import json

    from status.bootstrap import Components

    parts = Components(Settings.from_env())
    try:
        tasks = parts.service.overdue(None, limit=args.limit)
    finally:
        parts.engine.dispose()
    for task in tasks:
        print(json.dumps(task, sort_keys=True))
    if not tasks:
        print("no overdue tasks", file=sys.stderr)
    return 0


def _retention(args: argparse.Namespace) -> int:
    import json

    from observer.runner import build_retention
    from status.bootstrap import Components

    parts = Components(Settings.from_env())
    try:
        purged = build_retention(parts).run_once()
    finally:
        parts.engine.dispose()
    print(json.dumps(purged, sort_keys=True))
    return 0


def _restore_fence(args: argparse.Namespace) -> int:
    import json

    from status.infra.db import create_engine
    from status.infra.fence import fence_versions

    settings = Settings.from_env()
    urls = {settings.shard_name: settings.database_url, **settings.shards}
    shard = args.shard or settings.shard_name
    if shard not in urls:
        raise UsageError(f"--shard {shard!r} is not a configured shard ({', '.join(sorted(urls))})")
    engine = create_engine(urls[shard])  # with shards, each is restored (and fenced) on its own
    try:
        moved = fence_versions(engine, args.jump) if args.jump else fence_versions(engine)
    finally:
        engine.dispose()
    print(json.dumps(moved, sort_keys=True))
    return 0


def _trace(args: argparse.Namespace) -> int:
    import json

    from status.infra.db import create_engine
    from status.infra.trace import trace_event

    settings = Settings.from_env()
    found = []
    # Each shard holds its own buckets' events (and, while a moved bucket is not yet released, both
    # its shards do): every shard is asked, and with shards each entry says which one answered.
    for shard, url in {settings.shard_name: settings.database_url, **settings.shards}.items():
        engine = create_engine(url)
        try:
            entries = trace_event(engine, args.event_id, args.tenant)
        finally:
            engine.dispose()
        found += [{**entry, "shard": shard} for entry in entries] if settings.shards else entries
    if not found:
        print(
            f"task-observer: no event {args.event_id!r} in the event log or the dedup results"
            " (never accepted, or purged past its retention: `task-observer archive show EVENT_ID`)",
            file=sys.stderr,
        )
        return 1
    print(json.dumps(found, indent=2, default=str))
    return 0


def _user_token(args: argparse.Namespace) -> int:
    from status.infra.tokens import UserTokens

    settings = _signing_settings("USER_TOKEN_SECRET")
    if settings is None:
        return 2
    if settings.is_production:
        print("task-observer: user tokens come from your identity provider in production", file=sys.stderr)
        return 2
    print(UserTokens(settings.user_token_secret).issue(args.tenant, args.user, args.ttl, args.project))
    return 0


def _definitions_load(args: argparse.Namespace) -> int:
    import json

    from status.bootstrap import build_service
    from status.domain.auth import ServicePrincipal
    from status.domain.errors import DomainError

    settings = Settings.from_env()
    try:
        with open(args.file, encoding="utf-8") as handle:
            document = json.load(handle)
    except (OSError, ValueError) as exc:
        print(f"task-observer: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    service = build_service(settings)
    admin = None if args.tenant is None else ServicePrincipal("cli", args.tenant, args.scope, frozenset({Role.ADMIN}))
    try:
        result = service.put_definitions(admin, document)
    except DomainError as err:
        print(f"task-observer: {err.code}: {err.message}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


def _correct(args: argparse.Namespace) -> int:
    import json
    import uuid

    from status.app.corrections import Correct
    from status.bootstrap import Components
    from status.domain.auth import ServicePrincipal
    from status.domain.errors import DomainError

    parts = Components(Settings.from_env())
    try:
        owner = parts.service.queries.tenancy(args.task)
        if owner is None:
            print(f"task-observer: UNKNOWN_TASK: task {args.task} does not exist", file=sys.stderr)
            return 1
        # An operator with database access acts as ADMIN of the task's own tenant and scope.
        tenant_id, authority_scope = owner
        admin = ServicePrincipal(f"cli:{args.operator}", tenant_id, authority_scope, frozenset({Role.ADMIN}))
        cmd = Correct(
            task_id=args.task,
            correction_id=args.correction_id or f"cli-{uuid.uuid4().hex}",
            operator_id=args.operator,
            reason=args.reason,
            step_id=args.step,
            attempt=args.attempt,
            lifecycle_status=args.lifecycle,
            business_status=args.business_status,
            expected_task_version=args.expected_version,
        )
        result = parts.service.correct(admin, cmd)
    except DomainError as err:
        print(f"task-observer: {err.code}: {err.message}", file=sys.stderr)
        return 1
    finally:
        parts.engine.dispose()
    print(json.dumps(result))
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
    migrate.add_argument("--revision", default="head", help="Alembic revision to upgrade to (default: head)")

    serve = add("serve", _serve, "run the status API")
    serve.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="HTTP port (default 8080)")
    serve.add_argument(
        "--workers", type=int, default=1, help="API processes sharing the port (default 1; about one per core)"
    )
    serve.add_argument(
        "--grpc-port",
        type=int,
        default=None,
        help="also serve the gRPC adapter on this port (default: TASK_OBSERVER_GRPC_PORT, 0 = off)",
    )
    serve.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="log one line per request (off by default: rejections and errors are logged either way)",
    )

    observer = add("observer", _observer, "run the outbox relay, workflow projector, health reconciler and retention")
    observer.add_argument(
        "--mode",
        choices=["temporal", "loops"],
        default="temporal",
        help="temporal: as long-running activities of a Temporal worker (default); loops: plain asyncio loops",
    )

    dev = add("dev", _dev, "run the demo stack: SQLite, Centrifugo, Temporal, API, observer and an example worker")
    dev.add_argument("--port", type=int, default=8080, help="status API and dashboard port (default 8080)")
    dev.add_argument("--centrifugo-port", type=int, default=8000, help="Centrifugo port (default 8000)")
    dev.add_argument("--temporal-port", type=int, default=7233, help="Temporal dev server port (default 7233)")
    dev.add_argument(
        "--temporal-ui-port", type=int, default=8233, help="the Temporal dev server's web UI (default 8233)"
    )
    dev.add_argument("--metrics-port", type=int, default=9108, help="the observer's /metrics port (default 9108)")
    dev.add_argument(
        "--demo-runs",
        type=int,
        default=10,
        help="example runs for the demo user, then it stops (default 10; -1: forever)",
    )
    dev.add_argument("--demo-interval", type=float, default=30.0, help="seconds between demo runs (default 30)")
    dev.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        help="another origin whose pages use the stack (your app's dev server, e.g. http://localhost:5173):"
        " Centrifugo accepts its connections and the API answers its cross-origin calls; repeat",
    )
    dev.add_argument(
        "--verbose",
        action="store_true",
        help="print the API's, observer's and demo worker's log lines here too (default: <data dir>/dev.log)",
    )
    dev.add_argument(
        "--centrifugo-public-url",
        default=None,
        help="the Centrifugo WebSocket URL handed to pages (e.g. ws://localhost:5173/connection/websocket"
        " when your dev server proxies /connection); default: Centrifugo's own port",
    )

    token = add("service-token", _service_token, "print a service credential for the internal API")
    token.add_argument("--producer", required=True, help="producerId of the service")
    token.add_argument("--tenant", required=True, help="tenant the credential acts in")
    token.add_argument("--scope", required=True, help="authority scope (immutable security namespace)")
    token.add_argument("--role", action="append", required=True, help="COORDINATOR, WORKER, HEALTH or ADMIN; repeat")
    token.add_argument(
        "--ttl",
        type=int,
        default=90 * 24 * 3600,
        help="lifetime in seconds (default: 90 days; 0: no expiry, revocable only with revoke-service-token)",
    )

    revoke = add(
        "revoke-service-token",
        _revoke_service_token,
        "revoke a service credential before it expires (every API process refuses it within seconds)",
    )
    revoke.add_argument("credential", help="the token, or its jti")
    revoke.add_argument("--reason", default=None, help="why (kept with the revocation)")

    lost = add(
        "undeliverable",
        _undeliverable,
        "list the reports a worker's outbox file holds as refused for good, with why (JSON lines)",
    )
    lost.add_argument("outbox", help="the plugin's outbox file (TaskStatusPlugin outbox_path)")

    overdue = add(
        "overdue",
        _overdue,
        "list tasks RUNNING or STALE beyond their operation's maxRuntimeSeconds or OVERDUE_AFTER_SECONDS"
        " (JSON lines, oldest first)",
    )
    overdue.add_argument("--limit", type=int, default=100, help="at most this many tasks (default 100)")

    correct = add(
        "correct",
        _correct,
        "correct a task's or a step attempt's status as an operator (audited; users get a notice)",
    )
    correct.add_argument("task", help="taskId")
    correct.add_argument("--operator", required=True, help="who corrects (kept in the audit record)")
    correct.add_argument("--reason", required=True, help="why (kept in the audit record)")
    correct.add_argument("--step", default=None, help="stepId to correct (default: the task itself)")
    correct.add_argument("--attempt", type=int, default=None, help="the step's attempt (default: its newest)")
    correct.add_argument(
        "--lifecycle",
        choices=["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"],
        default=None,
        help="the corrected lifecycle status",
    )
    correct.add_argument("--business-status", default=None, help="the corrected (registered) business status")
    correct.add_argument("--expected-version", type=int, default=None, help="refuse unless the task is at this version")
    correct.add_argument(
        "--correction-id", default=None, help="idempotency key (default: a new one); reuse it to retry safely"
    )

    archive = add("archive", lambda _: 2, "read, check and restore the retention archive (event log and corrections)")
    add_archive_actions(archive)

    shards = add("shards", lambda _: 2, "install the bucket map over the shards, move a bucket live, release it")
    add_shard_actions(shards)

    add(
        "retention",
        _retention,
        "run one retention pass now (archive, verify and purge what is past its window); prints the counts",
    )

    fence = add(
        "restore-fence",
        _restore_fence,
        "after restoring the database to a point in time, before the service starts on it: every task's"
        " and workflow's version jumps past what the discarded history may have shown clients"
        " (docs/operations.md, Backups and point-in-time recovery); prints how many rows moved",
    )
    fence.add_argument(
        "--jump",
        type=int,
        default=None,
        help="how far versions jump (default 1000000000: more than a task changes in eleven days"
        " at a thousand changes a second)",
    )
    fence.add_argument("--shard", help="with shards: the restored shard's name (default: DATABASE_URL's)")

    trace = add(
        "trace",
        _trace,
        "show what an eventId committed: the task version, the event, its dedup result and each outbox row"
        " with its channel and publish state (JSON)",
    )
    trace.add_argument("event_id", metavar="EVENT_ID", help="the eventId a producer sent")
    trace.add_argument("--tenant", default=None, help="only this tenant's event (eventIds are unique per tenant)")

    user = add("user-token", _user_token, "print a user token signed with the dev/test secret")
    user.add_argument("--tenant", required=True, help="the user's tenant")
    user.add_argument("--user", required=True, help="userId (the token's subject)")
    user.add_argument("--ttl", type=int, default=3600, help="lifetime in seconds (default 3600)")
    user.add_argument("--project", action="append", default=[], help="a project the user belongs to; repeat")

    definitions = add("definitions", lambda _: 2, "manage versioned status and operation definitions")
    sub = definitions.add_subparsers(dest="action", required=True, metavar="ACTION")
    load = sub.add_parser(
        "load",
        help="store the definitions of a JSON file (new versions only; frozen ones must match)",
        description=DEFINITIONS_FORMAT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    load.add_argument("file", help="JSON document with operations and/or statuses")
    load.add_argument("--tenant", default=None, help="tenant of the definitions (default: global defaults)")
    load.add_argument("--scope", default="*", help="authority scope of the definitions (default: all)")
    load.set_defaults(handler=_definitions_load)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except SettingsError as exc:
        print(f"task-observer: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except UsageError as exc:
        print(f"task-observer: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception:  # whatever it was: its trace, and a code that says it was unexpected
        import traceback

        traceback.print_exc()
        print("task-observer: unexpected failure (its trace is above)", file=sys.stderr)
        return EXIT_FAILED


def _uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's own logging configuration with the access log redacted."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["redact_query"] = {"()": "status.logs.RedactQuery"}
    config["handlers"]["access"].setdefault("filters", []).append("redact_query")
    return config


if __name__ == "__main__":
    sys.exit(main())
