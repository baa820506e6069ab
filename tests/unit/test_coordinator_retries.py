"""A coordinator's task event is the same request in every attempt of the activity that sends it.

The trap: an attempt whose event committed but whose answer was lost on its way back (a database
node killed under the API, a connection cut) is retried by Temporal; the service takes the retry
as a duplicate only if its content is the same. An ``occurredAt`` read from the attempt's own
start differed, the service refused the retry as EVENT_ID_CONFLICT (for good), and the run
failed although its task had ended.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from task_status_interceptors._coordinator import CoordinatorActivities, TaskEventRequest
from temporalio.testing import ActivityEnvironment


async def _bodies_of_attempts(request: TaskEventRequest) -> list[dict[str, Any]]:
    activities = CoordinatorActivities("http://127.0.0.1:9", "token")
    sent: list[dict[str, Any]] = []

    async def call(method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        sent.append(body)
        return {"accepted": True}

    activities._call = call  # type: ignore[method-assign]
    scheduled = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
    for attempt in (1, 2):
        env = ActivityEnvironment()
        # Each attempt starts later than the one before; the activity was scheduled once.
        started = scheduled + timedelta(seconds=7 * attempt)
        env.info = dataclasses.replace(env.info, attempt=attempt, scheduled_time=scheduled, started_time=started)
        await env.run(activities.submit_task_event, dataclasses.replace(request))
    return sent


@pytest.mark.parametrize("decided_at", ["2026-12-06T11:59:58.250000+00:00", None], ids=["run-time", "older-request"])
async def test_every_attempt_sends_the_same_event(decided_at: str | None) -> None:
    request = TaskEventRequest(
        "tsk_1", "TASK_COMPLETED", "coord:run-1:tsk_1:TASK_COMPLETED", 1765022398250, occurred_at=decided_at
    )
    first, retry = await _bodies_of_attempts(request)
    assert first == retry
    # The run's own time where it says it; a request from before that field: its first scheduling.
    assert first["occurredAt"] == (decided_at or "2026-12-06T12:00:00+00:00")
