from __future__ import annotations

import json

import pytest
import structlog

from status import logs


def test_logs_are_json_with_correlation_fields_only(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure()
    try:
        logs.get("test").info(
            "event rejected",
            eventId="e1",
            taskId="t1",
            code="STALE_ATTEMPT",
            executionToken="secret-token",
            data={"private": 1},
        )
        line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    finally:
        structlog.reset_defaults()
    assert line["event"] == "event rejected" and line["eventId"] == "e1" and line["code"] == "STALE_ATTEMPT"
    assert "executionToken" not in line and "data" not in line and "secret-token" not in json.dumps(line)
