"""Settings from ``TASK_OBSERVER_*`` environment variables (documented in README).

Defaults serve ``task-observer dev``.  Secrets are never defaults in code: in
the ``dev`` environment a missing secret is generated once and kept in the data
directory (so every local process agrees); in ``production`` a missing or
dev-generated secret refuses to start.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

from status.domain.retention import RetentionPolicy

PREFIX = "TASK_OBSERVER_"
N = TypeVar("N", int, float)
SECRET_NAMES = (
    "CENTRIFUGO_API_KEY",
    "CENTRIFUGO_TOKEN_SECRET",
    "SERVICE_TOKEN_SECRET",
    "EXECUTION_TOKEN_SECRET",
    "USER_TOKEN_SECRET",
)
DEV_SECRETS_FILE = "dev-secrets.env"


class SettingsError(RuntimeError):
    """The configuration cannot be used (missing or unsafe values)."""


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(PREFIX + name)
    return value if value not in (None, "") else default


def _archive_dir(data_dir: Path) -> Path | None:
    raw = os.environ.get(PREFIX + "ARCHIVE_DIR")
    if raw is None:
        return data_dir / "archive"
    return Path(raw).resolve() if raw.strip() else None  # set but empty: no archive, nothing archived is purged


def _origins(name: str) -> tuple[str, ...]:
    """Comma-separated browser origins, each ``scheme://host[:port]`` with nothing after it."""
    raw = _env(name, "") or ""
    found = []
    for origin in (o.strip().rstrip("/") for o in raw.split(",")):
        if not origin:
            continue
        scheme, _, rest = origin.partition("://")
        if scheme not in ("http", "https") or not rest or "/" in rest or origin == "*":
            raise SettingsError(f"{PREFIX}{name}: {origin!r} is not an origin (scheme://host[:port], no path, no *)")
        found.append(origin)
    return tuple(found)


def _float(name: str, default: float) -> float:
    return _number(name, default, float, "a number")


_SHARD_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


def _shard_name(variable: str, name: str) -> str:
    if not _SHARD_NAME.match(name):
        raise SettingsError(f"{PREFIX}{variable}: {name!r} is not a shard name (a-z 0-9 _ -, at most 64)")
    return name


def _shards() -> dict[str, str]:
    """``SHARDS``: the other shards, ``name=url`` separated by spaces (a URL holds no space)."""
    found: dict[str, str] = {}
    for entry in (_env("SHARDS", "") or "").split():
        name, _, url = entry.partition("=")
        if not url:
            raise SettingsError(f"{PREFIX}SHARDS: {entry.split('://')[0]!r}… is not name=url")
        if _shard_name("SHARDS", name) in found:
            raise SettingsError(f"{PREFIX}SHARDS names {name!r} twice")
        found[name] = url
    return found


def _check_shards(settings: Settings) -> None:
    if settings.observe_shard not in (None, settings.shard_name, *settings.shards):
        raise SettingsError(f"{PREFIX}OBSERVE_SHARD names no shard: {settings.observe_shard!r}")
    if settings.shard_name in settings.shards:
        raise SettingsError(f"{PREFIX}SHARDS names {settings.shard_name!r}, which is DATABASE_URL's shard")


def _int(name: str, default: int) -> int:
    return _number(name, default, int, "an integer")


def _number(name: str, default: N, convert: Callable[[str], N], what: str) -> N:
    raw = _env(name)
    if raw is None:
        return default
    try:
        return convert(raw)
    except ValueError as exc:
        raise SettingsError(f"{PREFIX}{name} must be {what}, got {raw!r}") from exc


def _load_env_file(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if "=" in line and not line.lstrip().startswith("#"):
                key, _, value = line.partition("=")
                values[key.strip()] = value.strip()
    return values


def _dev_secrets(data_dir: Path) -> dict[str, str]:
    """Load (or create once) the dev secrets shared by every local process."""
    path = data_dir / DEV_SECRETS_FILE
    values = _load_env_file(path)
    missing = [n for n in SECRET_NAMES if PREFIX + n not in values]
    if missing:
        data_dir.mkdir(parents=True, exist_ok=True)
        for name in missing:
            values[PREFIX + name] = secrets.token_hex(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.writelines(f"{k}={v}\n" for k, v in sorted(values.items()))
    return values


BUILT_DASHBOARD = Path(__file__).resolve().parents[1] / "web" / "dist"


def _dashboard_dir() -> Path | None:
    """TASK_OBSERVER_DASHBOARD_DIR, or the dashboard built in this checkout; an empty value turns it off."""
    configured = os.environ.get(PREFIX + "DASHBOARD_DIR")
    if configured is not None:
        return Path(configured).resolve() if configured else None
    return BUILT_DASHBOARD


@dataclass(frozen=True)
class Settings:
    environment: str
    data_dir: Path
    database_url: str
    centrifugo_api_url: str
    centrifugo_api_key: str = field(repr=False)
    centrifugo_token_secret: str = field(repr=False)
    centrifugo_public_url: str
    service_token_secret: str = field(repr=False)
    execution_token_secret: str = field(repr=False)
    user_token_secret: str = field(repr=False)
    user_jwks_url: str | None
    temporal_address: str
    temporal_namespace: str
    detail_subscription_limit: int
    execution_token_ttl_seconds: int
    realtime_token_ttl_seconds: int
    heartbeat_grace_seconds: int
    max_body_bytes: int
    max_data_bytes: int
    outbox_retention_seconds: int
    dedup_retention_seconds: int
    event_retention_seconds: int
    observer_metrics_port: int = 0
    # Where the observer's /metrics listens: loopback by default; the address of the interface a
    # Prometheus elsewhere reaches (or 0.0.0.0) to be scraped from another machine.
    observer_metrics_host: str = "127.0.0.1"
    internal_rate_per_second: float = 0.0
    internal_rate_burst: int = 0
    # Public API requests per second per user and API process (0: no limit).
    public_rate_per_second: float = 0.0
    public_rate_burst: int = 0
    # The audience and issuer of the Centrifugo connection and subscription tokens the API issues
    # (Centrifugo's client.token.audience / issuer check them: deploy/centrifugo/config.json).
    # None: RealtimeTokens' own (the values the shipped Centrifugo configuration names).
    realtime_token_audience: str | None = None
    realtime_token_issuer: str | None = None
    # JWKS mode: the audience and issuer user tokens must carry (both required in production).
    user_jwks_audience: str | None = None
    user_jwks_issuer: str | None = None
    # Built dashboard (web/dist) served at /dashboard/; None serves none.
    dashboard_dir: Path | None = None
    # The observer's safety poll: how long an idle relay or projector waits for a wake-up
    # before looking anyway (a lost wake-up delays a publication by at most this much).
    relay_idle_ms: int = 1000
    # The safety poll doubles while looks find nothing, up to this many times RELAY_IDLE_MS.
    relay_idle_backoff: float = 8.0
    # Where the observer takes wake-up datagrams from the API (port 0: any free port; the
    # address is advertised through the database), and the host to advertise if different.
    wakeup_host: str = "127.0.0.1"
    wakeup_port: int = 0
    wakeup_advertise_host: str | None = None
    # Group commit: at most this many single-event requests share a transaction, and at most
    # this many such transactions run at once per API process (more queue for the next group,
    # started once the one before it is being written: docs/configuration.md).
    group_commit_max_events: int = 64
    group_commit_in_flight: int = 2
    # The gRPC adapter (task_status_wire/task_events.proto) beside the HTTP API; port 0: off.
    grpc_host: str = "127.0.0.1"
    grpc_port: int = 0
    # design D13: every request has a deadline (answered 503 UNAVAILABLE, retryable, past it), and
    # the database work under it is bounded by statement and lock-wait timeouts (0: none).
    # Browser origins (scheme://host[:port]) whose pages may call the API from another origin
    # (CORS, preflight included); none by default: same-origin only (a proxy in front).
    cors_allowed_origins: tuple[str, ...] = ()
    request_deadline_seconds: float = 15.0
    db_statement_timeout_seconds: float = 10.0
    # How the observer connects to Temporal, as the plugin's users connect their workers: the
    # namespaces whose closed runs it follows (default: TEMPORAL_NAMESPACE), TLS (a CA, a client
    # certificate and key for mTLS) or an API key (Temporal Cloud; implies TLS).
    temporal_namespaces: tuple[str, ...] = ()
    temporal_tls: bool = False
    temporal_tls_ca_file: str | None = None
    temporal_tls_cert_file: str | None = None
    temporal_tls_key_file: str | None = None
    temporal_tls_server_name: str | None = None
    temporal_api_key: str | None = field(default=None, repr=False)
    # The run follower reads Temporal's closed runs this often (one list query per namespace).
    run_follow_interval_ms: int = 1000
    # A task RUNNING longer than this (or an attempt longer than its operation's maxRuntimeSeconds)
    # is listed as overdue (task-observer overdue, the overdue_tasks gauge).
    overdue_after_seconds: int = 24 * 3600
    # /readyz: unready after this many failed database probes in a row, ready again after this many
    # successes in a row; probes at most every interval (health checks share the answer).
    readiness_fail_after: int = 3
    readiness_recover_after: int = 2
    readiness_interval_ms: int = 2000
    # On SIGTERM a replica reports unready for this long (the load balancer stops sending it new
    # requests), then stops accepting and finishes what is in flight.
    drain_seconds: float = 5.0
    # On SIGTERM the observer (--mode temporal) gives its Temporal worker this long to cancel its
    # activities and stop polling; past it, it exits anyway (Temporal hands the components to
    # another observer once their heartbeats time out) rather than hang in the SDK's shutdown.
    observer_shutdown_seconds: float = 10.0
    # Retention (design D14.1, D8.16; 0 keeps that data forever): events older than the maximum age are
    # refused (EVENT_TOO_OLD), so dedup results need live only that long plus the retry grace;
    # terminal tasks (with their steps), notifications and corrections have windows of their own.
    max_event_age_seconds: int = 6 * 24 * 3600
    # Events whose occurredAt is this far ahead of the service's clock are refused (EVENT_IN_FUTURE).
    max_clock_skew_seconds: int = 300
    event_retry_grace_seconds: int = 24 * 3600
    task_retention_seconds: int = 90 * 24 * 3600
    notification_retention_seconds: int = 90 * 24 * 3600
    correction_retention_seconds: int = 365 * 24 * 3600
    # Event-log and correction rows are written here (JSON Lines, gzip, a manifest per file) and
    # verified before they are deleted; None: they are never deleted.
    archive_dir: Path | None = None
    # Share of accepted changes logged with their correlation fields (design D12), by eventId, by the
    # API ("event accepted") and the relay ("published") alike; rejections are always logged.
    change_log_sample: float = 0.0
    # A replica (or failover standby) whose replication the observer watches (mysql_replica_lag_seconds),
    # through an account with the REPLICATION CLIENT / SLAVE MONITOR privilege; None: none.
    replica_status_url: str | None = field(default=None, repr=False)
    # Shards (docs/architecture.md, "Shards: routing"): the name of the database DATABASE_URL
    # names (the control store, which holds the bucket map, and the home of ids without a bucket),
    # the other shards by name, and the shard whose outbox an observer relays.
    shard_name: str = "home"
    shards: dict[str, str] = field(default_factory=dict, repr=False)
    observe_shard: str | None = None

    @property
    def sharded(self) -> bool:
        return bool(self.shards)

    def retention_policy(self) -> RetentionPolicy:
        def window(seconds: int) -> timedelta | None:
            return timedelta(seconds=seconds) if seconds > 0 else None

        return RetentionPolicy(
            max_event_age=window(self.max_event_age_seconds),
            retry_grace=timedelta(seconds=max(0, self.event_retry_grace_seconds)),
            dedup=window(self.dedup_retention_seconds),
            events=window(self.event_retention_seconds),
            outbox=window(self.outbox_retention_seconds),
            terminal_tasks=window(self.task_retention_seconds),
            notifications=window(self.notification_retention_seconds),
            corrections=window(self.correction_retention_seconds),
        )

    @property
    def followed_namespaces(self) -> tuple[str, ...]:
        return self.temporal_namespaces or (self.temporal_namespace,)

    @property
    def is_production(self) -> bool:
        return self.environment == "production"

    @classmethod
    def from_env(cls) -> Settings:
        environment = _env("ENV", "dev") or "dev"
        if environment not in ("dev", "test", "production"):
            raise SettingsError(f"{PREFIX}ENV must be dev, test or production, got {environment!r}")
        data_dir = Path(_env("DATA_DIR", str(Path.cwd() / ".cache")) or ".cache").resolve()
        secret_values: dict[str, str] = {}
        dev_values: dict[str, str] = {}
        if environment != "production":
            dev_values = _dev_secrets(data_dir)
        for name in SECRET_NAMES:
            value = _env(name) or dev_values.get(PREFIX + name)
            if not value:
                raise SettingsError(f"{PREFIX}{name} must be set in production")
            if environment == "production" and value == _load_env_file(data_dir / DEV_SECRETS_FILE).get(PREFIX + name):
                raise SettingsError(f"{PREFIX}{name} is a dev secret; refusing to start in production")
            if environment == "production" and len(value) < 32:
                raise SettingsError(f"{PREFIX}{name} must be at least 32 characters in production")
            secret_values[name] = value
        default_db = f"sqlite:///{data_dir / 'task-observer.sqlite3'}"
        jwks_url = _env("USER_JWKS_URL")
        if environment == "production" and jwks_url and not (_env("USER_JWKS_AUDIENCE") and _env("USER_JWKS_ISSUER")):
            # Without them, any token the identity provider signs for another application is accepted.
            raise SettingsError(f"{PREFIX}USER_JWKS_AUDIENCE and {PREFIX}USER_JWKS_ISSUER must be set with a JWKS")
        settings = cls(
            environment=environment,
            data_dir=data_dir,
            database_url=_env("DATABASE_URL", default_db) or default_db,
            centrifugo_api_url=_env("CENTRIFUGO_API_URL", "http://127.0.0.1:8000/api") or "",
            centrifugo_api_key=secret_values["CENTRIFUGO_API_KEY"],
            centrifugo_token_secret=secret_values["CENTRIFUGO_TOKEN_SECRET"],
            centrifugo_public_url=_env("CENTRIFUGO_PUBLIC_URL", "ws://127.0.0.1:8000/connection/websocket") or "",
            service_token_secret=secret_values["SERVICE_TOKEN_SECRET"],
            execution_token_secret=secret_values["EXECUTION_TOKEN_SECRET"],
            user_token_secret=secret_values["USER_TOKEN_SECRET"],
            user_jwks_url=_env("USER_JWKS_URL"),
            temporal_address=_env("TEMPORAL_ADDRESS", "127.0.0.1:7233") or "",
            temporal_namespace=_env("TEMPORAL_NAMESPACE", "default") or "default",
            detail_subscription_limit=_int("DETAIL_SUBSCRIPTION_LIMIT", 20),
            execution_token_ttl_seconds=_int("EXECUTION_TOKEN_TTL_SECONDS", 3600),
            realtime_token_ttl_seconds=_int("REALTIME_TOKEN_TTL_SECONDS", 300),
            realtime_token_audience=_env("REALTIME_TOKEN_AUDIENCE"),
            realtime_token_issuer=_env("REALTIME_TOKEN_ISSUER"),
            heartbeat_grace_seconds=_int("HEARTBEAT_GRACE_SECONDS", 30),
            max_body_bytes=_int("MAX_BODY_BYTES", 1024 * 1024),
            max_data_bytes=_int("MAX_DATA_BYTES", 16 * 1024),
            outbox_retention_seconds=_int("OUTBOX_RETENTION_SECONDS", 24 * 3600),
            dedup_retention_seconds=_int("DEDUP_RETENTION_SECONDS", 7 * 24 * 3600),
            event_retention_seconds=_int("EVENT_RETENTION_SECONDS", 30 * 24 * 3600),
            observer_metrics_port=_int("OBSERVER_METRICS_PORT", 9108),
            observer_metrics_host=_env("OBSERVER_METRICS_HOST", "127.0.0.1") or "127.0.0.1",
            internal_rate_per_second=_int("INTERNAL_RATE_PER_SECOND", 2000),
            internal_rate_burst=_int("INTERNAL_RATE_BURST", 4000),
            public_rate_per_second=_int("PUBLIC_RATE_PER_SECOND", 20),
            public_rate_burst=_int("PUBLIC_RATE_BURST", 60),
            user_jwks_audience=_env("USER_JWKS_AUDIENCE"),
            user_jwks_issuer=_env("USER_JWKS_ISSUER"),
            dashboard_dir=_dashboard_dir(),
            relay_idle_ms=max(1, _int("RELAY_IDLE_MS", 1000)),
            relay_idle_backoff=max(1.0, _float("RELAY_IDLE_BACKOFF", 8.0)),
            wakeup_host=_env("WAKEUP_HOST", "127.0.0.1") or "127.0.0.1",
            wakeup_port=_int("WAKEUP_PORT", 0),
            wakeup_advertise_host=_env("WAKEUP_ADVERTISE_HOST"),
            group_commit_max_events=max(1, _int("GROUP_COMMIT_MAX_EVENTS", 64)),
            group_commit_in_flight=max(1, _int("GROUP_COMMIT_IN_FLIGHT", 2)),
            grpc_host=_env("GRPC_HOST", "127.0.0.1") or "127.0.0.1",
            grpc_port=_int("GRPC_PORT", 0),
            cors_allowed_origins=_origins("CORS_ALLOWED_ORIGINS"),
            request_deadline_seconds=max(0.0, _float("REQUEST_DEADLINE_SECONDS", 15.0)),
            db_statement_timeout_seconds=max(0.0, _float("DB_STATEMENT_TIMEOUT_SECONDS", 10.0)),
            temporal_namespaces=tuple(n.strip() for n in (_env("TEMPORAL_NAMESPACES") or "").split(",") if n.strip()),
            temporal_tls=(_env("TEMPORAL_TLS", "false") or "").lower() in ("1", "true", "yes"),
            temporal_tls_ca_file=_env("TEMPORAL_TLS_CA_FILE"),
            temporal_tls_cert_file=_env("TEMPORAL_TLS_CERT_FILE"),
            temporal_tls_key_file=_env("TEMPORAL_TLS_KEY_FILE"),
            temporal_tls_server_name=_env("TEMPORAL_TLS_SERVER_NAME"),
            temporal_api_key=_env("TEMPORAL_API_KEY"),
            run_follow_interval_ms=max(100, _int("RUN_FOLLOW_INTERVAL_MS", 1000)),
            overdue_after_seconds=max(1, _int("OVERDUE_AFTER_SECONDS", 24 * 3600)),
            readiness_fail_after=max(1, _int("READINESS_FAIL_AFTER", 3)),
            readiness_recover_after=max(1, _int("READINESS_RECOVER_AFTER", 2)),
            readiness_interval_ms=max(0, _int("READINESS_INTERVAL_MS", 2000)),
            drain_seconds=max(0.0, float(_env("DRAIN_SECONDS", "5") or "5")),
            observer_shutdown_seconds=max(0.0, _float("OBSERVER_SHUTDOWN_SECONDS", 10.0)),
            max_event_age_seconds=_int("MAX_EVENT_AGE_SECONDS", 6 * 24 * 3600),
            max_clock_skew_seconds=max(0, _int("MAX_CLOCK_SKEW_SECONDS", 300)),
            event_retry_grace_seconds=_int("EVENT_RETRY_GRACE_SECONDS", 24 * 3600),
            task_retention_seconds=_int("TASK_RETENTION_SECONDS", 90 * 24 * 3600),
            notification_retention_seconds=_int("NOTIFICATION_RETENTION_SECONDS", 90 * 24 * 3600),
            correction_retention_seconds=_int("CORRECTION_RETENTION_SECONDS", 365 * 24 * 3600),
            archive_dir=_archive_dir(data_dir),
            change_log_sample=min(1.0, max(0.0, _float("CHANGE_LOG_SAMPLE", 0.01))),
            replica_status_url=_env("REPLICA_STATUS_URL"),
            shard_name=_shard_name("SHARD_NAME", _env("SHARD_NAME", "home") or "home"),
            shards=_shards(),
            observe_shard=_env("OBSERVE_SHARD"),
        )
        _check_shards(settings)
        for problem in settings.retention_policy().problems():
            names = f"{PREFIX}DEDUP_RETENTION_SECONDS, {PREFIX}MAX_EVENT_AGE_SECONDS"
            raise SettingsError(f"retention: {problem} ({names})")
        return settings
