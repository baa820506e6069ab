"""The plugin's local outbox: reporting never waits for the disk, and the file keeps every event in order."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import pytest
from task_status_interceptors._context import StepBinding
from task_status_interceptors._reporter import Reporter, ReporterConfig


def _reporter(path: Path) -> Reporter:
    return Reporter(ReporterConfig("http://127.0.0.1:9", "token", "worker-1", path))


def _events(path: Path) -> list[tuple[str, int, str]]:
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT execution_key, seq, body FROM event ORDER BY id").fetchall()
    return [(key, seq, json.loads(body)["eventId"]) for key, seq, body in rows]


def test_reports_return_while_the_file_is_busy_and_land_in_order(tmp_path: Path) -> None:
    path = tmp_path / "outbox.sqlite3"
    reporter = _reporter(path)
    done = threading.Event()

    def report() -> None:
        execution = reporter.begin("run/a/1", StepBinding("tsk", "s1"), 1)
        for i in range(5):
            reporter.enqueue("run/a/1", {"eventType": "STEP_PROGRESS", "progress": {"current": i}})
        execution.completed()
        done.set()

    with reporter.outbox._db_lock:  # a slow disk: the file is busy for as long as this block runs
        thread = threading.Thread(target=report)
        thread.start()
        assert done.wait(5), "reporting waited for the outbox file"
        assert reporter.outbox.queued_events == 7  # STARTED, 5 x PROGRESS, COMPLETED: queued, not written yet
    assert reporter.flush(5)
    assert reporter.pending_events() == 7
    events = _events(path)
    assert [seq for _, seq, _ in events] == list(range(1, 8))
    assert events[0][2] == "run/a/1:1:STEP_STARTED" and events[-1][2] == "run/a/1:7:STEP_COMPLETED"
    reporter.close()


def test_a_restarted_worker_continues_the_sequence_of_an_unfinished_execution(tmp_path: Path) -> None:
    path = tmp_path / "outbox.sqlite3"
    first = _reporter(path)
    first.begin("run/b/1", StepBinding("tsk", "s1"), 1)
    first.enqueue("run/b/1", {"eventType": "STEP_PROGRESS", "progress": {"current": 1}})
    first.close()  # what was queued is written before the file closes
    second = _reporter(path)
    execution = second.begin("run/b/1", StepBinding("tsk", "s1"), 1)  # the same attempt again: no new STARTED
    execution.completed()
    assert second.flush(5)
    assert [event_id for _, _, event_id in _events(path)] == [
        "run/b/1:1:STEP_STARTED",
        "run/b/1:2:STEP_PROGRESS",
        "run/b/1:3:STEP_COMPLETED",
    ]
    # A report after the terminal one is ignored, never an error in the activity.
    second.enqueue("run/b/1", {"eventType": "STEP_PROGRESS", "progress": {"current": 2}})
    assert second.flush(5) and len(_events(path)) == 3
    second.close()


def test_a_wave_of_bindings_settles_in_one_transaction_or_not_at_all(tmp_path: Path) -> None:
    path = tmp_path / "outbox.sqlite3"
    reporter = _reporter(path)
    for key in ("run/c/1", "run/d/1", "run/e/1"):
        reporter.begin(key, StepBinding("tsk", key.split("/")[1]), 1)
    assert reporter.flush(5)
    events, _ = reporter.outbox.load_batch(10)
    started = {key: (event_id, event) for event_id, key, event in events}
    bound = [("run/c/1", "handle-c", "exe-c"), ("run/d/1", "handle-d", "exe-d")]
    refused = [("run/d/1", started["run/d/1"][1], "TERMINAL_STATE: the task ended")]
    unwritable = [("run/d/1", {"eventId": "run/d/1:1:STEP_STARTED", "why": {1, 2}}, "TERMINAL_STATE")]
    with pytest.raises(TypeError):  # a refusal that cannot be written: nothing of the call stays
        reporter.outbox.settle(bound, [started["run/c/1"][0], started["run/d/1"][0]], unwritable)
    assert reporter.outbox.handles_of(["run/c/1", "run/d/1"]) == {}
    assert len(_events(path)) == 3
    reporter.outbox.settle(bound, [started["run/c/1"][0], started["run/d/1"][0]], refused)
    assert reporter.outbox.handles_of(["run/c/1", "run/d/1", "run/e/1"]) == {
        "run/c/1": "handle-c",
        "run/d/1": "handle-d",
    }
    assert reporter.outbox.pending_events() == 1  # the file's next read writes the wave first
    assert [event_id for _, _, event_id in _events(path)] == ["run/e/1:1:STEP_STARTED"]  # only the unsettled one
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT event_id, reason FROM undeliverable").fetchall() == [
            ("run/d/1:1:STEP_STARTED", "TERMINAL_STATE: the task ended")
        ]
    reporter.close()


def test_refused_reports_go_back_to_the_queue_with_their_execution_and_old_files_are_upgraded(tmp_path: Path) -> None:
    from task_status_interceptors._outbox import Outbox, read_undeliverable

    path = tmp_path / "outbox.sqlite3"
    # A file written before refused rows kept their execution: one such row, no binding to bind with.
    with sqlite3.connect(path) as db:
        db.executescript(
            "CREATE TABLE undeliverable (id INTEGER PRIMARY KEY AUTOINCREMENT, execution_key TEXT NOT NULL,"
            " event_id TEXT, body TEXT NOT NULL, reason TEXT NOT NULL, refused_at REAL NOT NULL);"
        )
        old = {"eventId": "run/old/1:1:STEP_STARTED", "eventType": "STEP_STARTED", "sourceSeq": 1}
        db.execute(
            "INSERT INTO undeliverable (execution_key, event_id, body, reason, refused_at) VALUES (?, ?, ?, ?, 0)",
            ("run/old/1", old["eventId"], json.dumps(old), "bind refused"),
        )
    outbox = Outbox(path)
    outbox.begin("run/new/1", StepBinding("tsk_1", "02_parse"), 2)
    outbox.enqueue("run/new/1", {"eventType": "STEP_STARTED"})
    assert outbox.flush()
    dropped = outbox.drop_execution("run/new/1", "bind refused: HTTP 404")
    assert dropped == 1 and _events(path) == []
    assert [r["eventId"] for r in read_undeliverable(path)] == [old["eventId"], "run/new/1:1:STEP_STARTED"]

    requeued, kept = outbox.requeue()
    assert requeued == ["run/new/1:1:STEP_STARTED"] and kept == [old["eventId"]]
    assert _events(path) == [("run/new/1", 1, "run/new/1:1:STEP_STARTED")]  # the same eventId and seq
    with sqlite3.connect(path) as db:
        binding, attempt, finished = db.execute(
            "SELECT binding, attempt, finished FROM execution WHERE key = 'run/new/1'"
        ).fetchone()
    assert json.loads(binding)["task_id"] == "tsk_1" and attempt == 2 and finished == 1
    assert [r["eventId"] for r in read_undeliverable(path)] == [old["eventId"]]  # kept, as said
    assert outbox.requeue(["no-such-event"]) == ([], [])
    outbox.close()


def test_a_batch_loads_every_execution_its_events_belong_to_in_one_read(tmp_path: Path) -> None:
    path = tmp_path / "outbox.sqlite3"
    reporter = _reporter(path)
    keys = [f"run/x{i}/{1 + i % 3}" for i in range(12)]
    for i, key in enumerate(keys):
        reporter.begin(key, StepBinding("tsk", f"s{i}"), 1 + i % 3)
        reporter.enqueue(key, {"eventType": "STEP_PROGRESS", "progress": {"current": i}})
    assert reporter.flush(5)
    reporter.outbox.settle([(keys[4], "handle-4", "exe-4")], [])
    events, executions = reporter.outbox.load_batch(20)
    assert len(events) == 20 and set(executions) == {key for _, key, _ in events}  # 10 executions
    for i, key in enumerate(keys[:10]):
        assert executions[key]["binding"] == {"task_id": "tsk", "step_id": f"s{i}"}
        assert executions[key]["attempt"] == 1 + i % 3
        assert (executions[key]["handle"], executions[key]["execution_id"]) == (
            ("handle-4", "exe-4") if i == 4 else (None, None)
        )
    reporter.close()


def _handles_in_file(path: Path) -> dict[str, str]:
    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT key, execution_handle FROM execution WHERE execution_handle IS NOT NULL"))


def test_answers_ride_the_files_next_transaction_and_no_read_misses_them(tmp_path: Path) -> None:
    """What answers said costs no transaction of its own: the sender's next read, or the writer's
    next transaction, writes it first — a read never sees a delivered event or misses a handle."""
    path = tmp_path / "outbox.sqlite3"
    reporter = _reporter(path)
    for key in ("run/f/1", "run/g/1"):
        reporter.begin(key, StepBinding("tsk", key.split("/")[1]), 1)
    assert reporter.flush(5)
    events, _ = reporter.outbox.load_batch(10)
    started = {key: event_id for event_id, key, _ in events}
    reporter.outbox.settle([("run/f/1", "handle-f", "exe-f")], [started["run/f/1"]])
    assert len(_events(path)) == 2 and _handles_in_file(path) == {}  # not written by itself
    events, executions = reporter.outbox.load_batch(10)  # the next read writes it first
    assert [key for _, key, _ in events] == ["run/g/1"] and executions["run/g/1"]["handle"] is None
    assert _events(path) == [("run/g/1", 1, "run/g/1:1:STEP_STARTED")]
    assert _handles_in_file(path) == {"run/f/1": "handle-f"}
    # Delivered, then an activity reports: the writer's transaction carries both.
    reporter.outbox.settle(delivered=[started["run/g/1"]])
    reporter.enqueue("run/f/1", {"eventType": "STEP_PROGRESS", "progress": {"current": 1}})
    assert reporter.flush(5)
    assert _events(path) == [("run/f/1", 2, "run/f/1:2:STEP_PROGRESS")]
    assert reporter.pending_events() == 1
    # Said and never followed by anything: closing writes it.
    (progress, _, _), *_ = reporter.outbox.load_batch(10)[0]
    reporter.outbox.settle(delivered=[progress])
    reporter.close()
    assert _events(path) == []


def test_answers_whose_write_failed_are_written_with_the_next_transaction(tmp_path: Path) -> None:
    path = tmp_path / "outbox.sqlite3"
    reporter = _reporter(path)
    reporter.begin("run/h/1", StepBinding("tsk", "h"), 1)
    assert reporter.flush(5)
    (started, _, _), *_ = reporter.outbox.load_batch(10)[0]
    reporter.outbox.settle([("run/h/1", "handle-h", "exe-h")], [started])
    with sqlite3.connect(path, isolation_level=None) as other:  # the write fails half-way: rolled back
        other.execute("ALTER TABLE event RENAME TO event_away")
        with pytest.raises(sqlite3.OperationalError):
            reporter.outbox.pending_events()
        other.execute("ALTER TABLE event_away RENAME TO event")
    assert _handles_in_file(path) == {}  # the handle's UPDATE went with the rollback
    assert reporter.outbox.load_batch(10) == ([], {})  # kept, and written by the next read
    assert _events(path) == [] and _handles_in_file(path) == {"run/h/1": "handle-h"}
    reporter.close()
