"""An operator's correction decided without a database (status.domain.corrections): which attempt it
is about, what a repeated correctionId gets, and what the correction does to the task and step."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from status.domain.corrections import (
    Correction,
    apply_correction,
    corrected_attempt,
    parse_lifecycle,
    repeated_correction,
)
from status.domain.definitions import generic_statuses
from status.domain.errors import DomainError, ErrorCode
from status.domain.lifecycle import Health, Lifecycle
from status.domain.model import StepError
from tests.support.states import NOW, step_state, task_state

TASK = task_state()
ATTEMPTS = [
    step_state(step_id="01_fetch", attempt=1, lifecycle=Lifecycle.SUCCEEDED),
    step_state(step_id="02_parse", attempt=1, lifecycle=Lifecycle.TIMED_OUT, superseded=True),
    step_state(step_id="02_parse", attempt=2, lifecycle=Lifecycle.RUNNING),
]


def _code(call: Any, *args: Any, **kwargs: Any) -> ErrorCode:
    with pytest.raises(DomainError) as caught:
        call(*args, **kwargs)
    return caught.value.code


# ------------------------------------------------------------------ which attempt


def test_a_step_correction_is_about_the_named_attempt_or_the_newest() -> None:
    assert corrected_attempt(TASK, ATTEMPTS, "02_parse", None, expected_version=None) is ATTEMPTS[2]
    assert corrected_attempt(TASK, ATTEMPTS, "02_parse", 1, expected_version=None) is ATTEMPTS[1]
    assert corrected_attempt(TASK, ATTEMPTS, None, None, expected_version=TASK.version) is None


@pytest.mark.parametrize(
    ("step_id", "attempt", "expected", "code"),
    [
        ("02_parse", None, TASK.version - 1, ErrorCode.VERSION_PRECONDITION_FAILED),
        ("09_none", None, None, ErrorCode.UNKNOWN_STEP),
        ("02_parse", 3, None, ErrorCode.UNKNOWN_STEP),
        (None, 2, None, ErrorCode.VALIDATION_FAILED),
        # The version comes first: an operator who saw another version learns that before anything.
        ("09_none", None, TASK.version + 1, ErrorCode.VERSION_PRECONDITION_FAILED),
    ],
)
def test_a_correction_about_what_is_not_there_is_refused(
    step_id: str | None, attempt: int | None, expected: int | None, code: ErrorCode
) -> None:
    assert _code(corrected_attempt, TASK, ATTEMPTS, step_id, attempt, expected_version=expected) is code


def test_a_repeated_correction_id_is_its_first_answer_and_other_content_a_conflict() -> None:
    first = {"correctionId": "c-1", "accepted": True, "duplicate": False, "taskVersion": "6"}
    assert repeated_correction("abc", None) is None
    assert repeated_correction("abc", ("abc", first)) == first | {"duplicate": True}
    assert _code(repeated_correction, "abd", ("abc", first)) is ErrorCode.IDEMPOTENCY_CONFLICT


def test_a_lifecycle_is_one_of_the_six_or_refused() -> None:
    assert parse_lifecycle(None) is None
    assert parse_lifecycle("FAILED") is Lifecycle.FAILED
    assert _code(parse_lifecycle, "DONE") is ErrorCode.VALIDATION_FAILED


# ------------------------------------------------------------------ what it does


def _apply(step: Any, correction: Correction, **kwargs: Any) -> Any:
    arguments = {"statuses": generic_statuses(), "other_steps_stale": False, "now": NOW} | kwargs
    return apply_correction(TASK, step, correction, **arguments)


def test_a_stuck_step_settled_by_an_operator_is_terminal_healthy_and_in_the_tasks_next_version() -> None:
    stuck = step_state(lifecycle=Lifecycle.RUNNING, health=Health.STALE, started_at=NOW)
    stale_task = task_state(health=Health.STALE)
    outcome = apply_correction(
        stale_task,
        stuck,
        Correction("op-1", "worker gone", Lifecycle.FAILED, error=StepError("SYSTEM", "WORKER_LOST", "Lost")),
        statuses=generic_statuses(),
        other_steps_stale=False,
        now=NOW,
    )
    assert outcome.step is not None
    assert (outcome.step.lifecycle, outcome.step.health, outcome.step.finished_at) == (
        Lifecycle.FAILED,
        Health.HEALTHY,
        NOW,
    )
    assert outcome.step.error is not None and outcome.step.error.code == "WORKER_LOST"
    assert outcome.step.version == stuck.version + 1
    assert outcome.task.version == stale_task.version + 1 and outcome.task.health is Health.HEALTHY
    assert outcome.changes[0] == {"field": "lifecycleStatus", "old": "RUNNING", "new": "FAILED"}
    assert (outcome.notice.type, outcome.notice.id) == ("CORRECTED", f"{stale_task.task_id}:{stale_task.version + 1}")


def test_the_task_stays_stale_while_another_step_is() -> None:
    stale_task = task_state(health=Health.STALE)
    stuck = step_state(lifecycle=Lifecycle.RUNNING, health=Health.STALE)
    outcome = apply_correction(
        stale_task,
        stuck,
        Correction("op-1", "settled", Lifecycle.SUCCEEDED),
        statuses=generic_statuses(),
        other_steps_stale=True,
        now=NOW,
    )
    assert outcome.task.health is Health.STALE


def test_a_terminal_task_may_be_corrected_and_a_failure_says_why() -> None:
    failed = task_state(lifecycle=Lifecycle.FAILED, finished_at=NOW)
    outcome = apply_correction(
        failed,
        None,
        Correction("op-1", "it did finish", Lifecycle.SUCCEEDED),
        statuses=generic_statuses(),
        other_steps_stale=False,
        now=NOW,
    )
    assert outcome.task.lifecycle is Lifecycle.SUCCEEDED and outcome.task.failure is None
    refailed = _apply(None, Correction("op-1", "no", Lifecycle.FAILED))
    assert refailed.task.failure is not None and refailed.task.failure.code == "ADMIN_CORRECTION"


@pytest.mark.parametrize(
    "correction",
    [
        Correction("op-1", "nothing", None, None),
        Correction("op-1", " ", Lifecycle.FAILED),
        Correction("op-1", "x" * 501, Lifecycle.FAILED),
        Correction("op-1", "same", Lifecycle.RUNNING),
        Correction("op-1", "err", Lifecycle.SUCCEEDED, error=StepError("SYSTEM", "X", "")),
        Correction("op-1", "unknown", None, "NOT_A_STATUS"),
    ],
    ids=["sets nothing", "blank reason", "long reason", "changes nothing", "error not failed", "unknown status"],
)
def test_a_correction_that_says_nothing_true_is_refused(correction: Correction) -> None:
    with pytest.raises(DomainError):
        _apply(None, correction)


@given(
    before=st.sampled_from(list(Lifecycle)),
    after=st.sampled_from(list(Lifecycle)),
    on_step=st.booleans(),
)
def test_every_correction_moves_the_version_by_one_and_says_what_moved(
    before: Lifecycle, after: Lifecycle, on_step: bool
) -> None:
    task = task_state(lifecycle=before if not on_step else Lifecycle.RUNNING)
    step = step_state(lifecycle=before) if on_step else None
    corrected = step if step is not None else task
    correction = Correction("op-1", "because", after)
    if before is after:
        with pytest.raises(DomainError):
            apply_correction(task, step, correction, statuses=generic_statuses(), other_steps_stale=False, now=NOW)
        return
    outcome = apply_correction(task, step, correction, statuses=generic_statuses(), other_steps_stale=False, now=NOW)
    assert outcome.task.version == task.version + 1
    moved = outcome.step if step is not None else outcome.task
    assert moved is not None and moved.lifecycle is after
    assert (moved.finished_at is not None) == after.terminal
    assert {"field": "lifecycleStatus", "old": corrected.lifecycle.value, "new": after.value} in outcome.changes
