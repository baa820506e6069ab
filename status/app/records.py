"""The insert-only rows a change adds beside its task and step rows, typed.

A group collects these as it decides its events and writes each kind with one statement at its
end (``status.app.group.Group.flush``). Each is a named tuple whose fields are its table's
columns, in the names and order the stores insert them, so nothing between the decision and the
driver builds a row dict: the store hands the tuples to the database as they are
(``status.infra.inserts.Inserter``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from status.domain.definitions import PolicyDocument, StatusDefinition


class EventRecord(NamedTuple):
    """The immutable event-log entry of a change, at the versions it produced."""

    tenant_id: str
    event_id: str
    workflow_id: str
    task_id: str
    task_version: int
    step_id: str | None
    operation_code: str | None
    execution_id: str | None
    step_version: int | None
    task_attempt: int
    step_attempt: int | None
    producer_id: str
    source_seq: int
    event_type: str
    lifecycle_status: str
    business_status: str | None
    health: str
    data_schema: str | None
    error_code: str | None
    occurred_at: datetime
    received_at: datetime
    committed_at: datetime
    duration_ms: int | None
    payload: Any  # JSON: the report's content as the log keeps it


class DedupRecord(NamedTuple):
    """What an event id was answered: a retry with the same content gets ``result`` again."""

    tenant_id: str
    event_id: str
    task_id: str
    payload_hash: str
    result: Any  # JSON: the answer as sent
    created_at: datetime


class ChangeRecord(NamedTuple):
    """The workflow projector's feed entry: insert-only, so task commits never lock the workflow."""

    workflow_id: str
    task_id: str
    task_version: int
    created_at: datetime


class NotificationRecord(NamedTuple):
    """One stored notification for one user."""

    tenant_id: str
    user_id: str
    notification_id: str
    task_id: str
    task_version: int
    notification_type: str
    level: str
    title: str
    message: str | None
    lifecycle_status: str | None
    details: Any  # JSON
    created_at: datetime
    read_at: datetime | None


class CorrectionRecord(NamedTuple):
    """The audit record of an operator's correction: who, why, what moved, and when."""

    tenant_id: str
    correction_id: str
    task_id: str
    task_version: int
    step_id: str | None
    step_attempt: int | None
    operator_id: str
    credential_id: str
    reason: str
    changes: Any  # JSON: [{"field", "old", "new"}]
    created_at: datetime


class ActivityRecord(NamedTuple):
    """The Temporal activity an execution runs as (what the reconciler asks Temporal about)."""

    execution_id: str
    task_id: str
    namespace: str
    workflow_id: str
    run_id: str
    activity_id: str


class HandleRecord(NamedTuple):
    """A fresh execution handle: only its hash is stored (design D3). Written revoked when its
    execution ended in the transaction that handed it out (what rode with the binding ended it)."""

    handle_hash: str
    execution_id: str
    task_id: str
    step_id: str
    step_attempt: int
    producer_id: str
    expires_at: datetime
    created_at: datetime
    revoked_at: datetime | None = None
    revoke_reason: str | None = None


class WorkflowFacts(NamedTuple):
    """What a workflow was created with, beyond its state: the request's fingerprint (a retry with
    other content is a conflict) and its registration policy's document, as stored."""

    request_hash: str | None
    dynamic_registration_policy: PolicyDocument | None


class TaskKeyRow(NamedTuple):
    """A workflow's task found by its client key: what answers a retried request for it."""

    task_id: str
    version: int
    request_hash: str | None


class GrantRow(NamedTuple):
    """A task's grant to one principal as stored: its permission, and when it was revoked (None:
    it holds)."""

    permission: str
    revoked_at: datetime | None


class StoredStatus(NamedTuple):
    """One business status as stored: whose (a tenant's own, or the defaults' "*"), of which task
    type and version."""

    tenant_id: str
    task_type: str
    version: int
    status: StatusDefinition
