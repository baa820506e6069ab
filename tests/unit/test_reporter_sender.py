"""The reporter's sender thread: it sends what the outbox's writer hands over without reading the
file back, goes to the file whenever memory may not have it all, and gathers a burst of reports
into one transaction and one request (docs/architecture.md, "The plugin's sender")."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

from task_status_interceptors._context import StepBinding
from task_status_interceptors._outbox import Outbox
from task_status_interceptors._reporter import Reporter, ReporterConfig
from task_status_interceptors._transport import BatchRefused, TransportError


class Service:
    """A transport stand-in: binds every execution (the events sent with it too), takes events
    unless told to fail the next request or to refuse an event id for good; records what it
    accepted. ``passes`` False: a service from before bindings rode in the events batch."""

    def __init__(self) -> None:
        self.accepted: list[str] = []
        self.bind_requests: list[int] = []  # items per bindings request
        self.event_requests: list[int] = []  # events per events request
        self.pass_requests: list[tuple[int, int]] = []  # (bindings, events with a handle) per pass
        self.passes = True
        self.bound = 0
        self.fail_next = 0
        self.refuse: set[str] = set()
        self.got: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def waiting_for(self, event_id: str) -> threading.Event:
        return self.got.setdefault(event_id, threading.Event())

    def _accept(self, event_id: str) -> None:
        with self._lock:
            self.accepted.append(event_id)
            self.waiting_for(event_id).set()

    def report_events(
        self, body: list[dict[str, Any]], beats: list[dict[str, Any]] | None = None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        if self.fail_next:
            self.fail_next -= 1
            raise TransportError("HTTP 503: unavailable")
        self.event_requests.append(len(body))
        results = self._decide(body)
        return results, [{"accepted": True, "reason": None} for _ in beats or ()] if beats else None

    def report_pass(
        self, bindings: list[dict[str, Any]], body: list[dict[str, Any]], beats: list[dict[str, Any]]
    ) -> tuple[list[tuple[int, Any]] | None, list[dict[str, Any]], list[dict[str, Any]] | None]:
        if not self.passes:
            raise BatchRefused("HTTP 422: bindings: Extra inputs are not permitted")
        if self.fail_next:
            self.fail_next -= 1
            raise TransportError("HTTP 503: unavailable")
        self.pass_requests.append((len(bindings), len(body)))
        answers = self._bind(bindings)
        return answers, self._decide(body), [{"accepted": True, "reason": None} for _ in beats] if beats else None

    def record_heartbeats(self, beats: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        return [{"accepted": True, "reason": None} for _ in beats]

    def bind_batch(self, items: list[dict[str, Any]]) -> list[tuple[int, Any]] | None:
        self.bind_requests.append(len(items))
        return self._bind(items)

    def _bind(self, items: list[dict[str, Any]]) -> list[tuple[int, Any]]:
        answers: list[tuple[int, Any]] = []
        for item in items:
            (body,) = item.values()
            self.bound += 1
            answer: dict[str, Any] = {"executionHandle": f"handle-{self.bound}", "executionId": f"exe-{self.bound}"}
            started = body.get("startedEvent")
            if started is not None:
                self._accept(started["eventId"])
                answer["startedEvent"] = {"accepted": True}
            if "events" in body:
                answer["events"] = self._decide(body["events"])
            answers.append((200, answer))
        return answers

    def _decide(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = []
        for event in events:
            if event["eventId"] in self.refuse:
                results.append({"accepted": False, "error": {"code": "UNKNOWN_STEP", "message": "no such step"}})
            else:
                self._accept(event["eventId"])
                results.append({"accepted": True})
        return results

    def close(self) -> None:
        pass


async def _started(tmp_path: Path, **config: Any) -> tuple[Reporter, Service]:
    reporter = Reporter(ReporterConfig("http://127.0.0.1:9", "t", "w", tmp_path / "o.sqlite3", **config))
    await reporter.start()
    service = Service()
    reporter._events = reporter._binds_over = service
    return reporter, service


def _activity(reporter: Reporter, n: int) -> list[str]:
    """One activity's reports: STARTED, a progress, its ending; their event ids."""
    key = f"run-{n}/a/1"
    execution = reporter.begin(key, StepBinding("tsk", f"s{n}"), 1)
    execution.progress(1, 2, "page")
    execution.completed()
    return [f"{key}:1:STEP_STARTED", f"{key}:2:STEP_PROGRESS", f"{key}:3:STEP_COMPLETED"]


def _per_execution(event_ids: list[str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for event_id in event_ids:
        grouped.setdefault(event_id.split(":")[0], []).append(event_id)
    return grouped


def _calls_of(outbox: Outbox, method: str) -> list[None]:
    """One item per call of the outbox's ``method`` from now on."""
    calls: list[None] = []
    original = getattr(outbox, method)

    def counted(*args: Any) -> Any:
        calls.append(None)
        return original(*args)

    setattr(outbox, method, counted)
    return calls


async def _arrived(service: Service, event_id: str) -> None:
    assert await asyncio.to_thread(service.waiting_for(event_id).wait, 10), f"{event_id} never arrived"


async def test_what_the_writer_hands_over_is_sent_without_reading_the_file_back(tmp_path: Path) -> None:
    reporter, service = await _started(tmp_path, heartbeat_interval=3600)
    reads = _calls_of(reporter.outbox, "load_batch")
    try:
        sent = [event_id for n in range(3) for event_id in _activity(reporter, n)]
        for event_id in sent:
            await _arrived(service, event_id)
        assert reads == []
        assert _per_execution(service.accepted) == _per_execution(sent)  # each once, in order
        await reporter.drained(10)
        assert reporter.pending_events() == 0 and reporter.delivered == 9
    finally:
        await reporter.stop()


async def test_a_failed_request_leaves_its_events_to_the_file_and_none_is_lost(tmp_path: Path) -> None:
    reporter, service = await _started(tmp_path, heartbeat_interval=3600)
    try:
        first = _activity(reporter, 0)
        await _arrived(service, first[-1])
        service.fail_next = 2  # the service is away for the next two requests
        second = _activity(reporter, 1)
        await _arrived(service, second[-1])
        assert _per_execution(service.accepted) == _per_execution(first + second)
        await reporter.drained(10)
        assert reporter.pending_events() == 0 and reporter.dropped == 0
    finally:
        await reporter.stop()


async def test_reports_an_operator_queues_again_are_sent_by_the_running_worker(tmp_path: Path) -> None:
    """``undeliverable resend --queue-only`` writes the file from another process while the worker
    runs: the worker's next heartbeat round looks in the file and sends them."""
    reporter, service = await _started(tmp_path, heartbeat_interval=0.2)
    try:
        execution = reporter.begin("run-x/a/1", StepBinding("tsk", "later"), 1)
        service.refuse.add("run-x/a/1:2:STEP_PROGRESS")
        execution.progress(1, 2, "page")
        await reporter.drained(10)
        assert reporter.dropped == 1 and "run-x/a/1:2:STEP_PROGRESS" not in service.accepted
        service.refuse.clear()  # the cause is fixed (the step defined)
        other = Outbox(tmp_path / "o.sqlite3")  # as the command line opens it
        try:
            assert other.requeue() == (["run-x/a/1:2:STEP_PROGRESS"], [])
        finally:
            other.close()
        await _arrived(service, "run-x/a/1:2:STEP_PROGRESS")  # nobody asked this worker to look
    finally:
        await reporter.stop()


async def test_a_burst_of_reports_goes_in_one_transaction_and_one_request(tmp_path: Path) -> None:
    reporter, service = await _started(tmp_path, heartbeat_interval=3600, write_interval=1.0)
    try:
        first = _activity(reporter, 0)
        await _arrived(service, first[-1])  # written at once: nothing was written before it
        service.pass_requests.clear()
        burst = [event_id for n in range(1, 21) for event_id in _activity(reporter, n)]
        await _arrived(service, burst[-1])
        assert service.pass_requests == [(20, 0)]  # every execution bound with all its events
        assert service.bind_requests == service.event_requests == []
        assert set(service.accepted) == set(first + burst)
        await reporter.drained(10)
        assert reporter.pending_events() == 0 and reporter.delivered == 63
    finally:
        await reporter.stop()


async def test_a_drain_has_what_is_queued_written_at_once_not_passes_asked_for_until_it_is(tmp_path: Path) -> None:
    reporter, service = await _started(tmp_path, heartbeat_interval=3600, write_interval=30.0)
    passes = _calls_of(reporter.outbox, "next_batch")
    try:
        first = _activity(reporter, 0)
        await _arrived(service, first[-1])  # written at once: nothing was written before it
        passes.clear()
        later = _activity(reporter, 1)  # within the write interval: gathered for 30 s
        await reporter.drained(10)
        assert set(service.accepted) == set(first + later) and reporter.pending_events() == 0
        assert len(passes) <= 3  # not one pass after another while the writer gathers
    finally:
        await reporter.stop()


async def test_a_pass_binds_new_executions_and_sends_the_bound_ones_events_in_one_request(tmp_path: Path) -> None:
    reporter, service = await _started(tmp_path, heartbeat_interval=3600)
    try:
        running = reporter.begin("run-r/a/1", StepBinding("tsk", "long"), 1)
        await _arrived(service, "run-r/a/1:1:STEP_STARTED")
        await reporter.drained(10)
        service.pass_requests.clear()
        with reporter.outbox._db_lock:  # the file is busy: the next reports go in one transaction
            running.progress(1, 2, "page")
            sent = _activity(reporter, 1)
            service.refuse.add(sent[1])  # refused for good, as its own event
        await _arrived(service, sent[-1])
        await reporter.drained(10)
        assert service.pass_requests == [(1, 1)]
        assert reporter.pending_events() == 0 and reporter.dropped == 1
        assert sent[1] not in service.accepted and "run-r/a/1:2:STEP_PROGRESS" in service.accepted
    finally:
        await reporter.stop()


async def test_a_service_without_bindings_in_its_batch_gets_them_apart_and_loses_nothing(tmp_path: Path) -> None:
    reporter, service = await _started(tmp_path, heartbeat_interval=3600, write_interval=1.0)
    service.passes = False
    try:
        first = _activity(reporter, 0)
        await _arrived(service, first[-1])
        service.bind_requests.clear()
        service.event_requests.clear()
        burst = [event_id for n in range(1, 21) for event_id in _activity(reporter, n)]
        await _arrived(service, burst[-1])
        assert service.bind_requests == [20]  # every execution bound (with its STARTED) in one request
        assert service.event_requests == [40]  # their progress and endings in one more
        assert _per_execution(service.accepted) == _per_execution(first + burst)
    finally:
        await reporter.stop()


def test_a_transaction_of_any_size_hands_over_the_ids_the_file_gave(tmp_path: Path) -> None:
    """Rows inserted in parts (SQLite binds at most 999 values a statement) keep their ids: what
    the sender takes from memory is what the file holds, row for row."""
    path = tmp_path / "o.sqlite3"
    outbox = Outbox(path)
    try:
        with outbox._db_lock:  # the file is busy: everything below goes in one transaction
            for n in range(400):
                outbox.begin(f"run-{n}/a/1", StepBinding("tsk", "s"), 1)
                outbox.enqueue(f"run-{n}/a/1", {"eventType": "STEP_STARTED"})
                outbox.enqueue(f"run-{n}/a/1", {"eventType": "STEP_COMPLETED"}, finished=True)
        assert outbox.flush(10)
        events, executions = outbox.next_batch(2000)
        with sqlite3.connect(path) as db:
            rows = db.execute("SELECT id, execution_key, body FROM event ORDER BY id").fetchall()
        assert [(i, key, event["eventId"]) for i, key, event in events] == [
            (i, key, json.loads(body)["eventId"]) for i, key, body in rows
        ]
        assert len(events) == 800 and len(executions) == 400
    finally:
        outbox.close()


async def test_the_plugins_write_interval_gathers_the_reports_that_come_within_it(tmp_path: Path) -> None:
    from task_status_interceptors import TaskStatusPlugin

    plugin = TaskStatusPlugin("http://127.0.0.1:9", "t", producer_id="w", outbox_path=tmp_path / "o", write_interval=30)
    reporter = plugin.reporter
    await reporter.start()
    service = Service()
    reporter._events = reporter._binds_over = service
    try:
        first = _activity(reporter, 0)
        await _arrived(service, first[-1])  # written at once: nothing was written before it
        _activity(reporter, 1)
        await asyncio.sleep(0.5)  # what comes within the interval waits for it
        assert set(service.accepted) == set(first)
    finally:
        await reporter.stop(flush_timeout=0)
