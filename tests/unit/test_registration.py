"""Registering a dynamic step execution, decided without a database (status.domain.registration):
a repeat is answered as it was, before the policy counts it; a new one is refused in order, and
otherwise supersedes the step's earlier attempts in the task's next version."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from status.domain import ids
from status.domain.definitions import DynamicRegistrationPolicy, OperationDefinition, generic_statuses
from status.domain.errors import DomainError, ErrorCode
from status.domain.lifecycle import Lifecycle
from status.domain.registration import (
    DYNAMIC_ORDER_BASE,
    HeartbeatDefaults,
    decide_registration,
    registered_before,
)
from tests.support.states import NOW, step_state, task_state

POLICY = DynamicRegistrationPolicy(
    allowed_parent_operations=("DOCUMENT.*",),
    allowed_child_operations=("PAGE.*",),
    max_dynamic_steps=5,
    max_depth=2,
    max_parallel_executions=3,
    registrations_per_minute=4,
)
OCR = OperationDefinition("PAGE.OCR", 3, "Read a page", producer_pattern="ocr-*")
DEFAULTS = HeartbeatDefaults(15, 60)
PARENT = step_state(step_id="02_parse", execution_id="exe_parent", lifecycle=Lifecycle.RUNNING, depth=1)


@dataclass(frozen=True)
class Ask:
    client_step_key: str = "page-1"
    operation_code: str = "PAGE.OCR"
    producer_id: str = "ocr-1"
    attempt: int = 1
    parent_execution_id: str | None = "exe_parent"
    display_name: str | None = None
    failure_policy: str | None = None
    heartbeat_interval_seconds: int | None = None
    heartbeat_timeout_seconds: int | None = None


def _dynamic(key: str, attempt: int = 1, **changes: Any) -> Any:
    fields = {
        "step_id": ids.dynamic_step_id(key),
        "client_step_key": key,
        "attempt": attempt,
        "step_kind": "DYNAMIC",
        "operation_code": "PAGE.OCR",
        "producer_id": "ocr-1",
        "parent_execution_id": "exe_parent",
        "execution_id": f"exe_{key}_{attempt}",
        "lifecycle": Lifecycle.RUNNING,
        "activated_at": NOW - timedelta(hours=1),
        "depth": 2,
    }
    return step_state(**(fields | changes))


def _decide(steps: list[Any], ask: Ask = Ask(), **kwargs: Any) -> Any:
    arguments: dict[str, Any] = {
        "policy": POLICY,
        "operations": [OCR],
        "statuses": generic_statuses(),
        "heartbeats": DEFAULTS,
        "execution_id": "exe_new",
        "now": NOW,
    } | kwargs
    return decide_registration(task_state(), steps, ask, **arguments)


def _refusal(steps: list[Any], ask: Ask = Ask(), **kwargs: Any) -> ErrorCode:
    with pytest.raises(DomainError) as caught:
        _decide(steps, ask, **kwargs)
    return caught.value.code


def test_a_new_registration_is_a_pending_attempt_in_the_tasks_next_version() -> None:
    decided = _decide([PARENT])
    step = decided.step
    assert (step.step_id, step.attempt, step.lifecycle) == (ids.dynamic_step_id("page-1"), 1, Lifecycle.PENDING)
    assert (step.execution_id, step.depth, step.step_order) == ("exe_new", 2, DYNAMIC_ORDER_BASE)
    assert (step.display_name, step.operation_definition_version, step.failure_policy) == (
        "Read a page",
        3,
        "FAIL_TASK",
    )
    assert (step.heartbeat_interval_seconds, step.heartbeat_timeout_seconds) == (15, 60)
    assert decided.task.version == task_state().version + 1
    assert decided.task.dynamic_step_count == task_state().dynamic_step_count + 1
    assert decided.superseded == ()
    assert decided.operation is OCR


def test_the_askers_names_and_timings_win_over_the_definitions() -> None:
    ask = Ask(display_name="Page one", failure_policy="CONTINUE_WITH_WARNING", heartbeat_interval_seconds=5)
    step = _decide([PARENT], ask).step
    assert (step.display_name, step.failure_policy, step.heartbeat_interval_seconds) == (
        "Page one",
        "CONTINUE_WITH_WARNING",
        5,
    )


def test_a_repeat_is_the_attempt_it_created_and_other_content_is_a_conflict() -> None:
    first = _dynamic("page-1")
    assert registered_before([PARENT, first], Ask()) is first
    assert registered_before([PARENT, first], Ask(attempt=2)) is None
    for other in (Ask(operation_code="PAGE.OTHER"), Ask(producer_id="ocr-2"), Ask(parent_execution_id=None)):
        with pytest.raises(DomainError) as caught:
            registered_before([PARENT, first], other)
        assert caught.value.code is ErrorCode.IDEMPOTENCY_CONFLICT


def test_a_repeat_is_found_at_the_policys_limit_where_a_new_one_is_refused() -> None:
    # The trap of the module: the limit counts what a registration adds; a repeat adds nothing.
    full = [PARENT, *(_dynamic(f"page-{i}", lifecycle=Lifecycle.SUCCEEDED) for i in range(5))]
    assert registered_before(full, Ask(client_step_key="page-0")) is full[1]
    assert _refusal(full, Ask(client_step_key="page-9")) is ErrorCode.DYNAMIC_STEP_LIMIT


@pytest.mark.parametrize(
    ("steps", "ask", "kwargs", "code"),
    [
        ([PARENT], Ask(parent_execution_id="exe_nobody"), {}, ErrorCode.UNKNOWN_STEP),
        ([step_state(**{**PARENT.__dict__, "lifecycle": Lifecycle.SUCCEEDED})], Ask(), {}, ErrorCode.TERMINAL_STATE),
        ([PARENT], Ask(operation_code="SEARCH.RUN"), {}, ErrorCode.DYNAMIC_STEP_NOT_ALLOWED),
        ([PARENT], Ask(), {"operations": []}, ErrorCode.OPERATION_MISMATCH),
        ([PARENT], Ask(producer_id="parser"), {}, ErrorCode.PRODUCER_MISMATCH),
        ([PARENT], Ask(failure_policy="SOMETIMES"), {}, ErrorCode.VALIDATION_FAILED),
        ([PARENT, _dynamic("page-1", attempt=2)], Ask(attempt=1, client_step_key="page-1x"), {}, None),
        ([PARENT, _dynamic("page-1", attempt=3)], Ask(attempt=2), {}, ErrorCode.STALE_ATTEMPT),
        ([PARENT, *(_dynamic(f"p{i}") for i in range(3))], Ask(), {}, ErrorCode.DYNAMIC_STEP_LIMIT),
    ],
    ids=[
        "unknown parent",
        "parent finished",
        "outside the namespaces",
        "no definition",
        "producer",
        "failure policy",
        "another key",
        "older attempt",
        "too many running",
    ],
)
def test_a_new_registration_is_refused_for_its_first_problem(
    steps: list[Any], ask: Ask, kwargs: dict[str, Any], code: ErrorCode | None
) -> None:
    if code is None:
        assert _decide(steps, ask, **kwargs).step.attempt == ask.attempt
    else:
        assert _refusal(steps, ask, **kwargs) is code


@pytest.mark.parametrize("ended", [Lifecycle.SUCCEEDED, Lifecycle.FAILED, Lifecycle.CANCELLED])
def test_an_ended_task_takes_no_new_registration_but_answers_a_repeat(ended: Lifecycle) -> None:
    """A registration overtaken by the task's ending would show a step waiting after the work
    stopped; the same registration bound before the end is still answered as it was."""
    first = _dynamic("page-1")
    with pytest.raises(DomainError) as caught:
        decide_registration(
            task_state(lifecycle=ended),
            [PARENT],
            Ask(),
            policy=POLICY,
            operations=[OCR],
            statuses=generic_statuses(),
            heartbeats=DEFAULTS,
            execution_id="exe_new",
            now=NOW,
        )
    assert caught.value.code is ErrorCode.TERMINAL_STATE
    assert registered_before([PARENT, first], Ask()) is first


def test_the_policy_comes_before_the_operations_definition() -> None:
    # An operation outside the policy that nobody defined either: the policy's word is the answer.
    assert _refusal([PARENT], Ask(operation_code="SEARCH.RUN"), operations=[]) is ErrorCode.DYNAMIC_STEP_NOT_ALLOWED


def test_registrations_per_minute_count_only_the_last_minute() -> None:
    recent = [
        _dynamic(f"p{i}", lifecycle=Lifecycle.SUCCEEDED, activated_at=NOW - timedelta(seconds=30)) for i in range(4)
    ]
    assert _refusal([PARENT, *recent]) is ErrorCode.DYNAMIC_STEP_LIMIT
    older = [
        _dynamic(f"p{i}", lifecycle=Lifecycle.SUCCEEDED, activated_at=NOW - timedelta(seconds=61)) for i in range(4)
    ]
    assert _decide([PARENT, *older]).step.step_order == DYNAMIC_ORDER_BASE + 4


def test_a_newer_attempt_supersedes_the_running_one_which_times_out() -> None:
    running = _dynamic("page-1", attempt=1)
    decided = _decide([PARENT, running], Ask(attempt=2))
    [(before, after)] = decided.superseded
    assert before is running
    assert after.superseded and after.lifecycle is Lifecycle.TIMED_OUT and after.version == running.version + 1
    assert decided.step.attempt == 2


@given(
    attempts=st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=4, unique=True),
    asked=st.integers(min_value=1, max_value=8),
)
def test_an_older_attempt_never_replaces_a_newer_one(attempts: list[int], asked: int) -> None:
    steps = [PARENT, *(_dynamic("page-1", attempt=a, lifecycle=Lifecycle.SUCCEEDED) for a in attempts)]
    if asked <= max(attempts):
        assert _refusal(steps, Ask(attempt=asked)) is ErrorCode.STALE_ATTEMPT
    else:
        decided = _decide(steps, Ask(attempt=asked))
        assert decided.step.attempt == asked
        assert all(after.superseded for _, after in decided.superseded)
        assert decided.task.version == task_state().version + 1
