"""The plugin's workflow-side context survives being closed elsewhere ; a binding keeps its fields.

A worker that stops (or evicts a workflow) in the middle of a step closes the workflow's
coroutine from elsewhere: the ``task_step`` block then exits in a context other than the one it
was entered in, and resetting its ContextVar token there raised ValueError ("was created in a
different Context"), an error in the user's worker on every shutdown mid-step.
"""

from __future__ import annotations

from contextvars import copy_context

from task_status_interceptors import dynamic_step, task_step
from task_status_interceptors._context import StepBinding, current_binding, owning_run


def test_a_step_block_closed_from_another_context_raises_nothing() -> None:
    for block in (task_step("tsk", "01_step"), dynamic_step("tsk", "SEARCH.WEB"), owning_run()):
        elsewhere = copy_context()
        elsewhere.run(block.__enter__)  # entered where the workflow ran
        block.__exit__(None, None, None)  # closed here, as on eviction: no ValueError
    assert current_binding() is None


def test_a_step_block_still_restores_the_outer_binding() -> None:
    with task_step("tsk", "outer"):
        with task_step("tsk", "inner"):
            assert current_binding().step_id == "inner"  # type: ignore[union-attr]
        assert current_binding().step_id == "outer"  # type: ignore[union-attr]
    assert current_binding() is None


def test_an_evicted_workflow_ends_nothing_and_asks_nothing_of_the_workflow_runtime() -> None:
    """A worker stopping closes its workflows' coroutines (GeneratorExit) outside the workflow's
    event loop: the plugin's run interceptor must let that through untouched — it asked the
    workflow runtime about cancellation there and failed with 'Not in workflow event loop'."""
    from collections.abc import Generator

    from task_status_interceptors._interceptor import _WorkflowInbound

    class Pending:
        def __await__(self) -> Generator[None, None, None]:
            yield  # an activity that has not finished

    class Evicted:
        async def execute_workflow(self, input: object) -> object:
            await Pending()
            return None

    inbound = _WorkflowInbound(Evicted())  # type: ignore[arg-type]
    coroutine = inbound.execute_workflow(None)  # type: ignore[arg-type]
    coroutine.send(None)  # suspended mid-run, as a workflow waiting on an activity
    coroutine.close()  # eviction: GeneratorExit goes through; nothing else is raised


def test_a_binding_travels_as_its_set_fields_and_comes_back_equal() -> None:
    known = StepBinding("tsk-1", "02_parse")
    dynamic = StepBinding("tsk-1", None, "PAGE.OCR", "page-7", "exe-parent", "Page 7")
    assert known.to_json() == {"task_id": "tsk-1", "step_id": "02_parse"}
    assert dynamic.to_json() == {
        "task_id": "tsk-1",
        "operation_code": "PAGE.OCR",
        "client_step_key": "page-7",
        "parent_execution_id": "exe-parent",
        "display_name": "Page 7",
    }
    assert [StepBinding.from_json(b.to_json()) for b in (known, dynamic)] == [known, dynamic]
