from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from task_observer.cli import build_parser, main


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert commands
    for name in commands:
        assert name in out


def test_unknown_command_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["no-such-command"])
    assert exit_info.value.code == 2


def test_every_option_of_every_command_has_help_text() -> None:
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    missing = []
    for name, sub in commands.items():
        for action in sub._actions:
            if action.dest == "help":
                continue
            if not action.help and not isinstance(action, argparse._SubParsersAction):
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
            if isinstance(action, argparse._SubParsersAction):
                for inner_name, inner in action.choices.items():
                    missing += [
                        f"{name} {inner_name} {'/'.join(a.option_strings) or a.dest}"
                        for a in inner._actions
                        if a.dest != "help" and not a.help
                    ]
    assert missing == []


def test_a_token_is_signed_only_with_a_secret_the_service_knows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run from a worker's folder, it used to invent a secrets file there and print a token every
    service refuses; now it says where the secret would come from, and creates nothing."""
    monkeypatch.chdir(tmp_path)
    for name in ("DATA_DIR", "SERVICE_TOKEN_SECRET", "USER_TOKEN_SECRET", "ENV"):
        monkeypatch.delenv(f"TASK_OBSERVER_{name}", raising=False)
    args = ["service-token", "--producer", "p", "--tenant", "t", "--scope", "s", "--role", "WORKER"]
    assert main(args) == 2
    assert "no TASK_OBSERVER_SERVICE_TOKEN_SECRET and no dev secrets" in capsys.readouterr().err
    assert main(["user-token", "--tenant", "t", "--user", "u"]) == 2
    assert not (tmp_path / ".cache").exists()
    monkeypatch.setenv("TASK_OBSERVER_SERVICE_TOKEN_SECRET", "s" * 40)
    assert main(args) == 0
    printed = capsys.readouterr()
    assert printed.out.count(".") == 2 and "from the environment" in printed.err


def test_exit_codes_say_usage_and_unexpected_failures_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/operations.md, "Command line": 2 for a command that cannot run as given, 3 for an unexpected failure."""
    monkeypatch.setenv("TASK_OBSERVER_SERVICE_TOKEN_SECRET", "s" * 40)
    monkeypatch.setenv("TASK_OBSERVER_DATA_DIR", str(tmp_path))
    bad_role = ["service-token", "--producer", "p", "--tenant", "t", "--scope", "s", "--role", "WIZARD"]
    assert main(bad_role) == 2
    assert "unknown role" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:  # argparse's own usage error
        main(["archive", "export", "--from", "yesterday", "--dir", str(tmp_path)])
    assert usage.value.code == 2
    assert "not an ISO 8601" in capsys.readouterr().err
    monkeypatch.setenv("TASK_OBSERVER_ARCHIVE_DIR", "")  # archiving off
    assert main(["archive", "verify"]) == 2
    monkeypatch.delenv("TASK_OBSERVER_ARCHIVE_DIR")
    assert main(["archive", "verify"]) == 0  # nothing archived yet
    # A database that cannot be reached: the trace of it, and 3.
    monkeypatch.setenv("TASK_OBSERVER_DATABASE_URL", f"sqlite:///{tmp_path / 'no' / 'such' / 'dir' / 'db.sqlite3'}")
    assert main(["trace", "evt-1"]) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and "unexpected failure" in err


@pytest.mark.parametrize(
    "manifest",
    [
        b"not json at all",
        b"[1, 2, 3]",
        b'{"file": "x.jsonl.gz"}',
        b'{"file": "x.jsonl.gz", "datedBy": "received_at", "from": "not a date", "to": "2026-12-01T00:00:00Z"}',
    ],
    ids=["not JSON", "a list", "keys missing", "from no date"],
)
def test_a_damaged_archive_is_a_clear_message_and_exit_1_on_every_action(
    manifest: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TASK_OBSERVER_SERVICE_TOKEN_SECRET", "s" * 40)
    monkeypatch.setenv("TASK_OBSERVER_DATA_DIR", str(tmp_path))
    archive = tmp_path / "archive"
    (archive / "task_event_log" / "2026-12-01").mkdir(parents=True)
    (archive / "task_event_log" / "2026-12-01" / "part-1.manifest.json").write_bytes(manifest)
    database = f"sqlite:///{tmp_path / 'restore.sqlite3'}"
    for action in (
        ["archive", "show", "evt-1", "--dir", str(archive)],
        ["archive", "export", "--dir", str(archive)],
        ["archive", "restore", "--dir", str(archive), "--database-url", database],
        ["archive", "verify", "--dir", str(archive)],
    ):
        assert main(action) == 1, action
        err = capsys.readouterr().err
        assert "Traceback" not in err, (action, err)
        assert "part-1.manifest.json" in err or "FAIL" in err or "0 of 1" in err, (action, err)


def test_restore_into_something_that_is_no_database_url_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TASK_OBSERVER_SERVICE_TOKEN_SECRET", "s" * 40)
    monkeypatch.setenv("TASK_OBSERVER_DATA_DIR", str(tmp_path))
    assert main(["archive", "restore", "--dir", str(tmp_path), "--database-url", "not a database url"]) == 2
    err = capsys.readouterr().err
    assert "not a usable database URL" in err and "Traceback" not in err
