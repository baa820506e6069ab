"""Native SSE (design D7): the user's summary stream, and a bounded, ACL-checked watch set of details."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from observer.relay import OutboxRelay
from tests.e2e.test_realtime_delivery import drain
from tests.integration.conftest import Http
from tests.support.flows import activate, create_workflow, report

pytestmark = pytest.mark.centrifugo


async def sse_events(response: httpx.Response) -> AsyncIterator[tuple[str, Any]]:
    event = "message"
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            yield event, json.loads(line[6:])
            event = "message"


async def next_event(stream: AsyncIterator[tuple[str, Any]], kind: str, timeout: float = 10) -> Any:
    async def find() -> Any:
        async for event, data in stream:
            if event == kind:
                return data
        raise AssertionError("stream ended")

    return await asyncio.wait_for(find(), timeout)


async def test_sse_stream_with_a_watch_set(api: Http, live_api: str, relay: OutboxRelay) -> None:
    mine = create_workflow(api)["tasks"][0]["taskId"]
    theirs = create_workflow(api, owner="user-2")["tasks"][0]["taskId"]
    await drain(relay)
    login = api.user_tokens.issue(api.tenant, "user-1")
    async with httpx.AsyncClient(base_url=live_api, timeout=httpx.Timeout(10, read=30)) as http:
        assert (await http.get("/api/v1/me/task-stream")).status_code == 401
        async with http.stream("GET", "/api/v1/me/task-stream", params={"access_token": login}) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            stream = sse_events(response)
            session = await next_event(stream, "session")
            assert session["summaryChannel"].endswith("/user-1")
            watch = await http.put(
                "/api/v1/me/task-watch-set",
                headers={"Authorization": f"Bearer {login}"},
                json={"sessionId": session["sessionId"], "taskIds": [mine, theirs]},
            )
            assert watch.status_code == 200, watch.text
            assert watch.json()["watching"] == [mine] and watch.json()["notFound"] == [theirs]  # ACL per task
            too_many = await http.put(
                "/api/v1/me/task-watch-set",
                headers={"Authorization": f"Bearer {login}"},
                json={"sessionId": session["sessionId"], "taskIds": [f"t{i}" for i in range(4)]},
            )
            assert too_many.status_code == 409  # bounded by the detail limit (3 here)
            assert too_many.json()["error"]["code"] == "DETAIL_SUBSCRIPTION_LIMIT"
            ctx = activate(api, mine)
            assert report(api, ctx, "STEP_STARTED", 1).status_code == 200
            await drain(relay)
            kinds = set()
            while kinds != {"task.summary", "task.detail"}:
                message = await next_event(stream, "message")
                if message.get("taskId") == mine:
                    kinds.add(message["kind"])
            # Unwatching stops the detail stream for this session only.
            cleared = await http.put(
                "/api/v1/me/task-watch-set",
                headers={"Authorization": f"Bearer {login}"},
                json={"sessionId": session["sessionId"], "taskIds": []},
            )
            assert cleared.status_code == 200
            unwatched = await next_event(stream, "unwatched")
            assert unwatched["channel"].endswith(mine)


async def test_an_expired_watch_ends_its_live_detail_stream(
    api: Http, e2e_settings: Any, e2e_engine: Any, e2e_service: Any, relay: OutboxRelay
) -> None:
    """A watch set expires (expiresAt) unless it is sent again: its detail stream then ends, as a
    WebSocket client's detail subscription ends with its token."""
    import dataclasses

    from status.api.app import create_app
    from tests.support.processes import serving

    short = dataclasses.replace(e2e_settings, realtime_token_ttl_seconds=4)
    mine = create_workflow(api)["tasks"][0]["taskId"]
    await drain(relay)
    login = api.user_tokens.issue(api.tenant, "user-1")
    with serving(create_app(short, e2e_engine, e2e_service)) as url:
        async with (
            httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(10, read=30)) as http,
            http.stream("GET", "/api/v1/me/task-stream", params={"access_token": login}) as response,
        ):
            stream = sse_events(response)
            session = await next_event(stream, "session")
            watch = await http.put(
                "/api/v1/me/task-watch-set",
                headers={"Authorization": f"Bearer {login}"},
                json={"sessionId": session["sessionId"], "taskIds": [mine]},
            )
            assert watch.status_code == 200 and watch.json()["watching"] == [mine]
            # Not renewed: within a few seconds of expiresAt the server ends the detail subscription.
            unwatched = await next_event(stream, "unwatched", timeout=20)
            assert unwatched["channel"].endswith(f"/{mine}")


async def sse_events_with_ids(response: httpx.Response) -> AsyncIterator[tuple[str, str | None, Any]]:
    """(event, id, data) of each event (``sse_events`` drops the ids)."""
    event, event_id = "message", None
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("id: "):
            event_id = line[4:]
        elif line.startswith("data: "):
            yield event, event_id, json.loads(line[6:])
            event, event_id = "message", None


async def _next_with_id(stream: AsyncIterator[tuple[str, str | None, Any]], kind: str) -> tuple[str | None, Any]:
    async def find() -> tuple[str | None, Any]:
        async for event, event_id, data in stream:
            if event == kind:
                return event_id, data
        raise AssertionError("stream ended")

    return await asyncio.wait_for(find(), 10)


async def test_a_stream_resumes_from_its_last_event_id_with_what_it_missed(
    api: Http, live_api: str, relay: OutboxRelay
) -> None:
    """EventSource sends the last event's id back when it reconnects: the stream then starts with
    the summaries published meanwhile (Centrifugo's history, from the positions the id names) and
    says it resumed; an id that names nothing is a fresh start."""
    task_id = create_workflow(api)["tasks"][0]["taskId"]
    await drain(relay)
    login = api.user_tokens.issue(api.tenant, "user-1")
    params = {"access_token": login}
    async with httpx.AsyncClient(base_url=live_api, timeout=httpx.Timeout(10, read=30)) as http:
        async with http.stream("GET", "/api/v1/me/task-stream", params=params) as response:
            events = sse_events_with_ids(response)
            _, first = await _next_with_id(events, "session")
            assert first["resumed"] is False and first["resync"] == []
            ctx = activate(api, task_id)  # a change while connected: its event carries the position
            await drain(relay)
            last_id, seen = await _next_with_id(events, "message")
            assert last_id and seen["taskId"] == task_id
        # Disconnected: two more changes.
        assert report(api, ctx, "STEP_STARTED", 1).status_code == 200
        assert report(api, ctx, "STEP_PROGRESS", 2, progress={"current": 1, "total": 2}).status_code == 200
        await drain(relay)
        headers = {"Last-Event-ID": last_id}
        async with http.stream("GET", "/api/v1/me/task-stream", params=params, headers=headers) as response:
            stream = sse_events(response)
            session = await next_event(stream, "session")
            assert session["resumed"] is True and session["resync"] == []
            missed = [await next_event(stream, "message"), await next_event(stream, "message")]
            versions = [int(m["taskVersion"]) for m in missed if m.get("taskId") == task_id]
            assert versions == sorted(versions) and versions[-1] > int(seen["taskVersion"])
        garbage = {"Last-Event-ID": "not-a-position"}
        async with http.stream("GET", "/api/v1/me/task-stream", params=params, headers=garbage) as response:
            assert response.status_code == 200
            fresh = await next_event(sse_events(response), "session")
            assert fresh["resumed"] is False and fresh["resync"] == []
