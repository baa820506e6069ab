"""The published shapes are written once (``status.domain.shapes``) and held everywhere else.

* every message the projections build validates against the schema generated from its shape
  (no field more, none missing, each of its type), over states Hypothesis draws;
* ``web/src/types.ts`` declares every shape with the same fields: a field the client may not see
  is optional there, one that may be null is nullable there;
* the checked-in docs/openapi.json is the one generated (the served copy is compared in the
  integration suite).
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin, get_type_hints

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from status.api.openapi import build_openapi, shape_schemas
from status.domain import shapes
from status.domain.eta import DurationStats
from status.domain.lifecycle import EventType, Health, Lifecycle
from status.domain.model import Progress, StepError, StepState, WorkflowState
from status.domain.notices import Notice, NoticeKind
from status.domain.projections import (
    project_broadcast,
    summary_and_detail,
    system_broadcast,
    task_removed,
    task_snapshot,
    trigger_event,
    workflow_summary,
)
from status.domain.rules import Severity
from status.domain.stepset import StepSet
from tests.support.states import NOW, step_state, task_state

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = shape_schemas()
# One document, as in the OpenAPI one, so that "#/components/schemas/…" resolves as it does there.
REGISTRY: Registry = Registry().with_resource(
    "urn:shapes", Resource.from_contents({"$id": "urn:shapes", "components": {"schemas": SCHEMAS}}, DRAFT202012)
)


def _valid(message: Any, shape: str) -> None:
    schema = {"$ref": f"urn:shapes#/components/schemas/{shape}"}
    errors = list(Draft202012Validator(schema, registry=REGISTRY).iter_errors(json.loads(json.dumps(message))))
    assert not errors, [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]


ERRORS = st.one_of(st.none(), st.builds(StepError, st.sampled_from(["USER", "SYSTEM"]), st.just("E1"), st.text()))
STEPS = st.lists(
    st.fixed_dictionaries(
        {
            "lifecycle": st.sampled_from(list(Lifecycle)),
            "health": st.sampled_from(list(Health)),
            "step_kind": st.sampled_from(["KNOWN", "DYNAMIC"]),
            "progress": st.one_of(st.none(), st.builds(Progress, st.floats(0, 10), st.none() | st.just(10.0))),
            "error": ERRORS,
            "duration_ms": st.none() | st.integers(0, 10**6),
            "data_schema": st.none() | st.just("doc.v1"),
            "state_data": st.none() | st.just({"pages": 3}),
            "stale": st.booleans(),
            "age": st.integers(0, 600),
        }
    ),
    max_size=40,
)


def _step(i: int, spec: dict[str, Any]) -> StepState:
    lifecycle: Lifecycle = spec["lifecycle"]
    started = NOW - timedelta(seconds=spec["age"]) if lifecycle is not Lifecycle.PENDING else None
    return step_state(
        step_id=f"s{i:02d}",
        step_order=i,
        step_kind=spec["step_kind"],
        lifecycle=lifecycle,
        health=spec["health"],
        started_at=started,
        finished_at=NOW if lifecycle.terminal else None,
        progress=spec["progress"],
        error=spec["error"],
        duration_ms=spec["duration_ms"],
        data_schema=spec["data_schema"],
        state_data=spec["state_data"],
        stale_since=NOW if spec["stale"] else None,
        updated_at=NOW - timedelta(seconds=i),
    )


@settings(max_examples=80, deadline=None)
@given(
    STEPS,
    st.sampled_from(list(Lifecycle)),
    st.sampled_from(list(Health)),
    ERRORS,
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
def test_every_message_built_is_its_shape(
    specs: list[dict[str, Any]],
    lifecycle: Lifecycle,
    health: Health,
    failure: StepError | None,
    with_history: bool,
    with_notice: bool,
    with_extras: bool,
) -> None:
    task = task_state(
        lifecycle=lifecycle,
        health=health,
        failure=failure,
        failed_step_id="s00" if failure else None,
        summary_schema="summary.v1" if with_extras else None,
        summary_data={"pages": 3} if with_extras else None,
        stuck_since=NOW if with_extras else None,
        end_reason="stopped by an operator" if with_extras else None,
        duration_ms=1234 if with_extras else None,
        product_id="p" if with_extras else None,
    )
    steps = StepSet.of([_step(i, spec) for i, spec in enumerate(specs)])
    history = {"DOCUMENT.PARSE": DurationStats(12, 30_000.0, 20_000.0, 45_000.0)} if with_history else None
    notice = (
        Notice(f"{task.task_id}:{task.version}", NoticeKind.STEP_FAILED, Severity.WARNING, "failed", "msg", "OP", "E")
        if with_notice
        else None
    )
    now = NOW + timedelta(seconds=7)

    trigger = (
        trigger_event(
            "e1",
            EventType.STEP_COMPLETED,
            next(iter(steps.attempts.values()), None),
            now,
            reported=with_history,
            duration_ms=1500,
            with_data=True,
        )
        if with_extras
        else None
    )
    summary, detail = summary_and_detail(task, steps, now, notice, trigger, history)
    _valid(summary, "TaskSummaryMessage")
    _valid(detail, "TaskDetailMessage")
    _valid(task_snapshot(task, steps, now, history), "TaskSnapshot")
    _valid(task_removed(task), "TaskRemovedMessage")
    _valid(project_broadcast(task, steps, now), "TaskProjectMessage")
    _valid({"workflow": workflow_summary(_workflow(lifecycle), now), "tasks": [summary]}, "WorkflowTasks")
    _valid(system_broadcast("m1", "WARNING", "maintenance at noon", now), "SystemNoticeMessage")


def _workflow(lifecycle: Lifecycle) -> WorkflowState:
    return WorkflowState("wf_1", "t", "u", "s", "k", "Import", lifecycle, 3, NOW, NOW, aggregate={"total": 2})


def test_a_field_the_builder_adds_beyond_its_shape_is_refused() -> None:
    """The schemas are strict: the check above would catch a field built but not declared."""
    summary, _ = summary_and_detail(task_state(), StepSet.of([]), NOW, None, None)
    with pytest.raises(AssertionError, match="Additional properties"):
        _valid({**summary, "undeclared": 1}, "TaskSummaryMessage")
    with pytest.raises(AssertionError, match="required"):
        _valid({k: v for k, v in summary.items() if k != "taskVersion"}, "TaskSummaryMessage")


# --- TypeScript -------------------------------------------------------------------------------


class TsField:
    def __init__(self, optional: bool, type_text: str) -> None:
        self.optional = optional
        self.nullable = bool(re.search(r"(^|\|)\s*null\s*($|\|)", type_text))


def _typescript_interfaces(source: str) -> dict[str, dict[str, TsField]]:
    """Each ``export interface`` of the file with its fields, those it extends included."""
    source = re.sub(r"/\*.*?\*/|//[^\n]*", "", source, flags=re.S)
    found: dict[str, tuple[list[str], dict[str, TsField]]] = {}
    for match in re.finditer(r"export interface (\w+)(?: extends ([\w, ]+))? \{(.*?)\n\}", source, re.S):
        fields = {
            name: TsField(bool(optional), type_text.strip())
            for name, optional, type_text in re.findall(r"^\s+(\w+)(\?)?: ([^;]+);", match[3], re.M)
        }
        parents = [p.strip() for p in (match[2] or "").split(",") if p.strip()]
        found[match[1]] = (parents, fields)

    def resolved(name: str) -> dict[str, TsField]:
        parents, fields = found[name]
        merged: dict[str, TsField] = {}
        for parent in parents:
            merged.update(resolved(parent))
        return {**merged, **fields}

    return {name: resolved(name) for name in found}


def _nullable(hint: Any) -> bool:
    if get_origin(hint) is Annotated:
        return _nullable(get_args(hint)[0])
    return hint is type(None) or (get_origin(hint) in (Union, UnionType) and type(None) in get_args(hint))


def _shapes() -> list[type]:
    names = set(SCHEMAS)
    return [getattr(shapes, name) for name in sorted(names)]


TYPESCRIPT = _typescript_interfaces((ROOT / "web" / "src" / "types.ts").read_text())


@pytest.mark.parametrize("shape", _shapes(), ids=lambda shape: shape.__name__)
def test_the_web_client_declares_each_shape_as_the_service_builds_it(shape: type) -> None:
    declared = TYPESCRIPT.get(shape.__name__)
    assert declared is not None, f"web/src/types.ts has no interface {shape.__name__}"
    hints = get_type_hints(shape, include_extras=True)
    assert set(declared) == set(hints), (
        f"{shape.__name__}: only in the service {sorted(set(hints) - set(declared))},"
        f" only in web/src/types.ts {sorted(set(declared) - set(hints))}"
    )
    for name, hint in hints.items():
        if name in getattr(shape, "__optional_keys__", ()):
            assert declared[name].optional, f"{shape.__name__}.{name} may be absent: declare it {name}?"
        if _nullable(hint):
            assert declared[name].nullable, f"{shape.__name__}.{name} may be null: add | null"


def test_the_typescript_reader_sees_what_a_drift_would_change() -> None:
    """The parser the test above relies on: fields, optional, nullable, inherited."""
    parsed = _typescript_interfaces(
        "export interface A {\n  x: string;\n  /** y */\n  y?: number | null;\n}\n"
        "export interface B extends A {\n  z: 'a' | (string & {});\n}\n"
    )
    assert set(parsed["B"]) == {"x", "y", "z"}
    assert parsed["B"]["y"].optional and parsed["B"]["y"].nullable
    assert not parsed["A"]["x"].optional and not parsed["A"]["x"].nullable and not parsed["B"]["z"].nullable


def test_the_checked_in_openapi_document_is_the_generated_one() -> None:
    checked_in = json.loads((ROOT / "docs" / "openapi.json").read_text())
    generated = json.loads(json.dumps(build_openapi()))
    assert checked_in == generated, "run: python -m status.api.openapi > docs/openapi.json"
