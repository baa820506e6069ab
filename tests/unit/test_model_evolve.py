"""``evolve`` builds exactly what ``dataclasses.replace`` builds, and refuses what it refuses."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from status.domain.lifecycle import Health, Lifecycle
from status.domain.model import StepState, TaskState, evolve
from tests.support.states import NOW, step_state, task_state

STEP_FIELDS = [f.name for f in dataclasses.fields(StepState)]
TASK_FIELDS = [f.name for f in dataclasses.fields(TaskState)]
# Values of other types than the fields hold: evolve, like replace, never checks types, only names.
VALUES = st.one_of(st.none(), st.integers(), st.text(max_size=5), st.sampled_from([*Lifecycle, *Health, NOW]))


def _changes(names: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(names), VALUES, max_size=6)


@given(_changes(STEP_FIELDS))
def test_a_step_evolves_into_what_replace_builds(changes: dict[str, Any]) -> None:
    step = step_state()
    before = dataclasses.asdict(step)
    evolved = evolve(step, **changes)
    assert type(evolved) is StepState
    assert dataclasses.asdict(evolved) == dataclasses.asdict(dataclasses.replace(step, **changes))
    assert dataclasses.asdict(step) == before  # the original is untouched


@given(_changes(TASK_FIELDS))
def test_a_task_evolves_into_what_replace_builds(changes: dict[str, Any]) -> None:
    task = task_state()
    evolved = evolve(task, **changes)
    assert evolved == dataclasses.replace(task, **changes)
    assert evolved is not task


def test_an_evolved_state_is_as_frozen_and_hashable_as_the_original() -> None:
    task = task_state()
    evolved = evolve(task, version=task.version + 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        evolved.version = 1  # type: ignore[misc]
    assert hash(evolve(task)) == hash(task) and evolve(task) == task


def test_a_misspelt_field_is_refused_as_replace_refuses_it() -> None:
    step = step_state()
    with pytest.raises(TypeError):
        dataclasses.replace(step, verison=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="verison"):
        evolve(step, verison=2)
