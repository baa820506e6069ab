"""The Temporal plugin against a real Temporal dev server and the real status service (design D10AC8, design P9)."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from task_status_interceptors import TaskStatusPlugin
from temporalio.client import WorkflowFailureError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from examples.document_processing import (
    DocumentRequest,
    DocumentWorkflow,
    parse_document,
    prepare_file,
    search_web,
    store_result,
)
from status.api.app import create_app
from status.app.service import StatusService
from status.infra import tables as t
from status.infra.metrics import REGISTRY
from status.settings import Settings
from tests.integration.conftest import Http
from tests.support.flows import now_iso
from tests.support.processes import free_port, serving

pytestmark = [pytest.mark.temporal]


def _plugin(api: Http, url: str, tmp_path: Path, **kwargs: Any) -> TaskStatusPlugin:
    token = api.service_token("doc-worker", "WORKER", "COORDINATOR")
    return TaskStatusPlugin(url, token, outbox_path=tmp_path / "outbox.sqlite3", heartbeat_interval=0.2, **kwargs)


async def _run_document(
    plugin: TaskStatusPlugin, env: WorkflowEnvironment, task_queue: str, request: DocumentRequest
) -> Any:
    """The document example on a worker with ``plugin``, until its reports are delivered; the
    workflow's result, or the WorkflowFailureError it ended with."""
    with concurrent.futures.ThreadPoolExecutor(4) as executor:
        async with Worker(
            env.client,
            task_queue=task_queue,
            workflows=[DocumentWorkflow],
            activities=[prepare_file, parse_document, store_result, search_web],
            activity_executor=executor,
            plugins=[plugin],
        ):
            try:
                return await env.client.execute_workflow(
                    DocumentWorkflow.run, request, id=f"doc-{uuid.uuid4()}", task_queue=task_queue
                )
            except WorkflowFailureError as failure:
                return failure
            finally:
                await plugin.reporter.drained()


async def test_a_run_that_gives_up_fails_its_task(
    api: Http, live_api: str, temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """Every parse attempt fails: the coordinator submits TASK_FAILED, so the task never stays RUNNING."""
    plugin = _plugin(api, live_api, tmp_path)
    failed = await _run_document(
        plugin, temporal_env, task_queue, DocumentRequest("user-1", "broken.pdf", pages=2, failing_parse_attempts=3)
    )
    assert isinstance(failed, WorkflowFailureError)
    listed = api.client.get("/api/me/tasks", headers=api.user("user-1")).json()["tasks"]
    task = next(t for t in listed if t["title"] == "broken.pdf")
    snap = api.client.get(f"/api/tasks/{task['taskId']}", headers=api.user("user-1")).json()
    assert snap["lifecycleStatus"] == "FAILED"
    assert snap["failure"] == {
        "category": "UNKNOWN",
        "code": "PROCESSING_FAILED",
        "userMessage": "The document could not be processed.",
        "retryable": None,
        "failedStepId": "02_parse",
    }
    attempts = [(s["attempt"], s["lifecycleStatus"]) for s in snap["steps"] if s["stepId"] == "02_parse"]
    assert attempts == [(1, "FAILED"), (2, "FAILED"), (3, "FAILED")]


async def test_document_example_reports_every_step(
    api: Http, live_api: str, temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, e2e_engine: sa.Engine
) -> None:
    plugin = _plugin(api, live_api, tmp_path)
    result = await _run_document(plugin, temporal_env, task_queue, DocumentRequest("user-1", "contract.pdf", pages=4))
    task_id = result["taskId"]
    snap = api.client.get(f"/api/tasks/{task_id}", headers=api.user("user-1")).json()
    assert snap["lifecycleStatus"] == "SUCCEEDED"
    # The run created the task and measured its work: the ending says how long, not the service's clock.
    assert snap["durationSource"] == "PRODUCER_MONOTONIC" and snap["runDurationMs"] > 0
    steps = {(s["stepId"], s["attempt"]): s for s in snap["steps"]}
    assert steps[("01_prepare", 1)]["lifecycleStatus"] == "SUCCEEDED"
    assert steps[("02_parse", 1)]["lifecycleStatus"] == "FAILED"
    assert steps[("02_parse", 1)]["error"]["code"] == "OCR_BUSY" and steps[("02_parse", 1)]["error"]["retryable"]
    assert steps[("02_parse", 2)]["lifecycleStatus"] == "SUCCEEDED"
    assert steps[("02_parse", 2)]["executionId"] != steps[("02_parse", 1)]["executionId"]
    assert steps[("02_parse", 2)]["progress"]["current"] == 4  # the last progress was flushed before COMPLETED
    assert steps[("03_store", 1)]["lifecycleStatus"] == "SUCCEEDED"
    dynamic = [s for s in snap["steps"] if s["kind"] == "DYNAMIC"]
    assert [(s["stepId"], s["operationCode"], s["lifecycleStatus"]) for s in dynamic] == [
        ("dyn_search-0", "SEARCH.WEB", "SUCCEEDED"),
        ("dyn_search-1", "SEARCH.WEB", "SUCCEEDED"),
    ]
    assert all(s["durationMs"] is not None and s["durationMs"] >= 0 for s in steps.values())
    # The producer's own monotonic measure: the parse that succeeded slept 4 pages x 20 ms.
    assert steps[("02_parse", 2)]["durationMs"] >= 4 * 20
    assert steps[("02_parse", 2)]["durationMs"] < 60_000
    with e2e_engine.connect() as conn:
        events = conn.execute(
            sa.select(
                t.task_event_log.c.task_version,
                t.task_event_log.c.event_type,
                t.task_event_log.c.step_id,
                t.task_event_log.c.step_attempt,
            )
            .where(t.task_event_log.c.task_id == task_id)
            .order_by(t.task_event_log.c.task_version)
        ).all()
    assert [v for v, *_ in events] == list(range(1, len(events) + 1))  # gap-free
    kinds = [(step, attempt, kind) for _, kind, step, attempt in events]
    assert ("02_parse", 2, "STEP_PROGRESS") in kinds and ("02_parse", 1, "STEP_FAILED") in kinds
    assert (None, None, "TASK_COMPLETED") in kinds
    # A late event of the superseded attempt 1 changes nothing (STALE_ATTEMPT).
    worker = api.auth(api.service_token("doc-worker", "WORKER", "COORDINATOR"))
    old = api.client.post(
        f"/internal/v1/tasks/{task_id}/steps/02_parse:activate",
        headers=worker,
        json={"attempt": 1, "producerId": "doc-worker"},
    ).json()
    assert old["created"] is False and old["executionId"] == steps[("02_parse", 1)]["executionId"]
    late = api.client.post(
        "/internal/v1/task-events",
        headers=worker,
        json={
            "eventId": f"late-{uuid.uuid4()}",
            "eventType": "STEP_PROGRESS",
            "sourceSeq": 99,
            "occurredAt": now_iso(),
            "executionHandle": old["executionHandle"],
        },
    )
    assert late.status_code == 409 and late.json()["error"]["code"] == "STALE_ATTEMPT"
    assert (
        api.client.get(f"/api/tasks/{task_id}", headers=api.user("user-1")).json()["taskVersion"] == snap["taskVersion"]
    )


async def test_the_plugin_reports_over_grpc_with_the_same_outcome(
    api: Http,
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    e2e_settings: Settings,
    e2e_engine: sa.Engine,
    e2e_service: StatusService,
) -> None:
    """grpc_target: events, heartbeats and bindings travel over the gRPC adapter; the task ends exactly as over REST."""
    grpc_port = free_port()
    app = create_app(dataclasses.replace(e2e_settings, grpc_port=grpc_port), e2e_engine, e2e_service)

    def grpc_calls(method: str) -> float:
        return REGISTRY.get_sample_value("task_status_grpc_calls_total", {"method": method, "code": "OK"}) or 0.0

    events, binds = grpc_calls("ReportEvents"), grpc_calls("BindExecutions")
    with serving(app, lifespan="on") as url:
        plugin = _plugin(api, url, tmp_path, grpc_target=f"127.0.0.1:{grpc_port}")
        result = await _run_document(plugin, temporal_env, task_queue, DocumentRequest("user-1", "grpc.pdf", pages=3))
    assert grpc_calls("ReportEvents") > events  # the events did go over gRPC
    # and so did the bindings, with their events: in the same calls (a pass is one request)
    assert grpc_calls("BindExecutions") == binds and plugin.reporter._bindings_ride
    assert plugin.reporter.delivered > 0 and plugin.reporter.dropped == 0
    snap = api.client.get(f"/api/tasks/{result['taskId']}", headers=api.user("user-1")).json()
    assert snap["lifecycleStatus"] == "SUCCEEDED"
    steps = {(s["stepId"], s["attempt"]): s["lifecycleStatus"] for s in snap["steps"]}
    assert steps[("02_parse", 1)] == "FAILED" and steps[("02_parse", 2)] == "SUCCEEDED"
    assert steps[("03_store", 1)] == "SUCCEEDED"
