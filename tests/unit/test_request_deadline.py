"""The request deadline as a middleware (no server, no database): a request whose answer has not
begun by its deadline is answered 503 UNAVAILABLE; an answer begun before it is never cut; the
request's own errors stay its own."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from starlette.types import Message, Receive, Scope, Send

from status.api.deadline import RequestDeadline

DEADLINE = 0.05


def _scope(path: str = "/internal/v1/task-events") -> Scope:
    return {"type": "http", "method": "POST", "path": path, "headers": []}


async def _receive() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


async def _call(app: Any, path: str = "/internal/v1/task-events") -> list[Message]:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    await RequestDeadline(app, DEADLINE, exempt=frozenset({"/stream"}))(_scope(path), _receive, send)
    return sent


async def test_a_request_not_answering_by_its_deadline_is_cancelled_and_answered_503() -> None:
    cancelled = asyncio.Event()

    async def stuck(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    sent = await _call(stuck)
    assert cancelled.is_set()
    assert sent[0]["status"] == 503
    assert (b"retry-after", b"1") in sent[0]["headers"]
    error = json.loads(sent[1]["body"])["error"]
    assert (error["code"], error["retryable"]) == ("UNAVAILABLE", True)


async def test_an_answer_begun_before_the_deadline_runs_to_its_end() -> None:
    async def slow_body(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await asyncio.sleep(3 * DEADLINE)  # past the deadline, the answer under way
        await send({"type": "http.response.body", "body": b"all of it"})

    sent = await _call(slow_body)
    assert [m.get("status") for m in sent] == [200, None]
    assert sent[1]["body"] == b"all of it"


async def test_a_request_within_its_deadline_is_answered_as_it_answers() -> None:
    async def quick(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    sent = await _call(quick)
    assert [m.get("status") for m in sent] == [201, None]
    await asyncio.sleep(2 * DEADLINE)  # no timer left behind to cancel the task later


async def test_the_requests_own_timeout_error_is_its_own_not_the_deadline() -> None:
    async def own_timeout(scope: Scope, receive: Receive, send: Send) -> None:
        raise TimeoutError("a client library's own timeout")

    with pytest.raises(TimeoutError, match="client library"):
        await _call(own_timeout)


async def test_an_exempt_path_has_no_deadline() -> None:
    async def long_stream(scope: Scope, receive: Receive, send: Send) -> None:
        await asyncio.sleep(3 * DEADLINE)
        await send({"type": "http.response.start", "status": 200, "headers": []})

    sent = await _call(long_stream, "/stream")
    assert sent[0]["status"] == 200
