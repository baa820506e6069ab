"""The plugin's durable local outbox: one SQLite file per worker, written by its own thread.

Every event gets its execution's next ``sourceSeq`` at once, in memory (resumed
from the file after a restart), so reporting never waits for a read; a writer
thread persists what queued meanwhile in one transaction (while reports keep coming, one per
``write_interval`` at most) and then calls ``on_persisted``. Only persisted events are ever sent.
The sender's reads (``next_batch``, ``handles_of`` …) are blocking calls for its own thread,
never for the worker's event loop.

The sender does not read back what the writer just wrote: the writer hands each committed event
over in memory, with its row id, and the sender takes its batches from there (``next_batch``)
while memory and file agree. The file is read instead whenever they may not: at start (what an
earlier process left), after anything but a clean delivery (a retry, a rebinding, a dropped
execution), when asked (``look_in_file``: draining, the heartbeat rounds, which also find what
an operator queued again) — until a read finds the file's backlog gone.

What the sender learns from an answer — handles handed out, events delivered or refused for good
— is not written in a transaction of its own: ``settle`` keeps it in memory, and whichever touches
the file next writes it first, in its own transaction (the writer's next one, or the sender's next
read). A transaction and a thread hand-off per answer were a fifth to a third of the reporter's cost
(docs/benchmarks.md). Nothing reads the file without it: a read sees every delivered event gone
and every handle bound. A crash before then only sends those events again, with the same ids,
which the service answers as duplicates (design P9).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from task_status_interceptors._context import StepBinding
from task_status_interceptors._outbox_rows import Settled, Writes, parts

log = logging.getLogger("task_status_interceptors.reporter")

SCHEMA = """
CREATE TABLE IF NOT EXISTS execution (
    key TEXT PRIMARY KEY,           -- workflow run id / activity id / attempt
    binding TEXT NOT NULL,          -- StepBinding JSON
    attempt INTEGER NOT NULL,
    next_seq INTEGER NOT NULL,
    execution_handle TEXT,
    execution_id TEXT,
    finished INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS event (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    execution_key TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    UNIQUE (execution_key, seq)
);
-- Reports the status service refused for good: kept, with why, for an operator to list and,
-- once the cause is fixed, send again (python -m task_status_interceptors undeliverable ...)
-- instead of vanishing. binding/attempt: the execution's, so it can be bound again.
CREATE TABLE IF NOT EXISTS undeliverable (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    execution_key TEXT NOT NULL,
    event_id TEXT,
    body TEXT NOT NULL,
    reason TEXT NOT NULL,
    refused_at REAL NOT NULL,
    binding TEXT,
    attempt INTEGER
);
"""

# Files written before the undeliverable rows kept their execution: the columns are added on open.
_UNDELIVERABLE_COLUMNS = (("binding", "TEXT"), ("attempt", "INTEGER"))

Batch = tuple[list[tuple[int, str, dict[str, Any]]], dict[str, dict[str, Any]]]


def now_iso() -> str:
    """The time now, UTC, to the millisecond (``2026-12-07T10:00:00.123Z``). The part up to the second
    is formatted once a second: every report and heartbeat carries one."""
    global _second
    now = time.time()
    second, text = _second
    if second != int(now):
        second = int(now)
        text = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _second = (second, text)
    return f"{text}.{int((now - second) * 1000):03d}Z"


_second = (-1, "")  # the second of the last time formatted, and its text


class Outbox:
    """The file and its writer thread; sequences are assigned here, in memory, in report order."""

    def __init__(
        self, path: Path, on_persisted: Callable[[], None] = lambda: None, *, write_interval: float = 0.0
    ) -> None:
        self._on_persisted = on_persisted
        self._write_interval = write_interval
        self._last_write = 0.0
        self._db_lock = threading.Lock()
        self._path = path
        # The file is created on first use (the first execution recorded), never by a worker that
        # runs nothing tracked; one left by an earlier process is opened at once, to be resumed.
        self._db: sqlite3.Connection | None = self._connect() if path.exists() else None
        # One lock, two conditions: the writer waits for work on one, ``flush`` callers wait on the
        # other for what the writer wrote (a notify for work never wakes a flush caller instead).
        lock = threading.RLock()
        self._queue = threading.Condition(lock)
        self._written = threading.Condition(lock)
        self._writer_idle = False  # the writer waits for work: the next write wakes it, once
        self._next_seq: dict[str, int] = {}
        if self._db is not None:
            self._next_seq = dict(
                self._file().execute("SELECT key, next_seq FROM execution WHERE finished = 0").fetchall()
            )
        self._writes = Writes()
        self._settled = Settled()  # what the sender learnt, for the file's next transaction
        # The memory mirror (see the module's docstring): committed events not taken yet, in
        # order; the executions recorded by this process; which rows end an execution (its memory
        # goes when they are settled); whether the next batch comes from the file. A file left by
        # an earlier process is read first.
        self._ready: list[tuple[int, str, dict[str, Any]]] = []
        self._known: dict[str, dict[str, Any]] = {}
        self._finishing: dict[int, str] = {}
        self._from_file = self._db is not None
        self.queued_events = 0
        self._persisted_events = 0  # written by this process so far (``persist_reported`` waits on it)
        self._write_now = False  # the writer writes at once, without gathering
        self._closing = False
        self._writer = threading.Thread(target=self._write_loop, name="task-status-outbox", daemon=True)
        self._writer.start()

    def _connect(self) -> sqlite3.Connection:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(str(self._path), check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(SCHEMA)
        _add_missing_columns(db)
        return db

    def _file(self) -> sqlite3.Connection:
        """The file, created now if it does not exist yet (call holding ``_db_lock``, off the loop)."""
        if self._db is None:
            self._db = self._connect()
        return self._db

    # ------------------------------------------------------------ any thread, never waits for I/O
    def begin(self, key: str, binding: StepBinding, attempt: int, temporal: dict[str, Any] | None = None) -> bool:
        """Record the execution (with its Temporal activity, when known); False when it was already
        known (a resumed attempt)."""
        with self._queue:
            if key in self._next_seq:
                return False
            self._next_seq[key] = 1
            recorded = {**binding.to_json(), **({"temporal": temporal} if temporal else {})}
            self._writes.executions.append((key, json.dumps(recorded), attempt, time.time()))
            self._known[key] = {
                "key": key,
                "binding": recorded,
                "attempt": attempt,
                "handle": None,
                "execution_id": None,
            }
            self._wake_writer()
            return True

    def _wake_writer(self) -> None:
        """After queueing a write (holding the lock): wake the writer if it waits, once a burst;
        while it writes, what queues meanwhile goes with its next transaction unasked."""
        if self._writer_idle:
            self._writer_idle = False
            self._queue.notify()

    def enqueue(self, key: str, body: dict[str, Any], *, finished: bool = False) -> bool:
        """Give the event its execution's next sequence and queue it for the file; False once closed."""
        with self._queue:
            seq = self._next_seq.get(key)
            if seq is None:  # finished or dropped: nothing of it is sent any more
                return False
            event = {**body, "eventId": f"{key}:{seq}:{body['eventType']}", "sourceSeq": seq, "occurredAt": now_iso()}
            self._writes.events.append((key, seq, json.dumps(event), event, finished))
            # Only an execution's latest sequence matters to the file: one UPDATE per execution a
            # transaction, however many of its events it writes (finished is final: set once).
            self._writes.sequences[key] = (seq + 1, int(finished))
            self.queued_events += 1
            if finished:
                del self._next_seq[key]
            else:
                self._next_seq[key] = seq + 1
            self._wake_writer()
            return True

    def _write_loop(self) -> None:
        """Persist queued statements, all that queued meanwhile in one transaction, then signal."""
        while True:
            with self._queue:
                while not self._writes and not self._closing:
                    self._writer_idle = True
                    self._queue.wait()
                self._writer_idle = False
                # While reports keep coming, one transaction every ``write_interval`` at most: what
                # comes meanwhile joins it. After a quiet spell the first one goes at once.
                gather = self._last_write + self._write_interval - time.monotonic()
                if gather > 0 and not self._closing and not self._write_now:
                    self._queue.wait(gather)
                self._write_now = False
                writes, self._writes = self._writes, Writes()
                events = self.queued_events
                if not writes and not self._settled:
                    return  # closing, and everything is in the file
            self._last_write = time.monotonic()
            try:
                with self._db_lock, self._transaction():
                    first_id = writes.apply(self._file())
                    self._write_settled()
            except Exception:
                log.exception("the local outbox could not be written; retrying")
                with self._queue:
                    self._writes = writes.then(self._writes)  # keep their order ahead of anything newer
                time.sleep(1.0)
                continue
            with self._queue:
                self.queued_events -= events
                self._persisted_events += events
                for row_id, (key, _, _, event, finished) in enumerate(writes.events, first_id):
                    self._ready.append((row_id, key, event))
                    if finished:
                        self._finishing[row_id] = key
                self._written.notify_all()
            self._on_persisted()

    def persist_reported(self, timeout: float) -> bool:
        """Write what was reported before this call at once, without waiting out the write interval,
        and wait (bounded) until it is in the file — not for what is reported meanwhile, which a
        busy worker never stops doing. True when it is."""
        deadline = time.monotonic() + timeout
        with self._queue:
            target = self._persisted_events + self.queued_events
            self._write_now = True
            self._queue.notify()  # the writer, if it is gathering
            while self._persisted_events < target:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._written.wait(remaining)
        return True

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait (bounded) until every queued event is in the file; True when it is."""
        deadline = time.monotonic() + timeout
        with self._queue:
            while self._writes or self.queued_events:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._written.wait(remaining)
        return True

    def close(self) -> None:
        """Write what is queued to the file, stop the writer and close the file."""
        with self._queue:
            self._closing = True
            self._queue.notify_all()
            self._written.notify_all()
        self._writer.join(timeout=30)
        with self._db_lock:
            if self._db is not None:
                self._db.close()

    # ------------------------------------------------------------ blocking: call from a thread
    def pending_events(self) -> int:
        """Events not delivered yet: in the file, or queued for it."""
        with self._queue:
            queued = self.queued_events
        with self._db_lock:
            if self._db is None:
                return queued
            self._settle_now()
            return queued + int(self._file().execute("SELECT COUNT(*) FROM event").fetchone()[0])

    def next_batch(self, limit: int) -> Batch:
        """The oldest ``limit`` events not delivered yet and their executions: from memory while it
        mirrors the file, else from the file (see the module's docstring)."""
        with self._queue:
            if not self._from_file:
                taken, self._ready = self._ready[:limit], self._ready[limit:]
                executions = {}
                for _, key, _ in taken:
                    execution = self._known.get(key)
                    if execution is None:  # recorded by an earlier process: the file knows it
                        self._from_file = True
                        break
                    executions[key] = dict(execution)
                else:
                    return taken, executions
        return self.load_batch(limit)

    def look_in_file(self) -> None:
        """The next batch is read from the file (some of the last one may still be there, or rows
        this process did not write may be)."""
        with self._queue:
            self._from_file = True

    def load_batch(self, limit: int) -> Batch:
        """The oldest ``limit`` events in the file and the executions they belong to. A read that
        finds fewer saw the whole backlog: what the writer hands over from then on is all there is
        to send, and the batches come from memory again."""
        with self._db_lock:
            if self._db is None:
                with self._queue:
                    self._from_file = False
                return [], {}
            self._settle_now()
            db = self._file()
            db.execute("BEGIN")  # one snapshot: the rows and the highest id the file ever gave
            try:
                high = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'event'").fetchone()
                rows = db.execute("SELECT id, execution_key, body FROM event ORDER BY id LIMIT ?", (limit,)).fetchall()
                keys = sorted({r[1] for r in rows})
                # One read for the batch's executions, not one each (in parts: SQLite binds at most
                # 999 values in older versions).
                found: dict[str, tuple[Any, ...]] = {}
                for part in parts(keys, 1):
                    marks = ", ".join(["?"] * len(part))
                    found.update(
                        (row[0], row)
                        for row in db.execute(
                            "SELECT key, binding, attempt, execution_handle, execution_id FROM execution"
                            f" WHERE key IN ({marks})",
                            part,
                        )
                    )
            finally:
                db.execute("COMMIT")
            executions = {
                key: {
                    "key": key,
                    "binding": json.loads(found[key][1]),
                    "attempt": found[key][2],
                    "handle": found[key][3],
                    "execution_id": found[key][4],
                }
                for key in keys
            }
            if len(rows) < limit:
                # Every row committed by then was in this read or is settled: what the writer
                # handed over up to there is not sent again from memory.
                seen = int(high[0]) if high else 0
                with self._queue:
                    self._ready = [item for item in self._ready if item[0] > seen]
                    self._from_file = False
        return [(r[0], r[1], json.loads(r[2])) for r in rows], executions

    def settle(
        self,
        bound: Sequence[tuple[str, str, str]] = (),
        delivered: Sequence[int] = (),
        refused: Sequence[tuple[str, dict[str, Any], str]] = (),
    ) -> None:
        """What answers said, for the file's next transaction (any thread, no I/O): the handles
        handed out (``key, handle, execution_id``), the events delivered (or refused for good:
        kept in ``undeliverable`` with why) that leave the outbox. A refused event that cannot be
        written raises here, and nothing of the call is kept."""
        rows = [
            (key, event["eventId"], json.dumps(event), reason, time.time(), key, key) for key, event, reason in refused
        ]
        with self._queue:
            self._settled.bound += bound
            self._settled.delivered += delivered
            self._settled.refused += rows
            for key, handle, execution_id in bound:
                if (known := self._known.get(key)) is not None:
                    known["handle"], known["execution_id"] = handle, execution_id
            for row_id in delivered:  # an execution's last report settled: nothing of it is sent again
                if (ended := self._finishing.pop(row_id, None)) is not None:
                    self._known.pop(ended, None)

    def unbind(self, keys: list[str]) -> None:
        """Forget the handles of these executions (expired: they are bound again)."""
        with self._queue:
            for key in keys:
                if (known := self._known.get(key)) is not None:
                    known["handle"] = known["execution_id"] = None
        with self._db_lock:
            self._settle_now()
            self._file().executemany("UPDATE execution SET execution_handle = NULL WHERE key = ?", [(k,) for k in keys])

    def _settle_now(self) -> None:
        """Write what answers said, if anything waits, in a transaction of its own (holding ``_db_lock``)."""
        with self._queue:
            waiting = bool(self._settled)
        if waiting:
            with self._transaction():
                self._write_settled()

    def _write_settled(self) -> None:
        """Inside a transaction (holding ``_db_lock``): what answers said, taken and written. Taken
        under the file's lock, so no read of the file comes between taking and writing it; kept
        for the next transaction if this one fails."""
        with self._queue:
            settled, self._settled = self._settled, Settled()
        if not settled:
            return
        try:
            settled.apply(self._file())
        except BaseException:
            with self._queue:
                self._settled = settled.then(self._settled)
            raise

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """One write transaction (call holding ``_db_lock``): committed, or rolled back on any error."""
        db = self._file()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def end(self, key: str) -> None:
        """The execution reports nothing more and no ending of its own (the worker stopped under it,
        or it completes elsewhere and the service took its last heartbeat): what it reported is
        still sent, then its row goes with its last event, and memory forgets it now — else it
        stayed, in memory and in the file, across restarts."""
        with self._queue:
            seq = self._next_seq.pop(key, None)
            if seq is None:
                return  # ended already, or dropped
            self._writes.sequences[key] = (seq, 1)
            self._writes.ended.append(key)  # its row goes now if nothing of it waits, else with its last event
            # Events of it still waiting in memory make the next batch read the file, which has it.
            self._known.pop(key, None)
            self._wake_writer()

    def _forget(self, key: str) -> None:
        """Nothing of this execution is sent again (holding ``_queue``): what the file holds of it
        goes (the caller's transaction), what memory holds of it goes here."""
        self._next_seq.pop(key, None)
        self._known.pop(key, None)
        self._ready = [item for item in self._ready if item[1] != key]
        for row_id in [i for i, k in self._finishing.items() if k == key]:
            del self._finishing[row_id]

    def drop_execution(self, key: str, reason: str) -> int:
        """Move every event of an execution that can never be bound to ``undeliverable``; how many."""
        with self._queue:
            self._forget(key)
        with self._db_lock, self._transaction():
            self._write_settled()
            self._file().execute(
                "INSERT INTO undeliverable (execution_key, event_id, body, reason, refused_at, binding, attempt)"
                " SELECT e.execution_key, json_extract(e.body, '$.eventId'), e.body, ?, ?, x.binding, x.attempt"
                " FROM event e LEFT JOIN execution x ON x.key = e.execution_key WHERE e.execution_key = ?",
                (reason, time.time(), key),
            )
            dropped = int(self._file().execute("DELETE FROM event WHERE execution_key = ?", (key,)).rowcount)
            self._file().execute("DELETE FROM execution WHERE key = ?", (key,))
        return dropped

    def discard_execution(self, key: str) -> int:
        """Forget an execution whose reports the status has moved past (a superseded attempt); how many."""
        with self._queue:
            self._forget(key)
        with self._db_lock, self._transaction():
            self._write_settled()
            dropped = int(self._file().execute("DELETE FROM event WHERE execution_key = ?", (key,)).rowcount)
            self._file().execute("DELETE FROM execution WHERE key = ?", (key,))
        return dropped

    def handles_of(self, keys: list[str]) -> dict[str, str]:
        """The execution handles of the bound executions among ``keys`` (from memory for those this
        process recorded; the file for the others)."""
        with self._queue:
            handles = {key: known["handle"] for key in keys if (known := self._known.get(key)) is not None}
        others = [key for key in keys if key not in handles]
        if others:
            with self._db_lock:
                if self._db is not None:
                    self._settle_now()
                    for part in parts(others, 1):
                        handles.update(
                            self._db.execute(
                                "SELECT key, execution_handle FROM execution"
                                f" WHERE key IN ({', '.join(['?'] * len(part))})",
                                part,
                            ).fetchall()
                        )
        return {key: handle for key, handle in handles.items() if handle is not None}

    def requeue(self, event_ids: Sequence[str] | None = None) -> tuple[list[str], list[str]]:
        """Put refused reports back in the queue, to be sent again (the same eventIds: whatever the
        service accepted meanwhile answers as a duplicate): those named, or all. An execution that
        no longer exists in the file is recorded again from what the refused row kept, finished
        (nothing new is reported for it; it goes once its reports are sent). Returns (requeued,
        not requeued: kept from before the file kept executions, so they cannot be bound)."""
        requeued: list[str] = []
        kept: list[str] = []
        with self._db_lock, self._transaction():
            self._write_settled()
            db = self._file()
            rows = db.execute(
                "SELECT id, execution_key, event_id, body, binding, attempt FROM undeliverable ORDER BY id"
            ).fetchall()
            for row_id, key, event_id, body, binding, attempt in rows:
                if event_ids is not None and event_id not in event_ids:
                    continue
                known = db.execute("SELECT 1 FROM execution WHERE key = ?", (key,)).fetchone() is not None
                if not known and binding is None:
                    kept.append(str(event_id))
                    continue
                seq = int(json.loads(body)["sourceSeq"])
                if not known:  # (a known one keeps its handle: an expired one is bound again when refused)
                    db.execute(
                        "INSERT INTO execution (key, binding, attempt, next_seq, finished, created_at)"
                        " VALUES (?, ?, ?, ?, 1, ?)",
                        (key, binding, attempt or 1, seq + 1, time.time()),
                    )
                db.execute("INSERT OR IGNORE INTO event (execution_key, seq, body) VALUES (?, ?, ?)", (key, seq, body))
                db.execute("DELETE FROM undeliverable WHERE id = ?", (row_id,))
                requeued.append(str(event_id))
        return requeued, kept


def _add_missing_columns(db: sqlite3.Connection) -> None:
    have = {row[1] for row in db.execute("PRAGMA table_info(undeliverable)")}
    for name, kind in _UNDELIVERABLE_COLUMNS:
        if name not in have:
            db.execute(f"ALTER TABLE undeliverable ADD COLUMN {name} {kind}")


class UnreadableOutbox(Exception):
    """The file is not an outbox this plugin can read (not an SQLite database, damaged)."""


def read_undeliverable(path: str | Path) -> list[dict[str, Any]]:
    """What a worker's outbox file holds as refused for good, oldest first (for operators).

    ``path`` is a file's path, never an SQLite URI: it is opened read-only through a URI built from
    it (``%``, ``#`` and ``?`` in a name are the name's). A row whose body is not JSON is listed with
    ``event`` None and its ``problem``; a file that is no database raises ``UnreadableOutbox``."""
    if not Path(path).exists():
        return []  # nothing was ever recorded
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
            try:
                rows = db.execute(
                    "SELECT execution_key, event_id, reason, refused_at, body FROM undeliverable ORDER BY id"
                ).fetchall()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return []  # a file from before the table existed
                raise
    except sqlite3.DatabaseError as exc:
        raise UnreadableOutbox(f"{path} is not a readable outbox file: {exc}") from exc
    listed = []
    for key, event_id, reason, at, body in rows:
        row: dict[str, Any] = {"executionKey": key, "eventId": event_id, "reason": reason, "refusedAt": at}
        try:
            row["event"] = json.loads(body)
        except (TypeError, ValueError) as exc:
            row |= {"event": None, "problem": f"its body is not JSON: {exc}"}
        listed.append(row)
    return listed
