"""A task's classification (design D8.11): its product, its type and its status definition bound.

The product is a label: it changes freely, each change an event. The type and the definition
version are frozen once bound — a task's business status is read under its definition, so
binding another would make what was recorded mean something else. Binding a type without a
version binds the type's latest definition; whichever definition is bound must hold the task's
current business status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from status.domain.definitions import StatusDefinitionSet
from status.domain.errors import Conflict, ErrorCode, Invalid
from status.domain.model import TaskState, evolve

# The names a request may set (a field absent from the request is left as it is).
PRODUCT = "productId"
TASK_TYPE = "taskType"
DEFINITION_VERSION = "statusDefinitionVersion"


@dataclass(frozen=True)
class Asked:
    """What a classification request sets: ``fields`` names the ones it sent (a None sent clears
    the product; the type and version cannot be cleared once bound)."""

    fields: frozenset[str]
    product_id: str | None = None
    task_type: str | None = None
    status_definition_version: int | None = None


def classified(
    task: TaskState,
    asked: Asked,
    *,
    expected_version: int | None,
    statuses: Mapping[tuple[str, int], StatusDefinitionSet],
    now: datetime,
) -> TaskState | None:
    """The task as classified, at its next version; None when the request changes nothing."""
    if expected_version is not None and expected_version != task.version:
        raise Conflict(
            f"the task is at version {task.version}, not {expected_version}", ErrorCode.VERSION_PRECONDITION_FAILED
        )
    product = asked.product_id if PRODUCT in asked.fields else task.product_id
    task_type = task.task_type
    if TASK_TYPE in asked.fields and asked.task_type != task.task_type:
        if task.task_type is not None:
            raise Conflict("taskType is frozen once set", ErrorCode.DEFINITION_FROZEN)
        task_type = asked.task_type
    version = _definition_version(task, asked, task_type, statuses)
    if version != task.status_definition_version:
        _check_definition(task, task_type, version, statuses)
    if (product, task_type, version) == (task.product_id, task.task_type, task.status_definition_version):
        return None
    return evolve(
        task,
        product_id=product,
        task_type=task_type,
        status_definition_version=version,
        version=task.version + 1,
        updated_at=now,
    )


def _definition_version(
    task: TaskState, asked: Asked, task_type: str | None, statuses: Mapping[tuple[str, int], StatusDefinitionSet]
) -> int | None:
    """The definition version the task is bound to after the request: the one asked for, or, for
    a type bound now without one, the type's latest."""
    version = task.status_definition_version
    if DEFINITION_VERSION in asked.fields and asked.status_definition_version != version:
        if version is not None:
            raise Conflict("the status definition version is frozen once bound", ErrorCode.DEFINITION_FROZEN)
        return asked.status_definition_version
    if version is None and task_type is not None and task_type != task.task_type:
        return max((v for (bound_type, v) in statuses if bound_type == task_type), default=None)
    return version


def _check_definition(
    task: TaskState, task_type: str | None, version: int | None, statuses: Mapping[tuple[str, int], StatusDefinitionSet]
) -> None:
    """The definition to bind exists and holds the task's current business status."""
    bound = statuses.get((task_type, version)) if task_type is not None and version is not None else None
    if bound is None:
        raise Invalid(f"no status definition {task_type} v{version}", ErrorCode.UNKNOWN_BUSINESS_STATUS)
    if task.business_status not in bound.statuses:
        raise Invalid(
            f"business status {task.business_status} is not in {task_type} v{version}",
            ErrorCode.UNKNOWN_BUSINESS_STATUS,
        )
