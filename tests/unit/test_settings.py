from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from status.settings import SECRET_NAMES, Settings, SettingsError


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    import os

    for key in list(os.environ):
        if key.startswith("TASK_OBSERVER_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("TASK_OBSERVER_DATA_DIR", str(tmp_path))
    return tmp_path


def test_dev_generates_secrets_once_and_shares_them(clean_env: Path) -> None:
    first = Settings.from_env()
    second = Settings.from_env()
    assert first.service_token_secret == second.service_token_secret
    assert len(first.service_token_secret) >= 32
    assert first.database_url.startswith("sqlite:///")
    assert (clean_env / "dev-secrets.env").stat().st_mode & 0o077 == 0


def test_production_refuses_missing_secrets(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASK_OBSERVER_ENV", "production")
    with pytest.raises(SettingsError, match="must be set"):
        Settings.from_env()


def test_production_refuses_dev_secrets(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dev = Settings.from_env()
    monkeypatch.setenv("TASK_OBSERVER_ENV", "production")
    for name in SECRET_NAMES:
        monkeypatch.setenv(f"TASK_OBSERVER_{name}", "x" * 40)
    monkeypatch.setenv("TASK_OBSERVER_SERVICE_TOKEN_SECRET", dev.service_token_secret)
    with pytest.raises(SettingsError, match="dev secret"):
        Settings.from_env()
    monkeypatch.setenv("TASK_OBSERVER_SERVICE_TOKEN_SECRET", "y" * 40)
    assert Settings.from_env().is_production


def test_secrets_never_appear_in_repr(clean_env: Path) -> None:
    settings = Settings.from_env()
    assert settings.service_token_secret not in repr(settings)


def test_relay_idle_interval_reaches_the_observer(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from observer.runner import build_observer

    monkeypatch.setenv("TASK_OBSERVER_RELAY_IDLE_MS", "150")
    monkeypatch.setenv("TASK_OBSERVER_RELAY_IDLE_BACKOFF", "4")
    monkeypatch.setenv("TASK_OBSERVER_OBSERVER_METRICS_PORT", "0")
    settings = Settings.from_env()
    assert settings.relay_idle_ms == 150
    observer = build_observer(settings)
    try:
        assert observer.config.relay_idle_sleep == 0.15 and observer.config.idle_backoff == 4.0
    finally:
        asyncio.run(observer.close())
        observer.relay.engine.dispose()


def test_dedup_results_must_outlive_the_maximum_event_age(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """design D8.16: dedup covers the maximum accepted event age plus a retry grace, or a retry past
    it could be applied twice; a configuration that breaks it refuses to start."""
    policy = Settings.from_env().retention_policy()
    assert policy.problems() == [] and policy.max_event_age is not None and policy.dedup is not None
    assert policy.dedup >= policy.max_event_age + policy.retry_grace
    monkeypatch.setenv("TASK_OBSERVER_DEDUP_RETENTION_SECONDS", str(3 * 24 * 3600))
    with pytest.raises(SettingsError, match="maximum event age"):
        Settings.from_env()
    monkeypatch.setenv("TASK_OBSERVER_MAX_EVENT_AGE_SECONDS", str(24 * 3600))
    assert Settings.from_env().retention_policy().problems() == []  # 1 day + 1 day of grace < 3 days
    monkeypatch.setenv("TASK_OBSERVER_MAX_EVENT_AGE_SECONDS", "0")  # any age: dedup must then be kept forever
    with pytest.raises(SettingsError, match="events of any age"):
        Settings.from_env()
    monkeypatch.setenv("TASK_OBSERVER_DEDUP_RETENTION_SECONDS", "0")
    assert Settings.from_env().retention_policy().dedup is None


def test_the_archive_directory_defaults_to_the_data_directory(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings.from_env().archive_dir == clean_env.resolve() / "archive"
    monkeypatch.setenv("TASK_OBSERVER_ARCHIVE_DIR", "")  # set and empty: no archive (nothing archived is purged)
    assert Settings.from_env().archive_dir is None


def test_shards_are_named_once_and_each_observer_archives_its_own(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from observer.runner import observer_config

    monkeypatch.setenv("TASK_OBSERVER_SHARD_NAME", "east")
    monkeypatch.setenv("TASK_OBSERVER_SHARDS", "west=mysql+pymysql://u:p@h/w  north=mysql+pymysql://u:p@h/n")
    monkeypatch.setenv("TASK_OBSERVER_OBSERVE_SHARD", "north")
    settings = Settings.from_env()
    assert settings.sharded and list(settings.shards) == ["west", "north"]
    assert "mysql" not in repr(settings)  # URLs hold passwords
    assert observer_config(settings).archive_dir == clean_env.resolve() / "archive" / "north"
    for name, value in (
        ("TASK_OBSERVER_OBSERVE_SHARD", "south"),  # no such shard
        ("TASK_OBSERVER_SHARDS", "east=mysql+pymysql://u:p@h/e"),  # DATABASE_URL's own name
        ("TASK_OBSERVER_SHARDS", "west=x west=y"),
        ("TASK_OBSERVER_SHARDS", "Not A Name=x"),
        ("TASK_OBSERVER_SHARDS", "west"),
    ):
        with monkeypatch.context() as patch:
            patch.setenv(name, value)
            with pytest.raises(SettingsError):
                Settings.from_env()
    monkeypatch.delenv("TASK_OBSERVER_SHARDS")
    monkeypatch.delenv("TASK_OBSERVER_OBSERVE_SHARD")
    single = Settings.from_env()
    assert not single.sharded and observer_config(single).archive_dir == clean_env.resolve() / "archive"


def test_the_safety_poll_backs_off_while_idle_and_returns_with_work() -> None:
    from observer.loops import IdleBackoff

    idle = IdleBackoff(1.0, 8.0)
    assert [idle.after(False) for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert idle.after(True) == 1.0  # a look that found work: the base again at once
    assert idle.after(False) == 2.0
    fixed = IdleBackoff(0.02, 0.02)  # RELAY_IDLE_BACKOFF=1: a fixed poll
    assert {fixed.after(False) for _ in range(5)} == {0.02}
