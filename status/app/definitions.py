"""Loading, freezing and caching versioned definitions (design D8.3, D8.10, P16)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from status.app.ports import Stores
from status.domain.definitions import (
    ANY,
    OPERATION_CODE_RE,
    FailurePolicy,
    OperationDefinition,
    SchemaValidator,
    Severity,
    StatusDefinition,
    StatusDefinitionSet,
    find_operation,
    generic_statuses,
    require_defined,
)
from status.domain.errors import Conflict, ErrorCode, Invalid
from status.domain.lifecycle import STEP_EVENT_TYPES, EventType, Lifecycle


def _operation_pattern_ok(code: str) -> bool:
    return code == ANY or bool(OPERATION_CODE_RE.match(code.removesuffix(".*")))


def parse_operation(  # noqa: C901
    raw: Mapping[str, Any], validator: SchemaValidator, tenant_id: str = ANY, scope: str = ANY
) -> OperationDefinition:
    try:
        code = str(raw["operationCode"])
        version = int(raw["version"])
        events = frozenset(EventType(e) for e in raw["allowedEventTypes"])
        schemas = {str(k): dict(v) for k, v in (raw.get("schemas") or {}).items()}
        allowed = {str(k): frozenset(str(s) for s in v) for k, v in (raw.get("allowedDataSchemas") or {}).items()}
        policy = FailurePolicy(raw.get("failurePolicy", "FAIL_TASK"))
        max_runtime = raw.get("maxRuntimeSeconds")
        if max_runtime is not None and (isinstance(max_runtime, bool) or not isinstance(max_runtime, int)):
            raise ValueError("maxRuntimeSeconds must be a whole number of seconds")
    except (KeyError, ValueError, TypeError) as exc:
        raise Invalid(f"operation definition is malformed: {exc}") from exc
    if max_runtime is not None and not 1 <= max_runtime <= 366 * 24 * 3600:
        raise Invalid("maxRuntimeSeconds must be between 1 and a year")
    if not _operation_pattern_ok(code) or version < 1:
        raise Invalid(f"operation code {code!r} or version {version} is not valid")
    if not events <= STEP_EVENT_TYPES or EventType.STEP_HEALTH_CHANGED in events:
        raise Invalid("operations may allow step events only (never task or health events)")
    for event_type, ids in allowed.items():
        if EventType(event_type) not in events:
            raise Invalid(f"data schemas are listed for {event_type}, which the operation does not allow")
        missing = ids - set(schemas)
        if missing:
            raise Invalid(f"schemas {sorted(missing)} have no JSON Schema document")
    for schema_id, document in schemas.items():
        problem = validator.document_problem(document)
        if problem is not None:
            raise Invalid(f"schema {schema_id} is not a valid JSON Schema: {problem}")
    return OperationDefinition(
        operation_code=code,
        version=version,
        display_name=str(raw.get("displayName") or code),
        producer_pattern=str(raw.get("producerPattern", ANY)),
        allowed_event_types=events,
        allowed_data_schemas=allowed,
        schema_documents=schemas,
        failure_policy=policy,
        task_type_pattern=str(raw.get("taskTypePattern", ANY)),
        tenant_id=tenant_id,
        authority_scope=scope,
        enabled=bool(raw.get("enabled", True)),
        max_runtime_seconds=max_runtime,
    )


def parse_status_set(raw: Mapping[str, Any]) -> StatusDefinitionSet:
    try:
        statuses = {
            str(s["code"]): StatusDefinition(
                code=str(s["code"]),
                display_name=str(s.get("displayName") or s["code"]),
                lifecycle=Lifecycle(s["lifecycle"]),
                severity=Severity(s.get("severity", "INFO")),
                allowed_from=frozenset(s["allowedFrom"]) if s.get("allowedFrom") is not None else None,
                requires_action=bool(s.get("requiresAction", False)),
                presentation=dict(s.get("presentation") or {}),
            )
            for s in raw["statuses"]
        }
        result = StatusDefinitionSet(str(raw["taskType"]), int(raw["version"]), statuses)
    except (KeyError, ValueError, TypeError) as exc:
        raise Invalid(f"status definition is malformed: {exc}") from exc
    for lifecycle in Lifecycle:
        if lifecycle.value not in statuses:
            raise Invalid(f"status definition {result.task_type} v{result.version} lacks {lifecycle.value}")
    return result


def save_definitions(
    stores: Stores, validator: SchemaValidator, document: Mapping[str, Any], tenant_id: str, scope: str
) -> dict[str, int]:
    """Insert new definition versions; re-sending a stored version must be identical (frozen, design P16)."""
    if not isinstance(document, Mapping):
        raise Invalid("definitions must be an object with 'operations' and 'statuses'")
    for part in ("operations", "statuses"):
        entries = document.get(part) or []
        if not isinstance(entries, list) or not all(isinstance(entry, Mapping) for entry in entries):
            raise Invalid(f"{part} must be a list of objects")
    saved = {"operations": 0, "statuses": 0, "unchanged": 0}
    for raw in document.get("operations", []) or []:
        op = parse_operation(raw, validator, tenant_id, scope)
        existing = stores.definitions.operation(op.key)
        if existing is not None:
            if existing != op:
                raise Conflict(
                    f"operation {op.operation_code} v{op.version} exists with other content; publish a new version",
                    ErrorCode.DEFINITION_FROZEN,
                )
            saved["unchanged"] += 1
            continue
        stores.definitions.insert_operation(op)
        saved["operations"] += 1
    for raw in document.get("statuses", []) or []:
        status_set = parse_status_set(raw)
        stored = stores.definitions.statuses(tenant_id, scope, status_set.task_type, status_set.version)
        if stored:
            if _frozen_part(stored) != _frozen_part(status_set.statuses.values()):
                raise Conflict(
                    f"statuses of {status_set.task_type} v{status_set.version} exist with other content",
                    ErrorCode.DEFINITION_FROZEN,
                )
            saved["unchanged"] += 1
            continue
        stores.definitions.insert_statuses(tenant_id, scope, status_set)
        saved["statuses"] += 1
    return saved


def _frozen_part(statuses: Iterable[StatusDefinition]) -> dict[str, tuple[Lifecycle, Severity, frozenset[str]]]:
    """What a stored status set may not change: each status's lifecycle, severity and predecessors
    (none given: any). Names and presentation may be sent again differently."""
    return {s.code: (s.lifecycle, s.severity, s.allowed_from or frozenset()) for s in statuses}


def default_document() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(resources.files("status").joinpath("definitions/default.json").read_text())
    return data


@dataclass(frozen=True)
class Definitions:
    """Every enabled definition visible to one (tenant, scope): its own plus the defaults."""

    operations: tuple[OperationDefinition, ...]
    statuses: Mapping[tuple[str, int], StatusDefinitionSet]
    # (code, task type, version) -> the definition ``find_operation`` chose: every event asks it
    # (a scan of every definition with a pattern match each); the definitions never change.
    _chosen: dict[tuple[str, str | None, int | None], OperationDefinition | None] = field(
        default_factory=dict, compare=False, repr=False
    )

    def operation(self, code: str, task_type: str | None, version: int | None = None) -> OperationDefinition:
        """The definition an operation reports under (at ``version`` when given), or the refusal
        of an operation nobody defined."""
        key = (code, task_type, version)
        try:
            found = self._chosen[key]
        except KeyError:
            candidates = self.operations if version is None else [d for d in self.operations if d.version == version]
            found = self._chosen[key] = find_operation(candidates, code, task_type)
        return require_defined(found, code)

    def status_set(self, task_type: str | None, version: int | None) -> StatusDefinitionSet:
        if task_type is None or version is None:
            return generic_statuses()
        return self.statuses.get((task_type, version)) or generic_statuses()

    def latest_status_version(self, task_type: str) -> int | None:
        versions = [v for (tt, v) in self.statuses if tt == task_type]
        return max(versions) if versions else None


class DefinitionCache:
    """Definitions per (tenant, scope), cached briefly: versions are immutable once stored."""

    def __init__(self, ttl_seconds: float = 5.0) -> None:
        self._ttl = ttl_seconds
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], tuple[float, Definitions]] = {}

    def invalidate(self) -> None:
        with self._lock:
            self._entries.clear()

    def get(self, stores: Stores, tenant_id: str, scope: str) -> Definitions:
        key = (tenant_id, scope)
        with self._lock:
            hit = self._entries.get(key)
        if hit and hit[0] > time.monotonic():
            return hit[1]
        definitions = self._load(stores, tenant_id, scope)
        with self._lock:
            self._entries[key] = (time.monotonic() + self._ttl, definitions)
        return definitions

    @staticmethod
    def _load(stores: Stores, tenant_id: str, scope: str) -> Definitions:
        operations, stored = stores.definitions.visible_to(tenant_id, scope)
        grouped: dict[tuple[str, int], dict[str, StatusDefinition]] = {}
        # A tenant's own version shadows a default of the same type and version.
        for row in sorted(stored, key=lambda row: row.tenant_id != ANY):
            grouped.setdefault((row.task_type, row.version), {})[row.status.code] = row.status
        statuses = {k: StatusDefinitionSet(k[0], k[1], v) for k, v in grouped.items()}
        return Definitions(tuple(operations), statuses)
