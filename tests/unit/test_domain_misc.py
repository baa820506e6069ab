"""Identifiers, error codes, projections' whitelists, definitions and the domain's purity."""

from __future__ import annotations

import ast
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from status.api.errors import status_for
from status.domain import ids
from status.domain.definitions import DynamicRegistrationPolicy, Severity, generic_statuses
from status.domain.errors import CODE_CLASS, DomainError, ErrorCode, Forbidden, LimitExceeded, error
from status.domain.lifecycle import Health, Lifecycle
from status.domain.model import Progress, StepError, StepState, TaskState
from status.domain.notices import Notice, NoticeKind
from status.domain.projections import project_broadcast, task_detail, user_summary

DOMAIN = Path(__file__).resolve().parents[2] / "status" / "domain"

# design D6.1: the code is the contract, with its HTTP status.
STATUS_OF_CODE = {
    "UNAUTHENTICATED": 401,
    "PRODUCER_MISMATCH": 403,
    "OPERATION_MISMATCH": 403,
    "EVENT_TYPE_NOT_ALLOWED": 403,
    "TOKEN_EXPIRED": 403,
    "TOKEN_REVOKED": 403,
    "UNKNOWN_TASK": 404,
    "UNKNOWN_STEP": 404,
    "EVENT_ID_CONFLICT": 409,
    "STALE_EXECUTION": 409,
    "STALE_ATTEMPT": 409,
    "SOURCE_SEQ_REGRESSION": 409,
    "INVALID_TRANSITION": 409,
    "TERMINAL_STATE": 409,
    "VERSION_PRECONDITION_FAILED": 409,
    "SCHEMA_REJECTED": 422,
    "UNKNOWN_BUSINESS_STATUS": 422,
    "VALIDATION_FAILED": 422,
    "DYNAMIC_STEP_NOT_ALLOWED": 403,
    "DETAIL_SUBSCRIPTION_LIMIT": 409,
    "DYNAMIC_STEP_LIMIT": 429,
    "RATE_LIMITED": 429,
}


@pytest.mark.parametrize(("code", "status"), sorted(STATUS_OF_CODE.items()))
def test_spec_error_codes_map_to_their_http_status(code: str, status: int) -> None:
    assert status_for(error(ErrorCode(code), "x")) == status


def test_every_code_has_a_class() -> None:
    assert set(CODE_CLASS) == set(ErrorCode)
    assert all(issubclass(cls, DomainError) for cls in CODE_CLASS.values())


def test_handles_are_long_random_and_hashed() -> None:
    handle = ids.new_execution_handle(7)
    assert handle.startswith("exh_007_") and len(handle) == 51 and handle != ids.new_execution_handle(7)
    assert ids.handle_hash(handle) != handle and len(ids.handle_hash(handle)) == 64


@pytest.mark.parametrize("bucket", [0, 1, 0xABC, ids.BUCKET_COUNT - 1])
def test_a_handle_carries_its_bucket(bucket: int) -> None:
    assert ids.handle_bucket(ids.new_execution_handle(bucket)) == bucket


def test_a_workflow_id_carries_its_bucket() -> None:
    workflow_id = ids.new_workflow_id(0x2F1, 1_700_000_000_000)
    assert workflow_id.startswith("wf_2f1_") and ids.workflow_bucket(workflow_id) == 0x2F1
    assert ids.workflow_bucket("wf_" + ids.ulid(1_700_000_000_000)) is None  # minted before buckets
    assert ids.workflow_bucket("wf_someone_else") is None


def test_a_handle_without_a_bucket_is_never_read_as_one() -> None:
    """Handles minted before they carried a bucket are 43 random characters after ``exh_``, which
    may begin with three hex digits and an underscore: their length tells them apart."""
    legacy = "exh_abc_" + "x" * 39
    assert len(legacy) == 47 and ids.handle_bucket(legacy) is None
    assert ids.handle_bucket("exh_nonexistent") is None
    assert ids.handle_bucket("exh_ABC_" + "x" * 43) is None  # the bucket is lower-case hex
    with pytest.raises(ValueError):
        ids.new_execution_handle(ids.BUCKET_COUNT)


def _state() -> tuple[TaskState, list[StepState]]:
    now = datetime(2026, 1, 1, 12, 0, 0)
    task = TaskState(
        task_id="tsk_001_X",
        workflow_id="wf_1",
        client_task_key="k",
        tenant_id="t",
        owner_id="u",
        authority_scope="s",
        bucket_id=1,
        title="Contract.pdf",
        lifecycle=Lifecycle.RUNNING,
        business_status="RUNNING",
        version=7,
        created_at=now,
        updated_at=now,
        started_at=now,
        project_id="p",
        failure=StepError("SYSTEM", "X", "secret-ish message", False, "diag-task"),
    )
    step = StepState(
        task_id="tsk_001_X",
        step_id="02_parse",
        attempt=1,
        client_step_key="02_parse",
        operation_code="DOCUMENT.PARSE",
        operation_definition_version=1,
        service_name="p",
        lifecycle=Lifecycle.RUNNING,
        business_status="RUNNING",
        version=3,
        progress=Progress(3, 10, "page"),
        data_schema="document.parse.progress.v1",
        state_data={"page": 3, "resultRef": "result://private"},
        health=Health.HEALTHY,
        error=StepError("SYSTEM", "E", "msg", True, "diag-123"),
    )
    return task, [step]


def test_ac13_projection_whitelists() -> None:
    task, steps = _state()
    now = datetime(2026, 1, 1, 12, 0, 5)
    summary = user_summary(task, steps, now, Notice("tsk_001_X:7", NoticeKind.STEP_FAILED, Severity.ERROR, "failed"))
    assert "steps" not in summary and "result://private" not in str(summary) and "diag-123" not in str(summary)
    assert summary["taskVersion"] == "7" and summary["notice"]["id"] == "tsk_001_X:7"
    assert summary["elapsedMs"] == 5000 and summary["asOf"] == "2026-01-01T12:00:05.000Z"
    detail = task_detail(task, steps, now, None)
    assert detail["state"]["steps"][0]["data"]["value"]["page"] == 3
    assert "diag-123" not in str(detail) and "diag-task" not in str(detail) and "diag-task" not in str(summary)
    broadcast = project_broadcast(task, steps, now)
    assert "Contract.pdf" not in str(broadcast) and "secret-ish" not in str(broadcast)


def test_generic_statuses_reject_declared_terminality() -> None:
    statuses = generic_statuses()
    assert statuses.resolve(None, Lifecycle.RUNNING, None).code == "RUNNING"
    with pytest.raises(DomainError) as err:
        statuses.resolve("SUCCEEDED", Lifecycle.RUNNING, "RUNNING")
    assert err.value.code is ErrorCode.UNKNOWN_BUSINESS_STATUS


def test_dynamic_policy_limits() -> None:
    policy = DynamicRegistrationPolicy.from_json(
        {
            "allowedParentOperations": ["AGENT.RUN"],
            "allowedChildOperations": ["SEARCH.*"],
            "maxDynamicSteps": 2,
            "maxDepth": 1,
            "maxParallelExecutions": 1,
            "registrationsPerMinute": 5,
        }
    )
    ok = {
        "operation_code": "SEARCH.WEB",
        "parent_operation": "AGENT.RUN",
        "depth": 1,
        "dynamic_steps": 0,
        "running_dynamic": 0,
        "registered_last_minute": 0,
    }
    policy.check(**ok)  # type: ignore[arg-type]
    # Outside the namespaces: a policy refusal (403), not a limit a client would retry.
    for change in ({"operation_code": "TOOL.X"}, {"parent_operation": "OTHER"}):
        with pytest.raises(Forbidden) as refused:
            policy.check(**{**ok, **change})  # type: ignore[arg-type]
        assert refused.value.code is ErrorCode.DYNAMIC_STEP_NOT_ALLOWED
    for change in (
        {"depth": 2},
        {"dynamic_steps": 2},
        {"running_dynamic": 1},
        {"registered_last_minute": 5},
    ):
        with pytest.raises(LimitExceeded) as limited:
            policy.check(**{**ok, **change})  # type: ignore[arg-type]
        assert limited.value.code is ErrorCode.DYNAMIC_STEP_LIMIT


FORBIDDEN = ("sqlalchemy", "starlette", "temporalio", "pymysql", "cent", "jwt", "httpx", "pydantic", "jsonschema")


def test_domain_imports_only_the_standard_library() -> None:
    for path in DOMAIN.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                root = name.split(".")[0]
                assert root not in FORBIDDEN, f"{path.name} imports {name}"
                assert root == "status" or root in sys.stdlib_module_names or root == "__future__", (
                    f"{path.name}: {name}"
                )


def test_importing_the_domain_loads_no_adapter_library() -> None:
    code = "import sys, status.domain.rules, status.domain.projections; print(','.join(sorted(sys.modules)))"
    loaded = set(
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
        .stdout.strip()
        .split(",")
    )
    assert not {m for m in loaded if m.split(".")[0] in FORBIDDEN}


def test_instants_are_naive_utc_from_the_application_boundary_on() -> None:
    """An in-process caller's aware instant (a benchmark's datetime.now(UTC)) is the same naive UTC
    instant the HTTP and gRPC models give: the domain never compares the two kinds."""
    from datetime import UTC, datetime, timedelta, timezone

    from status.app import commands as c
    from status.domain.clock import naive_utc, utcnow
    from status.domain.retention import check_event_age

    aware = datetime(2026, 12, 2, 3, 0, tzinfo=timezone(timedelta(hours=2)))
    assert naive_utc(aware) == datetime(2026, 12, 2, 1, 0) and naive_utc(aware).tzinfo is None
    assert naive_utc(datetime(2026, 1, 1)) == datetime(2026, 1, 1)
    event = c.ReportEvent("e1", "STEP_STARTED", 1, datetime.now(UTC))
    assert event.occurred_at.tzinfo is None
    check_event_age(event.occurred_at, utcnow(), timedelta(hours=1), timedelta(minutes=5))  # no TypeError
    beat = c.Heartbeat(1, observed_at=aware)
    assert beat.observed_at == datetime(2026, 12, 2, 1, 0)
    assert c.StartedEvent("e2", aware).occurred_at == datetime(2026, 12, 2, 1, 0)
