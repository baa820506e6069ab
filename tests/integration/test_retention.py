"""Retention with archives (design D14.1, D8.16R16) on MariaDB and SQLite: each kind of data past
its own window, purged in batches along a watermark; event-log and correction rows archived to
files, read back and checked before they are deleted; events older than the maximum age refused.

Each test gets a database of its own: a retention pass dated months ahead would otherwise purge
the rows of every other test sharing the session's database.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from observer.loops import LoopConfig, Retention
from observer.relay import OutboxRelay
from status.app import commands as c
from status.app.corrections import Correct
from status.app.service import StatusService
from status.domain.auth import Role, ServicePrincipal
from status.domain.clock import utcnow
from status.domain.errors import DomainError, ErrorCode
from status.domain.retention import RetentionPolicy
from status.infra import archive, migrate
from status.infra import tables as t
from status.infra.db import create_engine
from status.infra.schemas import JsonSchemaValidator
from status.infra.tokens import ExecutionTokens
from status.infra.uow import SqlDatabase
from task_observer.cli import main
from tests.support.factories import activate, create_task, event
from tests.support.wiring import fold_all

TENANT = "tenant-retention"
COORDINATOR = ServicePrincipal("coordinator-1", TENANT, "content", frozenset({Role.COORDINATOR}))
ADMIN = ServicePrincipal("ops-console", TENANT, "content", frozenset({Role.ADMIN}))
POLICY = RetentionPolicy(
    max_event_age=timedelta(days=6),
    retry_grace=timedelta(days=1),
    dedup=timedelta(days=7),
    events=timedelta(days=30),
    outbox=timedelta(days=1),
    terminal_tasks=timedelta(days=90),
    notifications=timedelta(days=60),
    corrections=timedelta(days=60),
)


@pytest.fixture(params=["mariadb", "sqlite"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sa.Engine]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'retention.sqlite3'}"
    else:
        url = str(request.getfixturevalue("scratch_mariadb_url"))  # dropped after the test
    migrate.upgrade(url)
    eng = create_engine(url)
    yield eng
    eng.dispose()


def _service(engine: sa.Engine, clock: Callable[[], datetime] = utcnow, max_age: int | None = None) -> StatusService:
    svc = StatusService(
        SqlDatabase(engine),
        execution_tokens=ExecutionTokens("retention-tests-" + "x" * 32),
        validator=JsonSchemaValidator(),
        max_event_age_seconds=max_age,
        clock=clock,
    )
    svc.install_default_definitions()
    return svc


def _retention(engine: sa.Engine, days_ahead: int, directory: Path | None, batch: int = 1000) -> Retention:
    relay = OutboxRelay(engine, None, "retention", clock=lambda: utcnow() + timedelta(days=days_ahead))  # type: ignore[arg-type]
    return Retention(engine, relay, LoopConfig(retention=POLICY, archive_dir=directory, retention_batch=batch))


def _count(engine: sa.Engine, table: sa.Table, *where: sa.ColumnElement[bool]) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table).where(*where)).scalar_one())


def _history(service: StatusService) -> dict[str, str]:
    """Two running tasks with events, and a failed one with a correction: {name: taskId}."""
    tasks = {}
    for name in ("running-1", "running-2", "failed"):
        task_id = create_task(service, COORDINATOR)
        ctx = activate(service, COORDINATOR, task_id)
        claims = service._tokens.verify(ctx.execution_token, service.now())
        service.report_event(claims, event("STEP_STARTED", 1))
        service.report_event(claims, event("STEP_PROGRESS", 2, progress=c.Progress(1, 4, "pages")))
        tasks[name] = task_id
    failed = tasks["failed"]
    error = c.StepError(category="BUSINESS", code="DOC.BROKEN", user_message="The document is broken", retryable=False)
    result = service.report_event(COORDINATOR, event("TASK_FAILED", 1, task_id=failed, task_attempt=1, error=error))
    assert result["accepted"], result
    service.correct(
        ADMIN,
        Correct(
            task_id=failed,
            correction_id=f"fix-{uuid.uuid4().hex}",
            operator_id="alice",
            reason="ticket OPS-12",
            lifecycle_status="CANCELLED",
        ),
    )
    return tasks


def _archived(directory: Path, table: str) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for manifest in sorted((directory / table).rglob("*" + archive.MANIFEST_SUFFIX)):
        rows += archive.read_rows(manifest)
    return rows


def test_the_event_log_is_archived_and_verified_before_it_is_purged(engine: sa.Engine, tmp_path: Path) -> None:
    service = _service(engine)
    tasks = _history(service)
    deduped = _count(engine, t.task_event_dedup)
    with engine.connect() as conn:
        events = {r.event_id: r.task_version for r in conn.execute(sa.select(t.task_event_log))}
        corrections = set(conn.scalars(sa.select(t.task_correction.c.correction_id)))
    assert len(events) >= 10 and len(corrections) == 1
    directory = tmp_path / "archive"

    # Within every window: nothing moves.
    assert set(_retention(engine, 0, directory).run_once().values()) == {0}
    assert not directory.exists()

    # 40 days on: events, dedup results and published outbox rows are past their windows; tasks,
    # notifications (60 days) and corrections (60 days) are not. Batches of 3: several files.
    purged = _retention(engine, 40, directory, batch=3).run_once()
    assert purged["task_event_log"] == len(events)
    assert purged["task_event_dedup"] == deduped > 0
    assert purged["task"] == purged["task_correction"] == purged["user_notification"] == 0
    assert _count(engine, t.task_event_log) == 0 and _count(engine, t.task_event_dedup) == 0
    archived = _archived(directory, "task_event_log")
    assert sorted(r["event_id"] for r in archived) == sorted(events)  # every row, once
    assert {r["event_id"]: r["task_version"] for r in archived} == events
    assert all(isinstance(r["committed_at"], str) and str(r["committed_at"]).endswith("Z") for r in archived)
    verdicts = archive.verify_directory(directory)
    assert len(verdicts) == -(-len(events) // 3) and all(v.ok for v in verdicts)
    with engine.connect() as conn:
        assert conn.execute(
            sa.select(t.retention_watermark.c.position).where(t.retention_watermark.c.name == "task_event_log")
        ).scalar_one() == max(datetime.fromisoformat(str(r["committed_at"]).rstrip("Z")) for r in archived)
    assert _count(engine, t.task) == 3  # current state has its own, longer window

    # 100 days on: the failed task goes with its steps, handles and ACL rows; running tasks stay
    # whatever their age (they have not ended); corrections are archived first, notifications purged.
    fold_all(engine)
    purged = _retention(engine, 100, directory).run_once()
    assert purged["task"] == 1 and purged["task_correction"] == 1 and purged["user_notification"] >= 1
    failed = tasks["failed"]
    assert _count(engine, t.task, t.task.c.id == failed) == 0
    for child in (t.task_step, t.task_acl, t.task_external_ref):
        assert _count(engine, child, child.c.task_id == failed) == 0
    assert _count(engine, t.task_execution_handle, t.task_execution_handle.c.task_id == failed) == 0
    assert _count(engine, t.task, t.task.c.id.in_([tasks["running-1"], tasks["running-2"]])) == 2
    assert _count(engine, t.task_step, t.task_step.c.task_id == tasks["running-1"]) == 3
    assert [r["correction_id"] for r in _archived(directory, "task_correction")] == sorted(corrections)
    assert _count(engine, t.task_correction) == 0 and _count(engine, t.user_notification) == 0
    assert all(v.ok for v in archive.verify_directory(directory))

    # The purged task is gone for its producers too: a late report is refused, nothing is written.
    with pytest.raises(DomainError) as refused:
        service.report_event(COORDINATOR, event("TASK_COMPLETED", 2, task_id=failed, task_attempt=1))
    assert refused.value.code is ErrorCode.UNKNOWN_TASK


def test_nothing_is_deleted_unless_its_archive_reads_back_as_written(
    engine: sa.Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _history(_service(engine))
    before = _count(engine, t.task_event_log)

    # A file that does not hold what its manifest says (one row lost on the way to disk).
    real = archive.encode_rows
    monkeypatch.setattr(archive, "encode_rows", lambda rows: real(list(rows)[1:]))
    assert _retention(engine, 40, tmp_path / "archive").run_once()["task_event_log"] == 0
    assert _count(engine, t.task_event_log) == before
    monkeypatch.setattr(archive, "encode_rows", real)

    # An archive directory that cannot be written (a file in its place).
    blocked = tmp_path / "blocked"
    blocked.write_text("not a directory")
    assert _retention(engine, 40, blocked).run_once()["task_event_log"] == 0
    assert _count(engine, t.task_event_log) == before

    # No archive directory at all: the event log stays, the rest of retention goes on.
    assert _retention(engine, 40, None).run_once()["task_event_log"] == 0
    assert _count(engine, t.task_event_dedup) == 0  # purged by the first pass: dedup needs no archive
    assert _count(engine, t.task_event_log) == before


def test_a_purge_interrupted_after_archiving_archives_each_row_once(
    engine: sa.Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _history(_service(engine))
    before = _count(engine, t.task_event_log)
    directory = tmp_path / "archive"
    from status.infra import retention as purges

    real = purges.delete_rows

    def crash(engine: sa.Engine, name: str, *args: object, **kwargs: object) -> int:
        if name == "task_event_log":
            raise ConnectionError("the process died here")
        return real(engine, name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(purges, "delete_rows", crash)
    with pytest.raises(ConnectionError):
        _retention(engine, 40, directory, batch=4).run_once()
    written = sorted(p.name for p in directory.rglob("*" + archive.MANIFEST_SUFFIX))
    assert len(written) == 1 and _count(engine, t.task_event_log) == before  # archived, not deleted

    monkeypatch.setattr(purges, "delete_rows", real)
    _retention(engine, 40, directory, batch=4).run_once()
    assert _count(engine, t.task_event_log) == 0
    archived = _archived(directory, "task_event_log")
    assert len(archived) == before == len({r["event_id"] for r in archived})  # the first file was rewritten
    assert written[0] in {p.name for p in directory.rglob("*" + archive.MANIFEST_SUFFIX)}


def test_archive_verify_reports_tampered_missing_and_unfinished_files(
    engine: sa.Engine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _history(_service(engine))
    directory = tmp_path / "archive"
    _retention(engine, 40, directory, batch=4).run_once()
    assert main(["archive", "verify", "--dir", str(directory)]) == 0
    out = capsys.readouterr()
    assert "FAIL" not in out.out and out.out.count("ok ") >= 3

    manifests = sorted(directory.rglob("*" + archive.MANIFEST_SUFFIX))
    data = manifests[0].with_name(json.loads(manifests[0].read_text())["file"])
    data.write_bytes(data.read_bytes()[:-8] + b"\x00" * 8)  # a damaged file
    manifests[1].with_name(json.loads(manifests[1].read_text())["file"]).unlink()  # a lost file
    manifests[2].unlink()  # a write that never finished: data without its manifest
    assert main(["archive", "verify", "--dir", str(directory)]) == 1
    lines = capsys.readouterr().out.splitlines()
    failures = [line for line in lines if line.startswith("FAIL")]
    assert len(failures) == 3, lines
    assert any("checksum" in line for line in failures)
    assert any("missing" in line for line in failures)
    assert any("no manifest" in line for line in failures)


def test_events_older_than_the_maximum_age_are_refused_but_retries_are_still_answered(engine: sa.Engine) -> None:
    later = [timedelta(0)]
    service = _service(engine, clock=lambda: utcnow() + later[0], max_age=3600)
    task_id = create_task(service, COORDINATOR)
    ctx = activate(service, COORDINATOR, task_id)
    claims = service._tokens.verify(ctx.execution_token, service.now())
    logged = _count(engine, t.task_event_log, t.task_event_log.c.task_id == task_id)
    started = event("STEP_STARTED", 1)
    with pytest.raises(DomainError) as refused:
        service.report_event(claims, replace(started, occurred_at=started.occurred_at - timedelta(hours=2)))
    assert refused.value.code is ErrorCode.EVENT_TOO_OLD and not refused.value.retryable
    assert _count(engine, t.task_event_log, t.task_event_log.c.task_id == task_id) == logged  # nothing written

    first = service.report_event(claims, started)
    assert first["accepted"] and not first["duplicate"]
    later[0] = timedelta(hours=2)  # the same event again, past the age limit: its dedup entry answers
    again = service.report_event(claims, started)
    assert again["duplicate"] and again["taskVersion"] == first["taskVersion"]
    with pytest.raises(DomainError) as too_old:  # a new event that old is refused
        service.report_event(claims, replace(event("STEP_PROGRESS", 2), occurred_at=started.occurred_at))
    assert too_old.value.code is ErrorCode.EVENT_TOO_OLD


def test_an_archived_event_is_shown_exported_restored_and_traced_again(
    engine: sa.Engine, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29 item 6: `trace` points at the archive, and the archive can be read back: show one
    event, export a range, restore a range (idempotent); the next retention pass takes it again."""
    _history(_service(engine))
    with engine.connect() as conn:
        query = sa.select(t.task_event_log).order_by(t.task_event_log.c.committed_at)
        before = [dict(r) for r in conn.execute(query).mappings()]
    picked = before[len(before) // 2]
    directory = tmp_path / "archive"
    monkeypatch.setenv("TASK_OBSERVER_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    monkeypatch.setenv("TASK_OBSERVER_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TASK_OBSERVER_ARCHIVE_DIR", str(directory))
    assert main(["archive", "verify"]) == 0  # nothing archived yet is no failure
    assert "nothing archived yet" in capsys.readouterr().err
    _retention(engine, 40, directory, batch=4).run_once()
    assert _count(engine, t.task_event_log) == 0
    assert main(["trace", picked["event_id"]]) == 1
    assert "archive show" in capsys.readouterr().err

    assert main(["archive", "show", picked["event_id"]]) == 0
    (shown,) = json.loads(capsys.readouterr().out)
    assert (shown["event_id"], shown["task_id"], shown["task_version"]) == (
        picked["event_id"],
        picked["task_id"],
        picked["task_version"],
    )
    assert shown["payload"] == picked["payload"]
    assert main(["archive", "show", "evt-never-archived"]) == 1
    capsys.readouterr()

    assert main(["archive", "export"]) == 0
    exported = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(r["event_id"] for r in exported) == sorted(r["event_id"] for r in before)
    # A range: [picked, the next one) by commit time, as ISO instants.
    since = picked["committed_at"].isoformat() + "Z"
    assert main(["archive", "export", "--from", since]) == 0
    later = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["event_id"] for r in later} == {
        r["event_id"] for r in before if r["committed_at"] >= picked["committed_at"]
    }

    assert main(["archive", "restore", "--from", since]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts == {"table": "task_event_log", "restored": len(later), "alreadyThere": 0}
    with engine.connect() as conn:
        back = {r["event_id"]: dict(r) for r in conn.execute(sa.select(t.task_event_log)).mappings()}
    original = {r["event_id"]: r for r in before}
    for event_id, row in back.items():  # as they were, to the millisecond the columns keep
        assert {k: v for k, v in row.items()} == original[event_id], event_id
    assert main(["archive", "restore", "--from", since]) == 0  # again: nothing twice
    assert json.loads(capsys.readouterr().out)["alreadyThere"] == len(later)
    assert main(["trace", picked["event_id"]]) == 0
    assert json.loads(capsys.readouterr().out)[0]["event"]["eventId"] == picked["event_id"]

    # Past its window still: the next pass archives it again (same files) and deletes it.
    _retention(engine, 40, directory, batch=4).run_once()
    assert _count(engine, t.task_event_log) == 0
    assert all(v.ok for v in archive.verify_directory(directory))
    assert main(["archive", "restore", "--until", "2000-01-01"]) == 0  # a range with nothing in it
    assert json.loads(capsys.readouterr().out)["restored"] == 0
