"""``python -m task_status_interceptors undeliverable list PATH``: a path is a path (never an SQLite
URI), and a file that is not an outbox, or a row that cannot be read, is a clear message and exit 1."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from task_status_interceptors.__main__ import main
from task_status_interceptors._outbox import SCHEMA


def _outbox_with(path: Path, *bodies: str) -> None:
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA)  # the plugin's own
        for n, body in enumerate(bodies):
            db.execute(
                "INSERT INTO undeliverable (execution_key, event_id, body, reason, refused_at) VALUES (?, ?, ?, ?, ?)",
                (f"exe-{n}", f"evt-{n}", body, "SCHEMA_REJECTED", 1.0),
            )


@pytest.mark.parametrize("name", ["a%41b.sqlite3", "d#e.sqlite3", "what?.sqlite3", "plain.sqlite3"])
def test_a_file_named_like_a_uri_is_listed_as_that_file(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / name
    _outbox_with(path, json.dumps({"eventType": "STEP_COMPLETED"}))
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["undeliverable", "list", str(path)]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["eventId"] == "evt-0"
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing created beside it


def test_a_file_that_is_no_database_is_a_message_and_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("this is not an outbox\n" * 100)
    for action in (["list", str(path)], ["resend", str(path), "--queue-only"]):
        assert main(["undeliverable", *action]) == 1
        err = capsys.readouterr().err
        assert "is not a readable outbox file" in err and "Traceback" not in err


def test_a_row_whose_body_is_not_json_is_listed_with_its_problem_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "outbox.sqlite3"
    _outbox_with(path, json.dumps({"eventType": "STEP_PROGRESS"}), "{not json")
    assert main(["undeliverable", "list", str(path)]) == 1
    printed = capsys.readouterr()
    good, bad = (json.loads(line) for line in printed.out.splitlines())
    assert good["event"] == {"eventType": "STEP_PROGRESS"} and "problem" not in good
    assert bad["event"] is None and "not JSON" in bad["problem"]
    assert "evt-1" in printed.err
