"""What a change leaves behind: the event log, each event's result for retries, corrections,
notifications, the workflow projector's feed, and how far retention has purged them."""

from __future__ import annotations

import sqlalchemy as sa

from status.infra.tables.base import MYSQL_TABLE_ARGS, BigId, Id, Json, Timestamp, Version, metadata

task_event_log = sa.Table(
    "task_event_log",
    metadata,
    # Event ids are unique per tenant (design D8.1 holds inside a tenant): another tenant's
    # producer can neither take an id first nor read a result through it.
    sa.Column("tenant_id", sa.String(64), primary_key=True),
    sa.Column("event_id", sa.String(128), primary_key=True),
    sa.Column("workflow_id", Id, nullable=False),
    sa.Column("task_id", Id, nullable=False),
    sa.Column("task_version", Version, nullable=False),
    sa.Column("step_id", sa.String(128), nullable=True),
    sa.Column("operation_code", sa.String(128), nullable=True),
    sa.Column("execution_id", Id, nullable=True),
    sa.Column("step_version", Version, nullable=True),
    sa.Column("task_attempt", sa.Integer, nullable=False),
    sa.Column("step_attempt", sa.Integer, nullable=True),
    sa.Column("producer_id", sa.String(128), nullable=False),
    sa.Column("source_seq", Version, nullable=False),
    sa.Column("event_type", sa.String(64), nullable=False),
    sa.Column("lifecycle_status", sa.String(32), nullable=False),
    sa.Column("business_status", sa.String(64), nullable=False),
    sa.Column("health", sa.String(16), nullable=False),
    sa.Column("data_schema", sa.String(128), nullable=True),
    sa.Column("error_code", sa.String(128), nullable=True),
    sa.Column("occurred_at", Timestamp, nullable=False),
    sa.Column("received_at", Timestamp, nullable=False),
    sa.Column("committed_at", Timestamp, nullable=False),
    sa.Column("duration_ms", sa.BigInteger, nullable=True),
    sa.Column("payload", Json, nullable=True),
    sa.UniqueConstraint("task_id", "task_version", name="task_event_version_uk"),
    sa.Index("task_event_timeline_idx", "task_id", "committed_at", "event_id"),
    # Step streams are (task, step, attempt, producer) scoped; task-level events
    # use a NULL step so they never collide with step sequences.
    sa.UniqueConstraint(
        "task_id",
        "step_id",
        "step_attempt",
        "producer_id",
        "source_seq",
        name="task_step_event_seq_uk",
    ),
    sa.Index("task_event_committed_idx", "committed_at"),
    **MYSQL_TABLE_ARGS,
)

task_event_dedup = sa.Table(
    "task_event_dedup",
    metadata,
    sa.Column("tenant_id", sa.String(64), primary_key=True),  # scoped like task_event_log
    sa.Column("event_id", sa.String(128), primary_key=True),
    sa.Column("task_id", Id, nullable=False),
    sa.Column("payload_hash", sa.String(64), nullable=False),
    sa.Column("result", Json, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Index("task_event_task_idx", "task_id", "created_at"),
    sa.Index("task_event_dedup_created_idx", "created_at"),
    **MYSQL_TABLE_ARGS,
)

task_correction = sa.Table(
    "task_correction",
    metadata,
    # The audit record of an admin correction: who, why, what moved from what to what, and when.
    sa.Column("tenant_id", sa.String(64), primary_key=True),
    sa.Column("correction_id", sa.String(128), primary_key=True),
    sa.Column("task_id", Id, nullable=False),
    sa.Column("task_version", Version, nullable=False),
    sa.Column("step_id", sa.String(128), nullable=True),
    sa.Column("step_attempt", sa.Integer, nullable=True),
    sa.Column("operator_id", sa.String(64), nullable=False),
    sa.Column("credential_id", sa.String(128), nullable=False),
    sa.Column("reason", sa.String(500), nullable=False),
    sa.Column("changes", Json, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Index("task_correction_task_idx", "task_id", "task_version"),
    sa.Index("task_correction_created_idx", "created_at"),  # retention
    **MYSQL_TABLE_ARGS,
)

user_notification = sa.Table(
    "user_notification",
    metadata,
    # Durable notices for users who were offline (design D8.13): one per
    # userId + taskId + taskVersion + notificationType, so a retried write never notifies twice;
    # read state lives here, shared by every device of the user.
    sa.Column("tenant_id", sa.String(64), primary_key=True),
    sa.Column("user_id", sa.String(64), primary_key=True),
    sa.Column("notification_id", sa.String(200), primary_key=True),  # taskId:taskVersion:type
    sa.Column("task_id", Id, nullable=False),
    sa.Column("task_version", Version, nullable=False),
    sa.Column("notification_type", sa.String(32), nullable=False),
    sa.Column("level", sa.String(16), nullable=False),
    sa.Column("title", sa.String(300), nullable=False),
    sa.Column("message", sa.String(600), nullable=True),
    # The rest of the live notice (design D8.13): the state it reports, why it ended so, the error
    # code, whether a retry helps, the actions offered; so a reload says what the live page said.
    sa.Column("lifecycle_status", sa.String(32), nullable=True),
    sa.Column("details", Json, nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("read_at", Timestamp, nullable=True),
    sa.Index("user_notification_list_idx", "tenant_id", "user_id", "created_at"),
    sa.Index("user_notification_unread_idx", "tenant_id", "user_id", "read_at", "created_at"),
    sa.Index("user_notification_created_idx", "created_at"),  # retention
    **MYSQL_TABLE_ARGS,
)

# Insert-only feed of committed task changes for the workflow projector (design D8.15):
# task commits append here instead of touching the workflow row, so they never
# contend on it; the projector claims rows with SKIP LOCKED and deletes them.
workflow_change = sa.Table(
    "workflow_change",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("workflow_id", Id, nullable=False),
    sa.Column("task_id", Id, nullable=False),
    sa.Column("task_version", Version, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Index("workflow_change_workflow_idx", "workflow_id", "id"),
    **MYSQL_TABLE_ARGS,
)

# How far each retention purge has gone (status/infra/retention.py): the date of the newest row it
# removed, per purge (a table, or the tasks of one terminal lifecycle).
retention_watermark = sa.Table(
    "retention_watermark",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("position", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    **MYSQL_TABLE_ARGS,
)
