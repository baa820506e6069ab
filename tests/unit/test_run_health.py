"""A run Temporal reports stuck (its workflow task keeps failing), as the task shows it: the pure rule."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from status.domain.errors import DomainError, ErrorCode
from status.domain.lifecycle import Health, Lifecycle
from status.domain.model import TaskState
from status.domain.rules import STUCK_MESSAGE, apply_run_health

NOW = datetime(2026, 12, 1, 12, 0, 0)


def _task(**changes: object) -> TaskState:
    task = TaskState(
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
        version=4,
        created_at=NOW,
        updated_at=NOW,
    )
    return replace(task, **changes)  # type: ignore[arg-type]


def test_a_stuck_run_leaves_the_lifecycle_and_says_the_status_is_unconfirmed_with_a_warning() -> None:
    outcome = apply_run_health(_task(), stuck=True, steps_stale=False, steps_degraded=False, now=NOW)
    task = outcome.task
    assert (task.lifecycle, task.health, task.stuck_since, task.version) == (Lifecycle.RUNNING, Health.STALE, NOW, 5)
    assert outcome.notice is not None and outcome.must_deliver
    assert (outcome.notice.type, outcome.notice.level.value, outcome.notice.message) == (
        "WORKFLOW_STUCK",
        "WARNING",
        STUCK_MESSAGE,
    )


@pytest.mark.parametrize(
    ("steps_stale", "steps_degraded", "health"),
    [(False, False, Health.HEALTHY), (True, False, Health.STALE), (False, True, Health.DEGRADED)],
)
def test_moving_again_gives_back_the_health_its_steps_say(
    steps_stale: bool, steps_degraded: bool, health: Health
) -> None:
    stuck = _task(health=Health.STALE, stuck_since=NOW)
    later = NOW + timedelta(seconds=30)
    outcome = apply_run_health(stuck, stuck=False, steps_stale=steps_stale, steps_degraded=steps_degraded, now=later)
    assert (outcome.task.health, outcome.task.stuck_since) == (health, None)
    assert outcome.notice is not None and outcome.notice.type == "WORKFLOW_RECOVERED"
    assert outcome.notice.level.value == "INFO"


@pytest.mark.parametrize("stuck", [True, False])
def test_a_report_that_changes_nothing_is_refused(stuck: bool) -> None:
    already = _task(health=Health.STALE, stuck_since=NOW) if stuck else _task()
    with pytest.raises(DomainError) as raised:
        apply_run_health(already, stuck=stuck, steps_stale=False, steps_degraded=False, now=NOW)
    assert raised.value.code is ErrorCode.INVALID_TRANSITION


def test_an_ended_task_is_not_shown_stuck() -> None:
    with pytest.raises(DomainError) as raised:
        apply_run_health(
            _task(lifecycle=Lifecycle.SUCCEEDED), stuck=True, steps_stale=False, steps_degraded=False, now=NOW
        )
    assert raised.value.code is ErrorCode.TERMINAL_STATE
