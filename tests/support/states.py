"""Domain states for pure unit tests: a running task and a step attempt, changed by keyword."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from status.domain.lifecycle import Lifecycle
from status.domain.model import StepState, TaskState

NOW = datetime(2026, 12, 2, 12, 0, 0)


class Clock:
    """Time passed in: ``base`` plus ``seconds``, moved by the test."""

    def __init__(self) -> None:
        self.base = datetime.now().replace(microsecond=0)
        self.seconds = 0.0

    def __call__(self) -> datetime:
        return self.base + timedelta(seconds=self.seconds)


def task_state(**changes: Any) -> TaskState:
    base = TaskState(
        task_id="tsk_1",
        workflow_id="wf_1",
        client_task_key="k",
        tenant_id="t",
        owner_id="u",
        authority_scope="s",
        bucket_id=1,
        title="Contract.pdf",
        lifecycle=Lifecycle.RUNNING,
        business_status="RUNNING",
        version=5,
        created_at=NOW,
        updated_at=NOW,
        started_at=NOW,
    )
    if "lifecycle" in changes and "business_status" not in changes:
        changes["business_status"] = changes["lifecycle"].value
    return replace(base, **changes)


def step_state(**changes: Any) -> StepState:
    base = StepState(
        task_id="tsk_1",
        step_id="02_parse",
        attempt=1,
        client_step_key="02_parse",
        operation_code="DOCUMENT.PARSE",
        operation_definition_version=1,
        service_name="parser",
        lifecycle=Lifecycle.PENDING,
        business_status="PENDING",
        version=1,
        execution_id="exe_1",
        producer_id="parser",
    )
    if "lifecycle" in changes and "business_status" not in changes:
        changes["business_status"] = changes["lifecycle"].value
    return replace(base, **changes)
