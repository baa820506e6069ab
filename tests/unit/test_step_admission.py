"""The step event's rules, decided without a database: who may report, which
attempt and execution are current, how old an event may be, and the state machine's invariants
as properties over random event sequences."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from status.domain.admission import (
    TEMPORAL_VERDICT,
    Binding,
    Limits,
    admit_step_event,
    check_envelope,
    task_event_speaker,
)
from status.domain.auth import Role, ServicePrincipal
from status.domain.definitions import OperationDefinition, generic_statuses
from status.domain.errors import Conflict, DomainError, ErrorCode, Forbidden
from status.domain.lifecycle import WORKER_EVENT_TYPES, EventType, Lifecycle
from status.domain.model import Progress, StepError, StepState, TaskState
from status.domain.rules import StepEvent, apply_step_event
from tests.support.states import NOW, step_state, task_state

LIMITS = Limits(max_age=timedelta(days=6), max_skew=timedelta(minutes=5))
OPERATION = OperationDefinition("*", 1, "Any operation")


class _NoSchemas:
    def errors(self, schema_id: str, document: Any, value: Any) -> list[str]:
        return []

    def document_problem(self, document: Any) -> str | None:
        return None


_task = task_state
_step = step_state


BINDING = Binding("exe_1", "parser", "DOCUMENT.PARSE", frozenset(e.value for e in WORKER_EVENT_TYPES))


def _event(event_type: EventType = EventType.STEP_STARTED, seq: int = 1, **kw: Any) -> StepEvent:
    return StepEvent(f"evt-{seq}", event_type, seq, "parser", kw.pop("occurred_at", NOW), **kw)


def _admit(task: TaskState | None = None, step: StepState | None = None, binding: Binding = BINDING, **kw: Any) -> Any:
    event = kw.pop("event", _event())
    return admit_step_event(
        task or _task(),
        step or _step(),
        binding,
        event,
        task_attempt=kw.pop("task_attempt", None),
        now=NOW,
        limits=LIMITS,
    )


def test_an_event_of_the_current_execution_by_its_producer_is_admitted_as_sent() -> None:
    admitted = _admit(event=_event(seq=7))
    assert (admitted.source_seq, admitted.producer_id, admitted.from_temporal) == (7, "parser", False)


@pytest.mark.parametrize(
    ("case", "kw", "code"),
    [
        ("another task attempt", {"task_attempt": 2}, ErrorCode.STALE_ATTEMPT),
        ("another execution", {"step": _step(execution_id="exe_0")}, ErrorCode.STALE_EXECUTION),
        ("a superseded attempt", {"step": _step(superseded=True)}, ErrorCode.STALE_ATTEMPT),
        ("another producer", {"binding": replace(BINDING, producer_id="intruder")}, ErrorCode.PRODUCER_MISMATCH),
        ("another operation", {"binding": replace(BINDING, operation_code="VIDEO.X")}, ErrorCode.OPERATION_MISMATCH),
        (
            "an event type the token does not allow",
            {"binding": replace(BINDING, allowed_event_types=frozenset({"STEP_PROGRESS"}))},
            ErrorCode.EVENT_TYPE_NOT_ALLOWED,
        ),
        ("too old", {"event": _event(occurred_at=NOW - timedelta(days=7))}, ErrorCode.EVENT_TOO_OLD),
        ("from the future", {"event": _event(occurred_at=NOW + timedelta(minutes=6))}, ErrorCode.EVENT_IN_FUTURE),
    ],
)
def test_each_refusal_has_its_code(case: str, kw: dict[str, Any], code: ErrorCode) -> None:
    with pytest.raises(DomainError) as refused:
        _admit(**kw)
    assert refused.value.code is code, case


def test_the_credentials_problem_comes_first_and_an_old_event_is_refused_last() -> None:
    revoked = replace(BINDING, problem=Forbidden("revoked", ErrorCode.TOKEN_REVOKED), producer_id="intruder")
    with pytest.raises(Forbidden) as first:
        _admit(binding=revoked, step=_step(superseded=True))
    assert first.value.code is ErrorCode.TOKEN_REVOKED
    with pytest.raises(Conflict) as stale:  # stale and old: the staleness is what is said
        _admit(step=_step(superseded=True), event=_event(occurred_at=NOW - timedelta(days=7)))
    assert stale.value.code is ErrorCode.STALE_ATTEMPT


def test_temporal_and_health_speak_for_no_producer_and_follow_the_steps_own_sequence() -> None:
    step = _step(lifecycle=Lifecycle.RUNNING, source_seq=9, version=4)
    verdict = replace(BINDING, producer_id=TEMPORAL_VERDICT, operation_code=None, allowed_event_types=None)
    old = _event(EventType.STEP_COMPLETED, 1, occurred_at=NOW - timedelta(days=30))
    admitted = _admit(step=step, binding=verdict, event=old)  # however late Temporal's record is read
    assert (admitted.source_seq, admitted.from_temporal) == (10, True)
    health = replace(BINDING, producer_id="task-status/health")
    assert _admit(step=step, binding=health, event=_event(EventType.STEP_HEALTH_CHANGED, 0)).source_seq == 5


# ---------------------------------------------------------------- the state machine's invariants
def _apply(task: TaskState, step: StepState, event: StepEvent) -> tuple[TaskState, StepState]:
    admitted = admit_step_event(task, step, BINDING, event, task_attempt=None, now=NOW, limits=LIMITS)
    outcome = apply_step_event(
        task,
        step,
        admitted,
        operation=OPERATION,
        statuses=generic_statuses(),
        validator=_NoSchemas(),
        other_steps_stale=False,
        now=NOW,
    )
    assert outcome.step is not None
    return outcome.task, outcome.step


_EVENTS = st.sampled_from(sorted(WORKER_EVENT_TYPES, key=lambda e: e.value))
_REPORTS = st.lists(st.tuples(_EVENTS, st.integers(min_value=-2, max_value=3)), min_size=1, max_size=25)


def _fields(event_type: EventType) -> dict[str, Any]:
    if event_type is EventType.STEP_FAILED:
        return {"error": StepError("SYSTEM", "E", "It broke.", False)}
    if event_type is EventType.STEP_PROGRESS:
        return {"progress": Progress(1, 4)}
    return {}


@settings(max_examples=300, deadline=None)
@given(reports=_REPORTS, terminal_task=st.booleans())
def test_versions_only_grow_an_ended_step_or_task_never_changes_and_a_repeat_is_refused(
    reports: list[tuple[EventType, int]], terminal_task: bool
) -> None:
    task = _task(lifecycle=Lifecycle.SUCCEEDED) if terminal_task else _task()
    step, seq = _step(), 0
    for event_type, delta in reports:
        seq = max(0, seq + delta)
        event = _event(event_type, seq, **_fields(event_type))
        try:
            new_task, new_step = _apply(task, step, event)
        except DomainError as refused:
            if terminal_task:
                assert refused.code is ErrorCode.TERMINAL_STATE
            if seq <= step.source_seq and not terminal_task:
                assert refused.code is ErrorCode.SOURCE_SEQ_REGRESSION  # a repeat or an older report
            continue
        assert not terminal_task, "a terminal task's step changed"
        assert not step.lifecycle.terminal, "an ended step changed"
        assert new_task.version == task.version + 1 and new_step.version == step.version + 1
        assert new_step.source_seq == seq > step.source_seq
        with pytest.raises(Conflict) as again:  # the same report twice is one change
            _apply(new_task, new_step, event)
        assert again.value.code in (ErrorCode.SOURCE_SEQ_REGRESSION, ErrorCode.TERMINAL_STATE)
        task, step = new_task, new_step


@settings(max_examples=100, deadline=None)
@given(reports=_REPORTS)
def test_a_superseded_attempt_never_changes_whatever_it_reports(reports: list[tuple[EventType, int]]) -> None:
    old = _step(superseded=True, lifecycle=Lifecycle.TIMED_OUT)
    for event_type, delta in reports:
        with pytest.raises(Conflict) as refused:
            _apply(_task(), old, _event(event_type, 100 + delta, **_fields(event_type)))
        assert refused.value.code is ErrorCode.STALE_ATTEMPT


# ---------------------------------------------------------------- who may end a task
def _service(*roles: Role, producer: str = "coordinator-1") -> ServicePrincipal:
    return ServicePrincipal(producer, "t", "s", frozenset(roles))


@pytest.mark.parametrize(
    ("caller", "event_type", "expected"),
    [
        (_service(Role.COORDINATOR), EventType.TASK_COMPLETED, False),
        (_service(Role.RECONCILER), EventType.TASK_COMPLETED, True),
        (_service(Role.RECONCILER), EventType.TASK_TIMED_OUT, True),
        (_service(Role.COORDINATOR), EventType.TASK_TIMED_OUT, ErrorCode.EVENT_TYPE_NOT_ALLOWED),
        (_service(Role.WORKER), EventType.TASK_FAILED, ErrorCode.EVENT_TYPE_NOT_ALLOWED),
        ("an execution's claims", EventType.TASK_COMPLETED, ErrorCode.EVENT_TYPE_NOT_ALLOWED),
    ],
)
def test_only_the_coordinator_or_temporals_verdict_ends_a_task(
    caller: Any, event_type: EventType, expected: bool | ErrorCode
) -> None:
    if isinstance(expected, ErrorCode):
        with pytest.raises(Forbidden) as refused:
            task_event_speaker(caller, event_type, producer_id=None)
        assert refused.value.code is expected
    else:
        assert task_event_speaker(caller, event_type, producer_id=None) is expected


def test_a_task_event_naming_another_producer_is_refused() -> None:
    with pytest.raises(Forbidden) as refused:
        task_event_speaker(_service(Role.COORDINATOR), EventType.TASK_COMPLETED, producer_id="someone-else")
    assert refused.value.code is ErrorCode.PRODUCER_MISMATCH


@pytest.mark.parametrize(
    ("claims", "code"),
    [
        ({"workflow_id": "wf_other"}, ErrorCode.PERMISSION_DENIED),
        ({"operation_code": "VIDEO.TRANSCODE"}, ErrorCode.OPERATION_MISMATCH),
        ({"task_type": "other.type"}, ErrorCode.PERMISSION_DENIED),
    ],
)
def test_an_envelope_claiming_other_facts_is_refused(claims: dict[str, str], code: ErrorCode) -> None:
    check_envelope(_task(), _step(), workflow_id="wf_1", operation_code="DOCUMENT.PARSE")  # its own facts
    with pytest.raises(Forbidden) as refused:
        check_envelope(_task(), _step(), **claims)
    assert refused.value.code is code
