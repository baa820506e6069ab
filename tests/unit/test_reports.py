"""A report's rules before its state is asked, without a database: its route, the execution it is
bound to, who may end a task or report its run's health, and what a repeated eventId gets."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from status.app.commands import ReportEvent
from status.domain import ids
from status.domain.admission import TEMPORAL_VERDICT, Limits
from status.domain.auth import ExecutionClaims, Role, ServicePrincipal, StoredHandle
from status.domain.errors import Conflict, DomainError, ErrorCode, Forbidden, Invalid, NotFound, TooLarge
from status.domain.lifecycle import EventType
from status.domain.reports import (
    HEALTH_PRODUCER,
    Route,
    admit_task_report,
    bind_step_event,
    check_task_workflow,
    repeat_of,
    route_of,
    run_health_target,
    task_report_target,
)
from status.domain.rules import DataBody
from tests.support.states import NOW

HANDLE = "hdl_0123456789abcdef"
CLAIMS = ExecutionClaims(
    workflow_id="wf_1",
    task_id="tsk_1",
    step_id="02_parse",
    step_attempt=1,
    execution_id="exe_1",
    operation_code="DOCUMENT.PARSE",
    producer_id="parser",
    tenant_id="t",
    authority_scope="s",
    bucket_id=1,
    expires_at=NOW + timedelta(hours=1),
    allowed_event_types=frozenset({"STEP_STARTED", "STEP_COMPLETED"}),
)
HANDLE_ROW = StoredHandle(
    task_id="tsk_1",
    step_id="02_parse",
    step_attempt=1,
    execution_id="exe_1",
    producer_id="parser",
    expires_at=NOW + timedelta(hours=1),
    revoked_at=None,
    revoke_reason=None,
)
HANDLES = {ids.handle_hash(HANDLE): HANDLE_ROW}


def _service(*roles: Role, producer: str = "parser") -> ServicePrincipal:
    return ServicePrincipal(producer, "t", "s", frozenset(roles))


def _report(event_type: str = "STEP_STARTED", **fields: Any) -> ReportEvent:
    fields = {"event_id": "e-1", "source_seq": 1, "occurred_at": NOW} | fields
    return ReportEvent(event_type=event_type, **fields)


def _refusal(call: Any, *args: Any, **kwargs: Any) -> DomainError:
    with pytest.raises(DomainError) as caught:
        call(*args, **kwargs)
    return caught.value


# ------------------------------------------------------------------ route_of


@pytest.mark.parametrize(
    ("event_type", "route"),
    [
        ("STEP_STARTED", Route.STEP),
        ("STEP_PROGRESS", Route.STEP),
        ("STEP_HEALTH_CHANGED", Route.STEP),
        ("TASK_COMPLETED", Route.TASK),
        ("TASK_TIMED_OUT", Route.TASK),
        ("TASK_HEALTH_CHANGED", Route.RUN_HEALTH),
    ],
)
def test_each_reportable_type_has_its_route(event_type: str, route: Route) -> None:
    assert route_of(_report(event_type), max_data_bytes=100) == (EventType(event_type), route)


@pytest.mark.parametrize(
    ("report", "kind", "code", "words"),
    [
        (_report("STEP_EXPLODED"), Invalid, ErrorCode.VALIDATION_FAILED, "unknown eventType"),
        (_report(event_id="has space"), Invalid, ErrorCode.VALIDATION_FAILED, "eventId must be"),
        (_report(event_id="x" * 129), Invalid, ErrorCode.VALIDATION_FAILED, "eventId must be"),
        (_report(event_id="sys:tsk_1:4"), Invalid, ErrorCode.VALIDATION_FAILED, "the service's own entries"),
        (_report(source_seq=0), Invalid, ErrorCode.VALIDATION_FAILED, "sourceSeq must be >= 1"),
        (_report(data=DataBody("s", "x" * 101)), TooLarge, ErrorCode.PAYLOAD_TOO_LARGE, "larger than 100 bytes"),
        (_report(summary=DataBody("s", ["x" * 99])), TooLarge, ErrorCode.PAYLOAD_TOO_LARGE, "send a resultRef"),
        # The service's own event types are written by the service, never reported.
        (_report("STEP_ACTIVATED"), Invalid, ErrorCode.VALIDATION_FAILED, "cannot be reported"),
        (_report("TASK_CREATED"), Invalid, ErrorCode.VALIDATION_FAILED, "cannot be reported"),
        (_report("ADMIN_CORRECTION"), Invalid, ErrorCode.VALIDATION_FAILED, "cannot be reported"),
    ],
)
def test_a_body_alone_earns_its_refusal(report: ReportEvent, kind: type, code: ErrorCode, words: str) -> None:
    err = _refusal(route_of, report, max_data_bytes=100)
    assert type(err) is kind and err.code is code and words in err.message


def test_refusals_come_in_their_order() -> None:
    """An unknown type wins over a bad key, a bad key over a bad sequence, a sequence over size."""
    big = DataBody("s", "x" * 200)
    assert "unknown eventType" in _refusal(route_of, _report("NOPE", event_id=" "), max_data_bytes=10).message
    assert "eventId" in _refusal(route_of, _report(event_id=" ", source_seq=0), max_data_bytes=10).message
    assert "sourceSeq" in _refusal(route_of, _report(source_seq=0, data=big), max_data_bytes=10).message
    assert type(_refusal(route_of, _report("STEP_ACTIVATED", data=big), max_data_bytes=10)) is TooLarge


def test_health_changes_carry_no_sequence_of_their_own() -> None:
    for event_type in ("STEP_HEALTH_CHANGED", "TASK_HEALTH_CHANGED"):
        assert route_of(_report(event_type, source_seq=0), max_data_bytes=10)[0] is EventType(event_type)


def test_data_at_the_limit_is_taken() -> None:
    exactly = DataBody("s", "x" * 98)  # 100 bytes once encoded, quotes included
    assert route_of(_report(data=exactly), max_data_bytes=100)[1] is Route.STEP


# ------------------------------------------------------------------ bind_step_event


def _bind(report: ReportEvent, caller: ExecutionClaims | ServicePrincipal, **kw: Any) -> Any:
    kw.setdefault("handles", HANDLES)
    kw.setdefault("revoked_now", {})
    kw.setdefault("now", NOW)
    return bind_step_event(report, EventType(report.event_type), caller, **kw)


def test_a_token_binds_its_own_claims() -> None:
    bound = _bind(_report(task_id="tsk_1", step_id="02_parse", producer_id="parser"), CLAIMS)
    assert (bound.task_id, bound.step_id, bound.step_attempt, bound.tenant_id) == ("tsk_1", "02_parse", 1, "t")
    assert bound.binding.execution_id == "exe_1" and bound.binding.operation_code == "DOCUMENT.PARSE"
    assert bound.binding.allowed_event_types == CLAIMS.allowed_event_types and bound.binding.problem is None


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"task_id": "tsk_2"}, ErrorCode.PERMISSION_DENIED),
        ({"step_id": "03_other"}, ErrorCode.PERMISSION_DENIED),
        ({"workflow_id": "wf_2"}, ErrorCode.PERMISSION_DENIED),
        ({"step_attempt": 2}, ErrorCode.STALE_ATTEMPT),
        ({"execution_id": "exe_2"}, ErrorCode.STALE_EXECUTION),
        ({"operation_code": "OTHER.OP"}, ErrorCode.OPERATION_MISMATCH),
        ({"producer_id": "someone"}, ErrorCode.PRODUCER_MISMATCH),
    ],
)
def test_a_body_naming_another_execution_than_its_credential_is_refused(
    fields: dict[str, Any], code: ErrorCode
) -> None:
    assert _refusal(_bind, _report(**fields), CLAIMS).code is code
    if "workflow_id" in fields or "operation_code" in fields:
        # A handle does not bind these: the task's own facts are checked against them later.
        assert _bind(_report(execution_handle=HANDLE, **fields), _service(Role.WORKER)).task_id == "tsk_1"
    else:
        assert _refusal(_bind, _report(execution_handle=HANDLE, **fields), _service(Role.WORKER)).code is code


def test_a_token_and_a_handle_together_are_refused() -> None:
    err = _refusal(_bind, _report(execution_handle=HANDLE), CLAIMS)
    assert type(err) is Invalid and "not both" in err.message


def test_health_changes_come_from_the_health_role_only() -> None:
    health = _report("STEP_HEALTH_CHANGED", task_id="tsk_1", step_id="02_parse", step_attempt=1, execution_id="exe_1")
    assert _refusal(_bind, health, CLAIMS).code is ErrorCode.EVENT_TYPE_NOT_ALLOWED
    assert _refusal(_bind, health, _service(Role.WORKER, Role.RECONCILER)).code is ErrorCode.EVENT_TYPE_NOT_ALLOWED
    bound = _bind(health, _service(Role.HEALTH))
    assert bound.binding.producer_id == HEALTH_PRODUCER and bound.binding.execution_id == "exe_1"
    assert "name taskId" in _refusal(_bind, replace(health, execution_id=None), _service(Role.HEALTH)).message


@pytest.mark.parametrize("event_type", ["STEP_COMPLETED", "STEP_FAILED", "STEP_TIMED_OUT", "STEP_CANCELLED"])
def test_temporal_names_the_attempt_whose_end_it_recorded(event_type: str) -> None:
    verdict = _report(event_type, task_id="tsk_1", step_id="02_parse", step_attempt=1, execution_id="exe_1")
    bound = _bind(verdict, _service(Role.RECONCILER))
    assert bound.binding.from_temporal and bound.binding.producer_id == TEMPORAL_VERDICT
    # Anything else Temporal's role sends needs a handle like any producer's report.
    err = _refusal(_bind, replace(verdict, event_type="STEP_PROGRESS"), _service(Role.RECONCILER))
    assert "need an execution token or an executionHandle" in err.message


def test_a_handle_binds_its_stored_row() -> None:
    bound = _bind(_report(execution_handle=HANDLE), _service(Role.WORKER))
    assert (bound.task_id, bound.step_id, bound.binding.execution_id, bound.binding.producer_id) == (
        "tsk_1",
        "02_parse",
        "exe_1",
        "parser",
    )
    assert bound.binding.operation_code is None and bound.binding.allowed_event_types is None


def test_an_unknown_or_foreign_handle_is_refused() -> None:
    assert _refusal(_bind, _report(execution_handle=HANDLE), _service(Role.WORKER), handles={}).code is (
        ErrorCode.TOKEN_REVOKED
    )
    other = _service(Role.WORKER, producer="other")
    assert _refusal(_bind, _report(execution_handle=HANDLE), other).code is ErrorCode.PRODUCER_MISMATCH


@pytest.mark.parametrize(
    ("row", "revoked_now", "code", "words"),
    [
        ({"revoked_at": NOW, "revoke_reason": "SUPERSEDED"}, {}, ErrorCode.TOKEN_REVOKED, "revoked (SUPERSEDED)"),
        ({}, {"exe_1": "STEP_TERMINAL"}, ErrorCode.TOKEN_REVOKED, "revoked (STEP_TERMINAL)"),
        ({"expires_at": NOW}, {}, ErrorCode.TOKEN_EXPIRED, "has expired"),
    ],
)
def test_a_revoked_or_expired_handle_is_noted_not_refused(
    row: dict[str, Any], revoked_now: dict[str, str], code: ErrorCode, words: str
) -> None:
    """Refused only after dedup (admission raises the problem): a retry still gets its first answer."""
    handles = {ids.handle_hash(HANDLE): HANDLE_ROW._replace(**row)}
    bound = _bind(_report(execution_handle=HANDLE), _service(Role.WORKER), handles=handles, revoked_now=revoked_now)
    assert bound.binding.problem is not None
    assert bound.binding.problem.code is code and words in bound.binding.problem.message


# ------------------------------------------------------------------ task events and run health


def test_a_task_event_names_its_task_and_attempt() -> None:
    assert task_report_target(_report("TASK_COMPLETED", task_id="tsk_1", task_attempt=2)) == ("tsk_1", 2)
    for fields in ({"task_id": "tsk_1"}, {"task_attempt": 1}):
        assert (
            "need taskId and taskAttempt" in _refusal(task_report_target, _report("TASK_COMPLETED", **fields)).message
        )


def test_a_task_in_another_workflow_does_not_exist() -> None:
    check_task_workflow(_report("TASK_COMPLETED"), "tsk_1", "wf_1")
    check_task_workflow(_report("TASK_COMPLETED", workflow_id="wf_1"), "tsk_1", "wf_1")
    err = _refusal(check_task_workflow, _report("TASK_COMPLETED", workflow_id="wf_2"), "tsk_1", "wf_1")
    assert type(err) is NotFound and err.code is ErrorCode.UNKNOWN_TASK


def test_task_events_take_no_summary_and_only_temporal_is_never_too_old() -> None:
    limits = Limits(max_age=timedelta(days=1), max_skew=timedelta(minutes=5))
    old = _report("TASK_COMPLETED", occurred_at=NOW - timedelta(days=2))
    assert _refusal(admit_task_report, old, verdict=False, now=NOW, limits=limits).code is ErrorCode.EVENT_TOO_OLD
    admit_task_report(old, verdict=True, now=NOW, limits=limits)
    ahead = replace(old, occurred_at=NOW + timedelta(minutes=6))
    assert _refusal(admit_task_report, ahead, verdict=False, now=NOW, limits=limits).code is ErrorCode.EVENT_IN_FUTURE
    summary = replace(old, occurred_at=NOW, summary=DataBody("s", {}))
    assert _refusal(admit_task_report, summary, verdict=True, now=NOW, limits=limits).code is ErrorCode.SCHEMA_REJECTED


def test_a_run_health_report_is_temporals_alone() -> None:
    stuck = _report("TASK_HEALTH_CHANGED", task_id="tsk_1", health="STALE")
    assert run_health_target(stuck, _service(Role.RECONCILER)) == ("tsk_1", True)
    assert run_health_target(replace(stuck, health="HEALTHY"), _service(Role.RECONCILER)) == ("tsk_1", False)
    for caller in (CLAIMS, _service(Role.COORDINATOR, Role.HEALTH)):
        err = _refusal(run_health_target, stuck, caller)
        assert type(err) is Forbidden and err.code is ErrorCode.EVENT_TYPE_NOT_ALLOWED
    for bad in (replace(stuck, health="DEGRADED"), replace(stuck, health=None), replace(stuck, task_id=None)):
        assert type(_refusal(run_health_target, bad, _service(Role.RECONCILER))) is Invalid


# ------------------------------------------------------------------ repeats


def test_a_new_event_is_no_repeat() -> None:
    assert repeat_of("abc", None) is None


answers = st.dictionaries(st.sampled_from(["taskId", "accepted", "lifecycleStatus"]), st.text(max_size=5))


@given(answers, st.text(min_size=1, max_size=8))
def test_the_same_event_again_is_its_first_answer(first: dict[str, Any], fingerprint: str) -> None:
    """However often it is sent: the first answer, marked a duplicate, and nothing else changes."""
    again = repeat_of(fingerprint, (fingerprint, first))
    assert again == {**first, "duplicate": True}
    assert repeat_of(fingerprint, (fingerprint, first)) == again
    assert "duplicate" not in first  # the stored answer is left as it was


@given(answers, st.text(min_size=1, max_size=8), st.text(min_size=1, max_size=8))
def test_other_content_under_a_used_event_id_is_refused(first: dict[str, Any], stored: str, sent: str) -> None:
    if stored == sent:
        return
    with pytest.raises(Conflict) as caught:
        repeat_of(sent, (stored, first))
    assert caught.value.code is ErrorCode.EVENT_ID_CONFLICT
