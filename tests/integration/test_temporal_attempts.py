"""Temporal's attempt numbers and a run's last word, over HTTP on MariaDB and SQLite."""

from __future__ import annotations

from typing import Any

from tests.integration.conftest import Http
from tests.support.flows import create_workflow, event_body, report


def _activate(http: Http, task_id: str, attempt: int, run: str = "run-1", activity: str = "1") -> Any:
    temporal = {"namespace": "default", "workflowId": "doc-1", "runId": run, "activityId": activity}
    return http.client.post(
        f"/internal/v1/tasks/{task_id}/steps/02_parse:activate",
        json={"attempt": attempt, "producerId": "document-parser", "temporalActivity": temporal},
        headers=http.coordinator,
    )


def _snapshot(http: Http, task_id: str) -> dict[str, Any]:
    return dict(http.client.get(f"/api/tasks/{task_id}", headers=http.user("user-1")).json())


def _attempts(snap: dict[str, Any], step_id: str = "02_parse") -> dict[int, dict[str, Any]]:
    return {s["attempt"]: s for s in snap["steps"] if s["stepId"] == step_id}


def test_an_attempt_that_never_reported_is_closed_as_lost_and_the_next_one_is_taken(http: Http) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    first = _activate(http, task_id, 1)
    assert first.status_code == 201 and report(http, first.json(), "STEP_STARTED", 1).status_code == 200
    # Attempt 2 timed out on its heartbeat before it reached the service; attempt 3 runs.
    third = _activate(http, task_id, 3)
    assert third.status_code == 201, third.text
    # The lost attempt is written with the activation, in its version, before anything else happens.
    at_activation = _snapshot(http, task_id)
    assert at_activation["taskVersion"] == third.json()["taskVersion"]
    assert _attempts(at_activation)[2]["lifecycleStatus"] == "TIMED_OUT"
    assert report(http, third.json(), "STEP_STARTED", 1).status_code == 200
    assert report(http, third.json(), "STEP_COMPLETED", 2, durationMs=5).status_code == 200
    attempts = _attempts(_snapshot(http, task_id))
    assert attempts[1]["lifecycleStatus"] == "TIMED_OUT"
    assert attempts[2]["lifecycleStatus"] == "TIMED_OUT" and attempts[2]["error"]["code"] == "NEVER_REPORTED"
    assert attempts[3]["lifecycleStatus"] == "SUCCEEDED"
    # The same activation again is the same attempt; an older Temporal attempt is refused.
    again = _activate(http, task_id, 3)
    assert again.status_code == 200 and again.json()["executionId"] == third.json()["executionId"]
    older = _activate(http, task_id, 2)
    assert older.status_code == 409 and older.json()["error"]["code"] == "STALE_ATTEMPT"


def test_a_new_run_of_the_same_work_runs_the_step_as_its_next_attempt(http: Http) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    one = _activate(http, task_id, 1, run="run-1")
    assert report(http, one.json(), "STEP_STARTED", 1).status_code == 200
    assert report(http, one.json(), "STEP_COMPLETED", 2, durationMs=5).status_code == 200
    retried = _activate(http, task_id, 1, run="run-2")  # the workflow's retry: Temporal's attempt 1 again
    assert retried.status_code == 201, retried.text
    assert retried.json()["stepAttempt"] == 2
    assert report(http, retried.json(), "STEP_STARTED", 1).status_code == 200
    # Another activity (the workflow's retry) ran the step again: run 1's success stands.
    assert _attempts(_snapshot(http, task_id))[1]["lifecycleStatus"] == "SUCCEEDED"


def test_a_success_temporal_then_retried_is_shown_as_the_timeout_temporal_recorded(http: Http) -> None:
    """Attempt 1 returned after its heartbeat timeout: the plugin reported STEP_COMPLETED, Temporal
    refused the result ("Activity not found on completion") and started attempt 2 of the same
    activity. That attempt 2 exists proves attempt 1 did not succeed: it is TIMED_OUT, in the
    activation's version."""
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    first = _activate(http, task_id, 1)
    assert report(http, first.json(), "STEP_STARTED", 1).status_code == 200
    assert report(http, first.json(), "STEP_COMPLETED", 2, durationMs=3100).status_code == 200
    assert _attempts(_snapshot(http, task_id))[1]["lifecycleStatus"] == "SUCCEEDED"
    second = _activate(http, task_id, 2)
    assert second.status_code == 201, second.text
    snap = _snapshot(http, task_id)
    assert snap["taskVersion"] == second.json()["taskVersion"]
    attempts = _attempts(snap)
    assert attempts[1]["lifecycleStatus"] == "TIMED_OUT"
    assert attempts[1]["error"]["code"] == "RESULT_AFTER_TIMEOUT"
    assert attempts[2]["lifecycleStatus"] == "PENDING"
    assert report(http, second.json(), "STEP_STARTED", 1).status_code == 200
    assert report(http, second.json(), "STEP_COMPLETED", 2, durationMs=5).status_code == 200
    final = _attempts(_snapshot(http, task_id))
    assert (final[1]["lifecycleStatus"], final[2]["lifecycleStatus"]) == ("TIMED_OUT", "SUCCEEDED")
    assert (final[2]["durationMs"], final[2]["durationSource"]) == (5, "PRODUCER_MONOTONIC")  # as a task says it


def test_the_runs_last_word_ends_its_steps_with_the_task_in_one_version(http: Http) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    running = _activate(http, task_id, 1)
    assert report(http, running.json(), "STEP_STARTED", 1).status_code == 200
    body = event_body(
        "TASK_COMPLETED",
        1,
        taskId=task_id,
        taskAttempt=1,
        # 02_parse: its activity completed (its own report is late); 03_store: a local activity whose
        # activation never arrived; 01_prepare never ran and is not mentioned.
        stepOutcomes={"02_parse": "SUCCEEDED", "03_store": "SUCCEEDED"},
    )
    ended = http.client.post("/internal/v1/task-events", json=body, headers=http.coordinator)
    assert ended.status_code == 200, ended.text
    snap = _snapshot(http, task_id)
    assert snap["lifecycleStatus"] == "SUCCEEDED"
    lifecycles = {s["stepId"]: s["lifecycleStatus"] for s in snap["steps"]}
    # 01_prepare never ran: the task's end ends it too (CANCELLED, not reached), in the same version.
    assert lifecycles == {"01_prepare": "CANCELLED", "02_parse": "SUCCEEDED", "03_store": "SUCCEEDED"}
    assert next(s for s in snap["steps"] if s["stepId"] == "01_prepare")["error"]["code"] == "NOT_REACHED"
    assert snap["progress"]["percent"] == 100
    # The late reports change nothing: the step's own completion, a new attempt of the local activity.
    late = report(http, running.json(), "STEP_COMPLETED", 2, durationMs=5)
    assert late.status_code == 409 and late.json()["error"]["code"] in ("TERMINAL_STATE", "TOKEN_REVOKED")
    local = http.client.post(
        f"/internal/v1/tasks/{task_id}/steps/03_store:activate",
        json={
            "attempt": 1,
            "producerId": "store-service",
            "temporalActivity": {"namespace": "default", "workflowId": "doc-1", "runId": "run-1", "activityId": "2"},
        },
        headers=http.coordinator,
    )
    assert local.status_code == 409 and local.json()["error"]["code"] == "TERMINAL_STATE"
    assert _snapshot(http, task_id)["taskVersion"] == snap["taskVersion"]


def test_step_outcomes_must_be_lifecycles(http: Http) -> None:
    task_id = create_workflow(http)["tasks"][0]["taskId"]
    body = event_body("TASK_COMPLETED", 1, taskId=task_id, taskAttempt=1, stepOutcomes={"02_parse": "DONE"})
    refused = http.client.post("/internal/v1/task-events", json=body, headers=http.coordinator)
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "VALIDATION_FAILED"
    assert _snapshot(http, task_id)["lifecycleStatus"] == "PENDING"
