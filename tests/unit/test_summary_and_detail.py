"""A change's summary and detail built together are exactly the ones built apart."""

from __future__ import annotations

import json
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from status.domain.eta import DurationStats
from status.domain.lifecycle import EventType, Health, Lifecycle
from status.domain.model import Progress, StepState
from status.domain.notices import Notice, NoticeKind
from status.domain.projections import summary_and_detail, task_detail, trigger_event, user_summary
from status.domain.rules import Severity
from status.domain.stepset import StepSet
from tests.support.states import NOW, step_state, task_state

STEP = st.tuples(
    st.sampled_from(list(Lifecycle)),
    st.sampled_from(list(Health)),
    st.sampled_from(["KNOWN", "DYNAMIC"]),
    st.one_of(st.none(), st.floats(0, 10)),
    st.integers(0, 600),
)


def _steps(specs: list[tuple[Lifecycle, Health, str, float | None, int]]) -> StepSet:
    steps: list[StepState] = []
    for i, (lifecycle, health, kind, progress, age) in enumerate(specs):
        started = NOW - timedelta(seconds=age) if lifecycle is not Lifecycle.PENDING else None
        steps.append(
            step_state(
                step_id=f"s{i:02d}",
                step_order=i,
                step_kind=kind,
                lifecycle=lifecycle,
                health=health,
                started_at=started,
                finished_at=NOW if lifecycle.terminal else None,
                progress=Progress(progress, 10, "item") if progress is not None else None,
                updated_at=NOW - timedelta(seconds=i),
            )
        )
    return StepSet.of(steps)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(STEP, max_size=60),  # past the detail window too
    st.sampled_from(list(Lifecycle)),
    st.sampled_from(list(Health)),
    st.booleans(),
    st.booleans(),
)
def test_built_together_they_are_the_summary_and_detail_built_apart(
    specs: list[tuple[Lifecycle, Health, str, float | None, int]],
    lifecycle: Lifecycle,
    health: Health,
    with_history: bool,
    with_notice: bool,
) -> None:
    task = task_state(lifecycle=lifecycle, health=health, started_at=NOW - timedelta(minutes=5))
    steps = _steps(specs)
    history = {"DOCUMENT.PARSE": DurationStats(12, 30_000.0, 20_000.0, 45_000.0)} if with_history else None
    notice: Notice | None = Notice(f"{task.task_id}:{task.version}", NoticeKind.STEP_RETRYING, Severity.INFO, "retried")
    if not with_notice:
        notice = None
    trigger = trigger_event("e1", EventType.STEP_PROGRESS, None, NOW, reported=True, duration_ms=5)
    now = NOW + timedelta(seconds=7)

    summary, detail = summary_and_detail(task, steps, now, notice, trigger, history)

    # Compared as they are stored and sent: the JSON text, key order included.
    assert json.dumps(summary) == json.dumps(user_summary(task, steps, now, notice, history))
    assert json.dumps(detail) == json.dumps(task_detail(task, steps, now, trigger, history))
