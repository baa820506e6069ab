"""Workflow rows, task creation, and the workflow projector's feed (``workflow_change``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from status.app.records import TaskKeyRow, WorkflowFacts
from status.domain.definitions import PolicyDocument
from status.domain.lifecycle import Health, Lifecycle
from status.domain.model import TaskState, WorkflowState
from status.infra import tables as t
from status.infra.stores import sql

wf, wc = t.workflow, t.workflow_change


class SqlWorkflowStore:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def lock_by_key(
        self, tenant_id: str, scope: str, client_workflow_key: str
    ) -> tuple[WorkflowState, WorkflowFacts] | None:
        """A workflow by its client key, locked, with what it was created with."""
        row = (
            self._conn.execute(
                sa.select(wf)
                .where(
                    wf.c.tenant_id == tenant_id,
                    wf.c.authority_scope == scope,
                    wf.c.client_workflow_key == client_workflow_key,
                )
                .with_for_update()
            )
            .mappings()
            .first()
        )
        return _with_facts(row)

    def lock(self, workflow_id: str) -> tuple[WorkflowState, WorkflowFacts] | None:
        locked = sa.select(wf).where(wf.c.id == workflow_id).with_for_update()
        return _with_facts(self._conn.execute(locked).mappings().first())

    def insert(
        self,
        workflow: WorkflowState,
        *,
        coordinator_id: str,
        dynamic_registration_policy: PolicyDocument | None,
        request_hash: str,
    ) -> None:
        self._conn.execute(
            sa.insert(wf).values(
                id=workflow.workflow_id,
                tenant_id=workflow.tenant_id,
                owner_id=workflow.owner_id,
                authority_scope=workflow.authority_scope,
                coordinator_id=coordinator_id,
                client_workflow_key=workflow.client_workflow_key,
                workflow_type=workflow.workflow_type,
                title=workflow.title,
                lifecycle_status=workflow.lifecycle.value,
                version=workflow.version,
                task_count=workflow.task_count,
                aggregate=workflow.aggregate,
                dynamic_registration_policy=dynamic_registration_policy,
                request_hash=request_hash,
                created_at=workflow.created_at,
                updated_at=workflow.updated_at,
            )
        )

    def update_counts(self, workflow: WorkflowState) -> None:
        """Version and task count (a task was added)."""
        self._conn.execute(
            sa.update(wf)
            .where(wf.c.id == workflow.workflow_id)
            .values(version=workflow.version, task_count=workflow.task_count, updated_at=workflow.updated_at)
        )

    def update_aggregate(self, workflow: WorkflowState) -> None:
        """What the projector folded: lifecycle, health, aggregate, version, times."""
        self._conn.execute(
            sa.update(wf)
            .where(wf.c.id == workflow.workflow_id)
            .values(
                lifecycle_status=workflow.lifecycle.value,
                health=workflow.health.value,
                aggregate=workflow.aggregate,
                version=workflow.version,
                started_at=workflow.started_at,
                finished_at=workflow.finished_at,
                updated_at=workflow.updated_at,
            )
        )

    def task_by_key(self, workflow_id: str, client_task_key: str) -> TaskKeyRow | None:
        """A workflow's task by its client key."""
        row = self._conn.execute(
            sa.select(t.task.c.id, t.task.c.version, t.task.c.request_hash).where(
                t.task.c.workflow_id == workflow_id, t.task.c.client_task_key == client_task_key
            )
        ).first()
        return TaskKeyRow(row[0], int(row[1]), row[2]) if row is not None else None

    def insert_task(
        self,
        task: TaskState,
        *,
        request_hash: str,
        dynamic_registration_policy: PolicyDocument | None,
        temporal_owner: tuple[str, str, str | None] | None,
    ) -> None:
        namespace, workflow_id, run_id = temporal_owner or (None, None, None)
        self._conn.execute(
            sa.insert(t.task).values(
                id=task.task_id,
                workflow_id=task.workflow_id,
                client_task_key=task.client_task_key,
                tenant_id=task.tenant_id,
                owner_id=task.owner_id,
                authority_scope=task.authority_scope,
                bucket_id=task.bucket_id,
                request_hash=request_hash,
                created_at=task.created_at,
                dynamic_registration_policy=dynamic_registration_policy,
                temporal_namespace=namespace,
                temporal_workflow_id=workflow_id,
                temporal_run_id=run_id,
                **sql.task_values(task),
            )
        )

    def freeze_statuses(self, task_type: str, version: int, now: datetime) -> None:
        """A status set in use can no longer be replaced (design P16)."""
        sd = t.task_status_definition
        self._conn.execute(
            sa.update(sd)
            .where(sd.c.task_type == task_type, sd.c.definition_version == version, sd.c.frozen_at.is_(None))
            .values(frozen_at=now)
        )

    # -------------------------------------------------------- the projector's feed
    def claim_changes(self, limit: int) -> list[tuple[int, str]]:
        """Up to ``limit`` feed rows no other projector holds: (id, workflow id), locked."""
        rows = self._conn.execute(
            sa.select(wc.c.id, wc.c.workflow_id).order_by(wc.c.id).limit(limit).with_for_update(skip_locked=True)
        ).all()
        return [(int(r.id), r.workflow_id) for r in rows]

    def delete_changes(self, change_ids: Sequence[int]) -> None:
        self._conn.execute(sa.delete(wc).where(wc.c.id.in_(list(change_ids))))

    def task_states_of(self, workflow_id: str) -> list[tuple[Lifecycle, Health]]:
        """Each task's lifecycle and health (what ``fold`` reads)."""
        query = sa.select(t.task.c.lifecycle_status, t.task.c.health).where(t.task.c.workflow_id == workflow_id)
        return [(Lifecycle(lifecycle), Health(health)) for lifecycle, health in self._conn.execute(query)]


def _with_facts(row: Any) -> tuple[WorkflowState, WorkflowFacts] | None:
    if row is None:
        return None
    return sql.workflow_from_row(row), WorkflowFacts(row["request_hash"], row["dynamic_registration_policy"])
