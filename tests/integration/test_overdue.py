"""Operators see what is overdue: HTTP (ADMIN), the command line, the same list."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from status.app.service import StatusService
from status.domain.auth import Role, ServicePrincipal
from status.infra import tables as t
from status.settings import Settings
from task_observer.cli import main
from tests.integration.conftest import Http
from tests.support.factories import later
from tests.support.flows import activate, create_workflow, report
from tests.support.settings import database_environment
from tests.support.shards import engine_for


def _admin(http: Http) -> dict[str, str]:
    return http.auth(http.service_token("ops-console", "ADMIN"))


def test_an_attempt_over_its_operations_max_runtime_makes_its_task_overdue(http: Http, service: StatusService) -> None:
    # This tenant's parse may take 10 minutes per attempt.
    document = {
        "operations": [
            {
                "operationCode": "DOCUMENT.PARSE",
                "version": 7,
                "displayName": "Parse document",
                "allowedEventTypes": ["STEP_STARTED", "STEP_PROGRESS", "STEP_COMPLETED", "STEP_FAILED"],
                "maxRuntimeSeconds": 600,
            }
        ]
    }
    assert http.client.put("/internal/v1/definitions", json=document, headers=_admin(http)).status_code == 200
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    assert report(http, activate(http, task_id), "STEP_STARTED", 1).status_code == 200
    admin = ServicePrincipal("ops", http.tenant, "content", frozenset({Role.ADMIN}))
    assert task_id not in [t["taskId"] for t in later(service, 599).overdue(admin)]
    late = [t for t in later(service, 601).overdue(admin) if t["taskId"] == task_id]
    assert late and late[0]["reason"] == "STEP_OVER_MAX_RUNTIME" and late[0]["stepId"] == "02_parse"
    assert late[0]["limitSeconds"] == 600
    # A step without a limit of its own: its task is overdue past the default (a day unless configured).
    plain = create_workflow(http)["tasks"][0]["taskId"]
    assert report(http, activate(http, plain, "01_prepare"), "STEP_STARTED", 1).status_code == 200
    assert plain not in [t["taskId"] for t in later(service, 3600, overdue_after_seconds=7200).overdue(admin)]
    default = [t for t in later(service, 3600, overdue_after_seconds=1800).overdue(admin) if t["taskId"] == plain]
    assert default and default[0]["reason"] == "TASK_OVER_DEFAULT" and default[0]["limitSeconds"] == 1800
    # The observer's gauge counts it (the reconciler refreshes it as it passes).
    from observer import metrics
    from observer.loops import LoopConfig, Reconciler

    Reconciler(later(service, 601), LoopConfig(heartbeat_grace_seconds=0)).run_once()
    assert metrics.OVERDUE_TASKS._value.get() >= 1
    # Another tenant's admin does not see it.
    other = ServicePrincipal("ops", "someone-else", "content", frozenset({Role.ADMIN}))
    assert task_id not in [t["taskId"] for t in later(service, 601).overdue(other)]


def test_the_admin_api_and_the_command_line_list_overdue_tasks(
    http: Http,
    service: StatusService,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    listed = http.client.get("/internal/v1/tasks:overdue", headers=_admin(http))
    assert listed.status_code == 200 and isinstance(listed.json()["tasks"], list)
    refused = http.client.get("/internal/v1/tasks:overdue", headers=http.coordinator)
    assert refused.status_code == 403
    for bad in ("0", "abc", "²", "5000"):
        answer = http.client.get(f"/internal/v1/tasks:overdue?limit={bad}", headers=_admin(http))
        assert answer.status_code == 422 and answer.json()["error"]["code"] == "VALIDATION_FAILED"
    database_environment(monkeypatch, settings)
    monkeypatch.setenv("TASK_OBSERVER_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TASK_OBSERVER_OVERDUE_AFTER_SECONDS", "3600")
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    assert report(http, activate(http, task_id, "01_prepare"), "STEP_STARTED", 1).status_code == 200
    with engine_for(service, task_id).begin() as conn:  # it has been running for two hours
        conn.execute(
            sa.update(t.task).where(t.task.c.id == task_id).values(started_at=service.now() - timedelta(hours=2))
        )
    capsys.readouterr()
    assert main(["overdue", "--limit", "1000"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert task_id in [line["taskId"] for line in lines]
