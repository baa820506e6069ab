"""Versioned definitions and policies (design D8.3, D8.5, D8.9, D8.10; design D5.1, D8.9)."""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol, TypedDict

from status.domain.errors import ErrorCode, Forbidden, Invalid, LimitExceeded
from status.domain.lifecycle import WORKER_EVENT_TYPES, EventType, Lifecycle

GENERIC_OPERATION = "GENERIC"
ANY = "*"
OPERATION_CODE_RE = re.compile(r"^[A-Z][A-Z0-9_]*(\.[A-Z0-9_]+)*$")


class FailurePolicy(StrEnum):
    FAIL_TASK = "FAIL_TASK"
    RETRY_THEN_FAIL_TASK = "RETRY_THEN_FAIL_TASK"
    CONTINUE_WITH_WARNING = "CONTINUE_WITH_WARNING"
    WAIT_FOR_USER = "WAIT_FOR_USER"


class Severity(StrEnum):
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"


class SchemaValidator(Protocol):
    """Validates ``data.value`` against a JSON Schema document (adapter: ``jsonschema``)."""

    def errors(self, schema_id: str, document: Mapping[str, Any], value: Any) -> list[str]: ...

    def document_problem(self, document: Mapping[str, Any]) -> str | None:
        """Why a JSON Schema document may not be stored (invalid, remote references, too costly), or None."""
        ...


class OperationKey(NamedTuple):
    """What identifies a stored operation version: its tenant and scope ("*": the defaults), the
    task types it covers, its version and its code."""

    tenant_id: str
    authority_scope: str
    task_type_pattern: str
    version: int
    operation_code: str


@dataclass(frozen=True)
class OperationDefinition:
    """Who may report an operation, which events, and which data contracts (design D5.1)."""

    operation_code: str  # exact code, a namespace pattern "SEARCH.*", or "*"
    version: int
    display_name: str
    producer_pattern: str = ANY
    allowed_event_types: frozenset[EventType] = WORKER_EVENT_TYPES
    # eventType -> allowed data.schema ids
    allowed_data_schemas: Mapping[str, frozenset[str]] = field(default_factory=dict)
    schema_documents: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    failure_policy: FailurePolicy = FailurePolicy.FAIL_TASK
    task_type_pattern: str = ANY
    tenant_id: str = ANY
    authority_scope: str = ANY
    enabled: bool = True
    # An attempt running longer than this makes its task overdue for operators (None: the default).
    max_runtime_seconds: int | None = None

    @property
    def key(self) -> OperationKey:
        return OperationKey(
            self.tenant_id, self.authority_scope, self.task_type_pattern, self.version, self.operation_code
        )

    def matches_operation(self, code: str) -> bool:
        return fnmatch.fnmatchcase(code, self.operation_code)

    def specificity(self) -> tuple[int, int, int]:
        """Exact codes beat namespaces beat "*"; a tenant's own beats the defaults."""
        exact = 0 if any(c in self.operation_code for c in "*?[") else 1
        return (int(self.tenant_id != ANY), exact, len(self.operation_code))

    def check_producer(self, producer_id: str) -> None:
        if not fnmatch.fnmatchcase(producer_id, self.producer_pattern):
            raise Forbidden(
                f"producer {producer_id!r} may not report {self.operation_code}", ErrorCode.PRODUCER_MISMATCH
            )

    def check_event_type(self, event_type: EventType) -> None:
        if event_type not in self.allowed_event_types:
            raise Forbidden(
                f"{event_type} is not allowed for operation {self.operation_code}",
                ErrorCode.EVENT_TYPE_NOT_ALLOWED,
            )

    def check_data(self, event_type: EventType, schema_id: str, value: Any, validator: SchemaValidator) -> None:
        allowed = self.allowed_data_schemas.get(event_type.value, frozenset())
        if schema_id not in allowed:
            raise Invalid(
                f"data.schema {schema_id!r} is not registered for {self.operation_code} {event_type}",
                ErrorCode.SCHEMA_REJECTED,
            )
        document = self.schema_documents.get(schema_id)
        if document is None:
            raise Invalid(f"data.schema {schema_id!r} has no schema document", ErrorCode.SCHEMA_REJECTED)
        problems = validator.errors(schema_id, document, value)
        if problems:
            raise Invalid(f"data does not match {schema_id}: {problems[0]}", ErrorCode.SCHEMA_REJECTED)

    def strip_to_schema(self, schema_id: str, value: Any) -> Any:
        """Keep only the properties the schema declares (design D8.10: unknown fields never reach projections)."""
        document = self.schema_documents.get(schema_id, {})
        properties = document.get("properties")
        if isinstance(value, dict) and isinstance(properties, Mapping):
            return {k: v for k, v in value.items() if k in properties}
        return value


def find_operation(
    definitions: Iterable[OperationDefinition], code: str, task_type: str | None
) -> OperationDefinition | None:
    """The most specific enabled definition for an operation code and task type."""
    candidates = [
        d
        for d in definitions
        if d.enabled
        and d.matches_operation(code)
        and (
            d.task_type_pattern == ANY
            or (task_type is not None and fnmatch.fnmatchcase(task_type, d.task_type_pattern))
        )
    ]
    if not candidates:
        return None
    return max(candidates, key=lambda d: (d.specificity(), d.version))


def defined_operation(
    definitions: Iterable[OperationDefinition], code: str, task_type: str | None
) -> OperationDefinition:
    """``find_operation``'s definition, or the refusal of an operation nobody defined."""
    return require_defined(find_operation(definitions, code, task_type), code)


def require_defined(found: OperationDefinition | None, code: str) -> OperationDefinition:
    """The definition ``find_operation`` found for ``code``; when none, the refusal."""
    if found is None:
        raise Invalid(f"operation {code!r} has no definition", ErrorCode.OPERATION_MISMATCH)
    return found


@dataclass(frozen=True)
class StatusDefinition:
    """One registered business status of a task type (design D5.1)."""

    code: str
    display_name: str
    lifecycle: Lifecycle
    severity: Severity = Severity.INFO
    allowed_from: frozenset[str] | None = None  # None: from any status
    requires_action: bool = False
    presentation: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StatusDefinitionSet:
    """The business statuses a task may use, frozen at one version once bound (design P16)."""

    task_type: str | None
    version: int | None
    statuses: Mapping[str, StatusDefinition]

    def resolve(self, code: str | None, lifecycle: Lifecycle, previous: str | None) -> StatusDefinition:
        """The business status an event moves to; callers can't declare terminality (design D8.3, P7)."""
        if code is None:
            return self.statuses.get(lifecycle.value) or StatusDefinition(lifecycle.value, lifecycle.value, lifecycle)
        status = self.statuses.get(code)
        if status is None:
            raise Invalid(f"business status {code!r} is not registered", ErrorCode.UNKNOWN_BUSINESS_STATUS)
        if status.lifecycle != lifecycle:
            raise Invalid(
                f"business status {code!r} means {status.lifecycle}, but this event leads to {lifecycle}",
                ErrorCode.UNKNOWN_BUSINESS_STATUS,
            )
        if status.allowed_from is not None and previous is not None and previous not in status.allowed_from:
            raise Invalid(f"business status {code!r} cannot follow {previous!r}", ErrorCode.UNKNOWN_BUSINESS_STATUS)
        return status


@functools.cache
def generic_statuses() -> StatusDefinitionSet:
    """Unclassified tasks: the business status is the lifecycle name. Built once (it was built on
    every event of such a task): frozen, and its mapping read-only, so the shared set cannot change."""
    severity = {Lifecycle.FAILED: Severity.ERROR, Lifecycle.TIMED_OUT: Severity.ERROR}
    return StatusDefinitionSet(
        task_type=None,
        version=None,
        statuses=MappingProxyType(
            {
                lc.value: StatusDefinition(lc.value, lc.value.title(), lc, severity.get(lc, Severity.INFO))
                for lc in Lifecycle
            }
        ),
    )


class PolicyDocument(TypedDict, total=False):
    """A registration policy as stored and fingerprinted (one stored by an earlier version may
    leave keys out: their defaults apply)."""

    allowedParentOperations: list[str]
    allowedChildOperations: list[str]
    maxDynamicSteps: int
    maxDepth: int
    maxParallelExecutions: int
    registrationsPerMinute: int


@dataclass(frozen=True)
class DynamicRegistrationPolicy:
    """Limits on steps registered at run time (design D8.9, D8.9)."""

    # Namespace patterns, in the order the policy gave them: the stored document and the request's
    # fingerprint (``to_json``) are the ones the client sent.
    allowed_parent_operations: tuple[str, ...] = ()
    allowed_child_operations: tuple[str, ...] = ()
    max_dynamic_steps: int = 0
    max_depth: int = 1
    max_parallel_executions: int = 10
    registrations_per_minute: int = 60

    @classmethod
    def from_json(cls, raw: Mapping[str, Any] | None) -> DynamicRegistrationPolicy:
        if not raw:
            return cls()
        return cls(
            allowed_parent_operations=tuple(raw.get("allowedParentOperations", ())),
            allowed_child_operations=tuple(raw.get("allowedChildOperations", ())),
            max_dynamic_steps=int(raw.get("maxDynamicSteps", 0)),
            max_depth=int(raw.get("maxDepth", 1)),
            max_parallel_executions=int(raw.get("maxParallelExecutions", 10)),
            registrations_per_minute=int(raw.get("registrationsPerMinute", 60)),
        )

    def to_json(self) -> PolicyDocument:
        """The policy's document: every field by its JSON name, as it is stored and fingerprinted."""
        return {
            "allowedParentOperations": list(self.allowed_parent_operations),
            "allowedChildOperations": list(self.allowed_child_operations),
            "maxDynamicSteps": self.max_dynamic_steps,
            "maxDepth": self.max_depth,
            "maxParallelExecutions": self.max_parallel_executions,
            "registrationsPerMinute": self.registrations_per_minute,
        }

    def check(
        self,
        *,
        operation_code: str,
        parent_operation: str | None,
        depth: int,
        dynamic_steps: int,
        running_dynamic: int,
        registered_last_minute: int,
    ) -> None:
        """Refuse a registration outside the policy's namespaces (DYNAMIC_STEP_NOT_ALLOWED, 403) or
        past its counts and rates (DYNAMIC_STEP_LIMIT, 429)."""

        def deny(reason: str) -> LimitExceeded:
            return LimitExceeded(reason, ErrorCode.DYNAMIC_STEP_LIMIT, retryable=False)

        # Depth first: a registration under a dynamic step is "too deep" before its parent's namespace.
        if depth > self.max_depth:
            raise deny(f"nesting depth {depth} exceeds {self.max_depth}")
        if not any(fnmatch.fnmatchcase(operation_code, p) for p in self.allowed_child_operations):
            raise Forbidden(
                f"operation {operation_code} is outside the allowed child namespaces",
                ErrorCode.DYNAMIC_STEP_NOT_ALLOWED,
            )
        if parent_operation is not None and not any(
            fnmatch.fnmatchcase(parent_operation, p) for p in self.allowed_parent_operations
        ):
            raise Forbidden(
                f"operation {parent_operation} may not register child steps", ErrorCode.DYNAMIC_STEP_NOT_ALLOWED
            )
        if dynamic_steps >= self.max_dynamic_steps:
            raise deny(f"the task already has {dynamic_steps} dynamic steps (max {self.max_dynamic_steps})")
        if running_dynamic >= self.max_parallel_executions:
            raise deny(f"{running_dynamic} dynamic executions are running (max {self.max_parallel_executions})")
        if registered_last_minute >= self.registrations_per_minute:
            raise LimitExceeded("too many registrations in the last minute", ErrorCode.DYNAMIC_STEP_LIMIT)
