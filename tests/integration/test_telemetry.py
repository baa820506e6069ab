"""POST /api/me/telemetry: what browsers report reaches Prometheus; nothing a page sends can
grow the label set, poison a histogram with NaN, or be sent without a login or without bound."""

from __future__ import annotations

import math
from typing import Any

import pytest
from starlette.testclient import TestClient

from status.api.app import create_app
from status.settings import Settings
from tests.integration.conftest import Http


def _metric(http: Http, name: str, labels: str = "") -> float:
    text = http.client.get("/metrics").text
    prefix = f"{name}{{{labels}}}" if labels else name
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix + " "))


def _report(**overrides: Any) -> dict[str, Any]:
    return {
        "counters": {
            "connects": 1,
            "reconnects": 2,
            "recoveredFalse": 1,
            "snapshots": 3,
            "snapshotFailures": 2,
            "unknownMessages": 1,
            "unknownOperations": 4,
            "unknownSchemas": 5,
        },
        "snapshotSeconds": [0.2, 0.4],
        "commitToVisibleSeconds": [0.05, 0.3, 1.5],
        "transport": "websocket",
        **overrides,
    }


def test_a_report_feeds_the_counters_and_histograms(http: Http) -> None:
    before = {
        kind: _metric(http, "client_events_total", f'kind="{kind}"')
        for kind in (
            "connects",
            "reconnects",
            "recovered_false",
            "snapshots",
            "snapshot_failures",
            "unknown_messages",
            "unknown_operations",
            "unknown_schemas",
        )
    }
    visible, visible_sum = (_metric(http, f"state_commit_to_visible_seconds_{s}") for s in ("count", "sum"))
    snapshots = _metric(http, "client_snapshot_seconds_count")
    sent = http.client.post("/api/me/telemetry", json=_report(), headers=http.user("user-1"))
    assert sent.status_code == 204, sent.text
    after = {kind: _metric(http, "client_events_total", f'kind="{kind}"') - n for kind, n in before.items()}
    assert after == {
        "connects": 1,
        "reconnects": 2,
        "recovered_false": 1,
        "snapshots": 3,
        "snapshot_failures": 2,
        "unknown_messages": 1,
        "unknown_operations": 4,
        "unknown_schemas": 5,
    }
    assert _metric(http, "state_commit_to_visible_seconds_count") - visible == 3
    assert math.isclose(_metric(http, "state_commit_to_visible_seconds_sum") - visible_sum, 1.85)
    assert _metric(http, "client_snapshot_seconds_count") - snapshots == 2
    assert 'client_telemetry_reports_total{transport="websocket"}' in http.client.get("/metrics").text


@pytest.mark.parametrize(
    "body",
    [
        _report(counters={"connects": -1}),
        _report(counters={"connects": 10**9}),
        _report(counters={"someLabel": 1}),  # no field names the label set
        _report(commitToVisibleSeconds=[-0.5]),
        _report(commitToVisibleSeconds=[0.1] * 501),
        _report(snapshotSeconds=[10**6]),
        _report(transport="pigeon"),
        _report(extra=True),
        [],
    ],
)
def test_hostile_reports_are_refused_with_a_clear_code(http: Http, body: Any) -> None:
    before = _metric(http, "state_commit_to_visible_seconds_count")
    refused = http.client.post("/api/me/telemetry", json=body, headers=http.user("user-1"))
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "VALIDATION_FAILED", refused.text
    assert _metric(http, "state_commit_to_visible_seconds_count") == before  # nothing of it was counted


def test_non_finite_numbers_are_refused(http: Http) -> None:
    raw = b'{"commitToVisibleSeconds": [NaN], "counters": {}}'
    before = _metric(http, "state_commit_to_visible_seconds_count")
    refused = http.client.post(
        "/api/me/telemetry", content=raw, headers={**http.user("user-1"), "Content-Type": "application/json"}
    )
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "VALIDATION_FAILED", refused.text
    assert _metric(http, "state_commit_to_visible_seconds_count") == before


def test_only_a_logged_in_user_reports_and_only_a_few_times_a_minute(
    http: Http, settings: Settings, engine: Any, service: Any
) -> None:
    for headers in ({}, http.worker):
        refused = http.client.post("/api/me/telemetry", json=_report(), headers=headers)
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "UNAUTHENTICATED"
    with TestClient(create_app(settings, engine, service)) as fresh:  # its own limiter
        headers = http.user("chatty")
        answers = [fresh.post("/api/me/telemetry", json=_report(), headers=headers) for _ in range(8)]
        codes = [a.status_code for a in answers]
        assert codes[:5] == [204] * 5 and 429 in codes[5:], codes
        limited = next(a for a in answers if a.status_code == 429)
        assert limited.json()["error"]["code"] == "RATE_LIMITED" and limited.json()["error"]["retryable"] is True
        # Another user is not limited by the first one's reports.
        assert fresh.post("/api/me/telemetry", json=_report(), headers=http.user("quiet")).status_code == 204
