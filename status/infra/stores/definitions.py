"""Definition rows (operations, status sets) and the duration history ETAs read."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from status.app.records import StoredStatus
from status.domain.definitions import (
    ANY,
    FailurePolicy,
    OperationDefinition,
    OperationKey,
    Severity,
    StatusDefinition,
    StatusDefinitionSet,
)
from status.domain.lifecycle import EventType, Lifecycle
from status.infra import tables as t


class SqlDefinitionStore:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def visible_to(self, tenant_id: str, scope: str) -> tuple[list[OperationDefinition], list[StoredStatus]]:
        """(operations, statuses) of a tenant's scope and of the global defaults."""
        ops, st = t.task_operation_definition, t.task_status_definition
        operations = self._conn.execute(
            sa.select(ops).where(
                sa.or_(
                    sa.and_(ops.c.tenant_id == tenant_id, ops.c.authority_scope == scope),
                    sa.and_(ops.c.tenant_id == ANY, ops.c.authority_scope == ANY),
                )
            )
        ).mappings()
        statuses = self._conn.execute(
            sa.select(st).where(
                sa.or_(
                    sa.and_(st.c.tenant_id == tenant_id, st.c.authority_scope == scope),
                    sa.and_(st.c.tenant_id == ANY, st.c.authority_scope == ANY),
                )
            )
        ).mappings()
        return [_operation_from_row(r) for r in operations], [
            StoredStatus(r["tenant_id"], r["task_type"], r["definition_version"], _status_from_row(r)) for r in statuses
        ]

    def operation(self, key: OperationKey) -> OperationDefinition | None:
        row = self._conn.execute(sa.select(_OPS).where(*_operation_key(key))).mappings().first()
        return _operation_from_row(row) if row is not None else None

    def insert_operation(self, operation: OperationDefinition) -> None:
        self._conn.execute(sa.insert(_OPS).values(_operation_row(operation)))

    def freeze_operation(self, key: OperationKey, now: datetime) -> None:
        """An operation version in use can no longer be replaced (design P16)."""
        self._conn.execute(
            sa.update(_OPS).where(*_operation_key(key), _OPS.c.frozen_at.is_(None)).values(frozen_at=now)
        )

    def statuses(
        self, tenant_id: str, scope: str, task_type: str | None, version: int | None
    ) -> list[StatusDefinition]:
        st = t.task_status_definition
        rows = self._conn.execute(
            sa.select(st).where(
                st.c.tenant_id == tenant_id,
                st.c.authority_scope == scope,
                st.c.task_type == task_type,
                st.c.definition_version == version,
            )
        ).mappings()
        return [_status_from_row(r) for r in rows]

    def insert_statuses(self, tenant_id: str, scope: str, status_set: StatusDefinitionSet) -> None:
        self._conn.execute(
            sa.insert(t.task_status_definition),
            [
                {
                    "tenant_id": tenant_id,
                    "authority_scope": scope,
                    "task_type": status_set.task_type,
                    "definition_version": status_set.version,
                    "code": s.code,
                    "display_name": s.display_name,
                    "lifecycle_status": s.lifecycle.value,
                    "terminal": s.lifecycle.terminal,
                    "severity": s.severity.value,
                    "sort_order": i,
                    "presentation": {**dict(s.presentation), "requiresAction": s.requires_action},
                    # [] means "from any status" (an empty predecessor set is meaningless).
                    "allowed_from": sorted(s.allowed_from) if s.allowed_from else [],
                    "enabled": True,
                }
                for i, s in enumerate(status_set.statuses.values())
            ],
        )


_OPS = t.task_operation_definition


def _operation_key(key: OperationKey) -> list[sa.ColumnElement[bool]]:
    return [
        _OPS.c.tenant_id == key.tenant_id,
        _OPS.c.authority_scope == key.authority_scope,
        _OPS.c.task_type_pattern == key.task_type_pattern,
        _OPS.c.definition_version == key.version,
        _OPS.c.operation_code == key.operation_code,
    ]


def _operation_row(op: OperationDefinition) -> dict[str, Any]:
    return {
        "tenant_id": op.tenant_id,
        "authority_scope": op.authority_scope,
        "task_type_pattern": op.task_type_pattern,
        "definition_version": op.version,
        "operation_code": op.operation_code,
        "display_name": op.display_name,
        "producer_pattern": op.producer_pattern,
        "allowed_event_types": sorted(e.value for e in op.allowed_event_types),
        "allowed_data_schemas": {k: sorted(v) for k, v in op.allowed_data_schemas.items()},
        "data_schema_documents": {k: dict(v) for k, v in op.schema_documents.items()},
        "failure_policy": op.failure_policy.value,
        "enabled": op.enabled,
        "max_runtime_seconds": op.max_runtime_seconds,
    }


def _operation_from_row(row: Mapping[Any, Any]) -> OperationDefinition:
    return OperationDefinition(
        operation_code=row["operation_code"],
        version=row["definition_version"],
        display_name=row["display_name"],
        producer_pattern=row["producer_pattern"],
        allowed_event_types=frozenset(EventType(e) for e in row["allowed_event_types"]),
        allowed_data_schemas={k: frozenset(v) for k, v in (row["allowed_data_schemas"] or {}).items()},
        schema_documents=row["data_schema_documents"] or {},
        failure_policy=FailurePolicy(row["failure_policy"]),
        task_type_pattern=row["task_type_pattern"],
        tenant_id=row["tenant_id"],
        authority_scope=row["authority_scope"],
        enabled=bool(row["enabled"]),
        max_runtime_seconds=row.get("max_runtime_seconds"),
    )


def _status_from_row(row: Mapping[Any, Any]) -> StatusDefinition:
    presentation = dict(row["presentation"] or {})
    allowed = row["allowed_from"]
    return StatusDefinition(
        code=row["code"],
        display_name=row["display_name"],
        lifecycle=Lifecycle(row["lifecycle_status"]),
        severity=Severity(row["severity"]),
        allowed_from=frozenset(allowed) if allowed else None,
        requires_action=bool(presentation.get("requiresAction", False)),
        presentation=presentation,
    )


class SqlDurationStore:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def recent_durations(
        self, tenant_id: str, scope: str, task_type: str, operation_code: str, limit: int
    ) -> list[float]:
        """The newest successes' ``durationMs`` of an operation (``task_type`` "" for none); uses
        ``task_step_duration_idx``."""
        s, k = t.task_step, t.task
        type_filter = k.c.task_type.is_(None) if task_type == "" else k.c.task_type == task_type
        query = (
            sa.select(s.c.duration_ms)
            .join(k, k.c.id == s.c.task_id)
            .where(
                s.c.operation_code == operation_code,
                s.c.lifecycle_status == Lifecycle.SUCCEEDED.value,
                s.c.duration_ms.is_not(None),
                k.c.tenant_id == tenant_id,
                k.c.authority_scope == scope,
                type_filter,
            )
            .order_by(s.c.finished_at.desc())
            .limit(limit)
        )
        return [float(d) for d in self._conn.scalars(query)]
