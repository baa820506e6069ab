"""Heartbeats riding in the events' request (the reporter's policy, over a transport stand-in):
a service from before that call took heartbeats still gets every event, and the heartbeats go
by their own round instead."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from task_status_interceptors._context import StepBinding
from task_status_interceptors._reporter import Reporter, ReporterConfig
from task_status_interceptors._transport import BatchRefused


class OlderService:
    """Answers as a service that does not know heartbeats in an events batch: REST refuses the
    request as malformed (``refuses``), gRPC ignores the field and answers for the events only."""

    def __init__(self, refuses: bool) -> None:
        self.refuses = refuses
        self.batches: list[tuple[int, int]] = []  # (events, heartbeats) per request
        self.rounds: list[list[dict[str, Any]]] = []

    def report_events(
        self, body: list[dict[str, Any]], beats: list[dict[str, Any]] | None = None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        self.batches.append((len(body), len(beats or ())))
        if beats and self.refuses:
            raise BatchRefused("HTTP 422: unknown field heartbeats")
        return [{"accepted": True} for _ in body], None

    def report_pass(
        self, bindings: list[dict[str, Any]], body: list[dict[str, Any]], beats: list[dict[str, Any]]
    ) -> tuple[list[tuple[int, Any]] | None, list[dict[str, Any]], list[dict[str, Any]] | None]:
        """Older still than bindings in the events batch: refused (REST) or not answered for (gRPC)."""
        if self.refuses or not body:
            raise BatchRefused("HTTP 422: unknown field bindings")
        results, _ = self.report_events(body, beats)
        return None, results, None

    def record_heartbeats(self, beats: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        self.rounds.append(beats)
        return [{"accepted": True, "reason": None} for _ in beats]

    def bind_batch(self, items: list[dict[str, Any]]) -> list[tuple[int, Any]] | None:
        return [(200, {"executionHandle": f"handle-{i:04d}", "executionId": f"exe-{i}"}) for i in range(len(items))]

    def close(self) -> None:
        pass


async def _reporting_to(service: Any, tmp_path: Path) -> Reporter:
    """A started reporter whose sender talks to ``service`` (heartbeat rounds an hour apart)."""
    reporter = Reporter(ReporterConfig("http://127.0.0.1:9", "t", "w", tmp_path / "o.sqlite3", heartbeat_interval=3600))
    await reporter.start()
    reporter._events = reporter._binds_over = service
    return reporter


@pytest.mark.parametrize("refuses", [True, False], ids=["rest-refuses", "grpc-ignores"])
async def test_an_older_service_gets_every_event_and_the_heartbeats_by_their_round(
    tmp_path: Path, refuses: bool
) -> None:
    service = OlderService(refuses)
    reporter = await _reporting_to(service, tmp_path)
    try:
        execution = reporter.begin("run/a/1", StepBinding("tsk", "s1"), 1)
        await reporter.drained(10)  # bound, its STARTED delivered
        service.batches.clear()
        delivered = reporter.delivered
        reporter.beat("run/a/1", 1)
        execution.progress(1, 2, "page")
        await reporter.drained(10)
        assert reporter.delivered == delivered + 1 and reporter.dropped == 0
        # Tried once with the heartbeat; then (REST) the same events again without it.
        assert service.batches == ([(1, 1), (1, 0)] if refuses else [(1, 1)])
        assert await asyncio.to_thread(reporter.send_heartbeats) == 1  # not answered for: still due, sent by the round
        assert [b["heartbeatSeq"] for b in service.rounds[0]] == [1]
        reporter.beat("run/a/1", 2)
        execution.completed()
        await reporter.drained(10)
        assert service.batches[-1] == (1, 0)  # it no longer rides
    finally:
        await reporter.stop()


async def test_an_activity_that_completes_elsewhere_says_so_in_one_last_heartbeat_at_once(tmp_path: Path) -> None:
    """``raise_complete_async()``: the next heartbeat round starts without waiting out the interval,
    its item says the activity completes elsewhere, and once the service took it no beat follows."""
    service = OlderService(refuses=False)
    reporter = await _reporting_to(service, tmp_path)
    try:
        execution = reporter.begin("run/a/1", StepBinding("tsk", "s1"), 1)
        await reporter.drained(10)
        execution.heartbeat()
        execution.completes_elsewhere()
        async with asyncio.timeout(10):  # far less than the hour-long interval
            while not service.rounds:
                await asyncio.sleep(0.01)
        (item,) = service.rounds[0]
        assert item["heartbeatSeq"] == 2 and item["completesElsewhere"] is True
        assert reporter.heartbeats == {}  # accepted: nothing of it beats again
        assert await asyncio.to_thread(reporter.send_heartbeats) == 0
        await _gone_from_the_outbox(reporter, tmp_path / "o.sqlite3", "run/a/1")
    finally:
        await reporter.stop()


async def test_an_attempt_the_worker_stops_under_leaves_the_outbox_once_its_reports_are_sent(tmp_path: Path) -> None:
    """No ending of its own is reported: what it did report is still sent, then nothing of it stays
    (in memory or in the file, which a restart would read)."""
    service = OlderService(refuses=False)
    reporter = await _reporting_to(service, tmp_path)
    try:
        execution = reporter.begin("run/a/1", StepBinding("tsk", "s1"), 1)
        execution.progress(1, 4, "page")
        execution.abandoned()
        execution.progress(2, 4, "page")  # a thread still running after the worker let go: not sent
        await reporter.drained(10)
        assert reporter.delivered == 2 and reporter.pending_events() == 0  # STARTED and the first progress
        await _gone_from_the_outbox(reporter, tmp_path / "o.sqlite3", "run/a/1")
    finally:
        await reporter.stop()


async def _gone_from_the_outbox(reporter: Reporter, path: Path, key: str) -> None:
    """Nothing of ``key`` in memory, and its row out of the file (the writer's next transaction)."""
    import sqlite3

    assert key not in reporter.outbox._next_seq and key not in reporter.outbox._known

    def rows() -> list[Any]:
        with sqlite3.connect(path) as db:
            return db.execute("SELECT key FROM execution").fetchall()

    async with asyncio.timeout(10):
        while await asyncio.to_thread(rows):
            await asyncio.sleep(0.02)


class _Sink:
    """Records what an execution hands its reporter."""

    def __init__(self) -> None:
        self.beats: list[int] = []
        self.forgotten = 0

    def enqueue(self, key: str, body: dict[str, Any], *, finished: bool = False) -> None:
        pass

    def beat(self, key: str, seq: int) -> None:
        self.beats.append(seq)

    def forget(self, key: str) -> None:
        self.forgotten += 1

    def let_go(self, key: str, seq: int) -> None:
        pass


@pytest.mark.parametrize("ending", ["completed", "cancelled", "timed_out", "abandoned"])
def test_a_heartbeat_that_arrives_after_its_attempt_ended_beats_no_more(ending: str) -> None:
    """A thread-pool activity's last heartbeat reaches the loop after its ending was reported: it
    must not bring back an execution whose heartbeats were forgotten (it would beat forever)."""
    from task_status_interceptors._execution import ExecutionReporter, ProgressPolicy

    sink = _Sink()
    execution = ExecutionReporter(sink, "run/a/1", StepBinding("tsk", "s1"), ProgressPolicy())
    execution.heartbeat()
    getattr(execution, ending)()
    execution.heartbeat()
    assert sink.beats == [1]
    assert sink.forgotten == (1 if ending == "abandoned" else 0)  # the others end through their report


class SlowService(OlderService):
    """Holds its first events request until told to answer; sees every event it is sent."""

    def __init__(self) -> None:
        super().__init__(refuses=False)
        self.release = threading.Event()
        self.held = threading.Event()
        self.event_ids: list[str] = []
        self.got = threading.Event()
        self.expect = 0

    def report_events(
        self, body: list[dict[str, Any]], beats: list[dict[str, Any]] | None = None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        self.held.set()
        self.release.wait(10)
        self.event_ids += [event["eventId"] for event in body]
        if len(self.event_ids) >= self.expect:
            self.got.set()
        return super().report_events(body, beats)


async def test_events_that_reach_the_file_while_the_sender_is_busy_are_sent_after_its_request(
    tmp_path: Path,
) -> None:
    """What the writer hands over while the sender is in a request is sent by the sender's next
    batch, without anyone asking again (a lost hand-over would leave it in the file)."""
    service = SlowService()
    reporter = await _reporting_to(service, tmp_path)
    try:
        execution = reporter.begin("run/a/1", StepBinding("tsk", "s1"), 1)
        execution.progress(1, 4, "page")  # goes in an events request (this service binds without STARTED)
        assert await asyncio.to_thread(service.held.wait, 10)  # the sender is in that request
        execution.progress(3, 4, "page", phase_code="later")  # reaches the file meanwhile
        assert await asyncio.to_thread(reporter.flush, 5)
        service.expect = 3
        service.release.set()
        assert await asyncio.to_thread(service.got.wait, 10)
        assert service.event_ids == ["run/a/1:1:STEP_STARTED", "run/a/1:2:STEP_PROGRESS", "run/a/1:3:STEP_PROGRESS"]
    finally:
        service.release.set()
        await reporter.stop()
