"""Settings for tests: fresh random secrets, no files, overridable."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest

from status.settings import Settings


def make_settings(database_url: str, data_dir: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "environment": "test",
        "data_dir": data_dir,
        "database_url": database_url,
        "centrifugo_api_url": "http://127.0.0.1:1/api",
        "centrifugo_api_key": secrets.token_hex(16),
        "centrifugo_token_secret": secrets.token_hex(32),
        "centrifugo_public_url": "ws://127.0.0.1:1/connection/websocket",
        "service_token_secret": secrets.token_hex(32),
        "execution_token_secret": secrets.token_hex(32),
        "user_token_secret": secrets.token_hex(32),
        "user_jwks_url": None,
        "temporal_address": "127.0.0.1:7233",
        "temporal_namespace": "default",
        "detail_subscription_limit": 20,
        "execution_token_ttl_seconds": 3600,
        "realtime_token_ttl_seconds": 300,
        "heartbeat_grace_seconds": 30,
        "max_body_bytes": 64 * 1024,
        "max_data_bytes": 4 * 1024,
        "outbox_retention_seconds": 3600,
        "dedup_retention_seconds": 3600,
        "event_retention_seconds": 3600,
    }
    values.update(overrides)
    return Settings(**values)


def database_environment(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> None:
    """The variables that name ``settings``' databases (its shards too), for a command run in-process."""
    monkeypatch.setenv("TASK_OBSERVER_DATABASE_URL", settings.database_url)
    if settings.shards:
        monkeypatch.setenv("TASK_OBSERVER_SHARD_NAME", settings.shard_name)
        monkeypatch.setenv("TASK_OBSERVER_SHARDS", " ".join(f"{name}={url}" for name, url in settings.shards.items()))
