"""A task's classification decided without a database: what binds, what is frozen, what is refused."""

from __future__ import annotations

from typing import Any

import pytest

from status.domain.classification import DEFINITION_VERSION, PRODUCT, TASK_TYPE, Asked, classified
from status.domain.definitions import StatusDefinition, StatusDefinitionSet
from status.domain.errors import DomainError, ErrorCode
from status.domain.lifecycle import Lifecycle
from status.domain.model import TaskState
from tests.support.states import NOW, task_state


def _definition(task_type: str, version: int, *codes: str) -> StatusDefinitionSet:
    return StatusDefinitionSet(
        task_type, version, {code: StatusDefinition(code, code.title(), Lifecycle.RUNNING) for code in codes}
    )


STATUSES = {
    ("CONTRACT_REVIEW", 1): _definition("CONTRACT_REVIEW", 1, "RUNNING"),
    ("CONTRACT_REVIEW", 2): _definition("CONTRACT_REVIEW", 2, "RUNNING", "OCR_RUNNING"),
    ("INVOICE", 1): _definition("INVOICE", 1, "PARSING"),
}


def _classify(asked: Asked, expected: int | None = None, **task: Any) -> TaskState | None:
    return classified(task_state(**task), asked, expected_version=expected, statuses=STATUSES, now=NOW)


def test_a_type_bound_without_a_version_binds_its_latest_definition() -> None:
    new = _classify(Asked(frozenset({TASK_TYPE}), task_type="CONTRACT_REVIEW"))
    assert new is not None
    assert (new.task_type, new.status_definition_version, new.version) == ("CONTRACT_REVIEW", 2, 6)


def test_a_version_asked_for_is_bound() -> None:
    new = _classify(
        Asked(frozenset({TASK_TYPE, DEFINITION_VERSION}), task_type="CONTRACT_REVIEW", status_definition_version=1)
    )
    assert new is not None and new.status_definition_version == 1


def test_the_product_is_a_label_that_changes_freely_and_can_be_cleared() -> None:
    labelled = _classify(Asked(frozenset({PRODUCT}), product_id="contracts"), product_id="old")
    cleared = _classify(Asked(frozenset({PRODUCT})), product_id="old")
    assert labelled is not None and labelled.product_id == "contracts"
    assert cleared is not None and cleared.product_id is None


def test_a_request_that_changes_nothing_is_no_change() -> None:
    assert _classify(Asked(frozenset({PRODUCT}), product_id="same"), product_id="same") is None
    bound = {"task_type": "INVOICE", "status_definition_version": 1, "business_status": "PARSING"}
    assert _classify(Asked(frozenset({TASK_TYPE}), task_type="INVOICE"), **bound) is None


@pytest.mark.parametrize(
    ("asked", "code"),
    [
        (Asked(frozenset({TASK_TYPE}), task_type="CONTRACT_REVIEW"), ErrorCode.DEFINITION_FROZEN),
        (Asked(frozenset({DEFINITION_VERSION}), status_definition_version=2), ErrorCode.DEFINITION_FROZEN),
    ],
)
def test_the_type_and_the_definition_are_frozen_once_bound(asked: Asked, code: ErrorCode) -> None:
    with pytest.raises(DomainError) as raised:
        _classify(asked, task_type="INVOICE", status_definition_version=1, business_status="PARSING")
    assert raised.value.code is code


def test_a_definition_must_exist_and_hold_the_current_business_status() -> None:
    with pytest.raises(DomainError) as unknown:
        _classify(
            Asked(frozenset({TASK_TYPE, DEFINITION_VERSION}), task_type="CONTRACT_REVIEW", status_definition_version=9)
        )
    with pytest.raises(DomainError) as missing:
        _classify(Asked(frozenset({TASK_TYPE}), task_type="CONTRACT_REVIEW"), business_status="PARSING")
    assert unknown.value.code is missing.value.code is ErrorCode.UNKNOWN_BUSINESS_STATUS


def test_a_stale_expected_version_is_refused_before_anything_is_decided() -> None:
    with pytest.raises(DomainError) as raised:
        _classify(Asked(frozenset({PRODUCT}), product_id="x"), expected=4)
    assert raised.value.code is ErrorCode.VERSION_PRECONDITION_FAILED
    assert _classify(Asked(frozenset({PRODUCT}), product_id="x"), expected=5) is not None
