"""Definition rows (operations, status sets) and the duration history ETAs read."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa

from status.app.ports import Row
from status.domain.definitions import ANY
from status.domain.lifecycle import Lifecycle
from status.infra import tables as t


class SqlDefinitionStore:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def visible_to(self, tenant_id: str, scope: str) -> tuple[list[Row], list[Row]]:
        """(operation rows, status rows) of a tenant's scope and of the global defaults."""
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
        return list(operations), list(statuses)

    def operation_row(self, key: Row) -> Row | None:
        ops = t.task_operation_definition
        return self._conn.execute(sa.select(ops).where(*[ops.c[k] == v for k, v in key.items()])).mappings().first()

    def insert_operation(self, row: Row) -> None:
        self._conn.execute(sa.insert(t.task_operation_definition).values(dict(row)))

    def freeze_operation(self, key: tuple[str, str, str, int, str], now: datetime) -> None:
        """An operation version in use can no longer be replaced (AC16); key: tenant, scope, task type
        pattern, version, operation code."""
        tenant_id, scope, task_type_pattern, version, operation_code = key
        od = t.task_operation_definition
        self._conn.execute(
            sa.update(od)
            .where(
                od.c.tenant_id == tenant_id,
                od.c.authority_scope == scope,
                od.c.task_type_pattern == task_type_pattern,
                od.c.definition_version == version,
                od.c.operation_code == operation_code,
                od.c.frozen_at.is_(None),
            )
            .values(frozen_at=now)
        )

    def status_rows(self, tenant_id: str, scope: str, task_type: str | None, version: int | None) -> list[Row]:
        st = t.task_status_definition
        return list(
            self._conn.execute(
                sa.select(st).where(
                    st.c.tenant_id == tenant_id,
                    st.c.authority_scope == scope,
                    st.c.task_type == task_type,
                    st.c.definition_version == version,
                )
            ).mappings()
        )

    def insert_statuses(self, rows: Sequence[Row]) -> None:
        self._conn.execute(sa.insert(t.task_status_definition), [dict(r) for r in rows])


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
