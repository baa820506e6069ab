"""SQLAlchemy Core tables: the whole schema in one ``MetaData``.

Alembic's ``env.py`` and every store use this module, so the migration
and the code can never disagree about a column.  Types are chosen so the same
definitions work on MySQL 8.0, MariaDB 10.6+ and SQLite (the ``dev`` default):

* timestamps are ``DATETIME(3)`` on MySQL/MariaDB (millisecond precision, UTC);
* identifiers are strings (``tsk_v1_<bucket>_<ULID>`` and friends, design D4);
* version columns are 64-bit; versions travel as decimal strings in JSON.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
    }
)

# Millisecond timestamps on MySQL/MariaDB; SQLite stores ISO text.
Timestamp = sa.DateTime().with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb")
# AUTO_INCREMENT BIGINT on MySQL; SQLite only auto-increments INTEGER PRIMARY KEY.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Json = sa.JSON()
Id = sa.String(64)  # workflowId / taskId / executionId / eventId
Version = sa.BigInteger()

MYSQL_TABLE_ARGS: dict[str, Any] = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
}


workflow = sa.Table(
    "workflow",
    metadata,
    sa.Column("id", Id, primary_key=True),
    sa.Column("tenant_id", sa.String(64), nullable=False),
    sa.Column("owner_id", sa.String(64), nullable=False),
    sa.Column("authority_scope", sa.String(64), nullable=False),
    sa.Column("coordinator_id", sa.String(128), nullable=False),
    sa.Column("client_workflow_key", sa.String(128), nullable=False),
    sa.Column("workflow_type", sa.String(128), nullable=True),
    sa.Column("title", sa.String(255), nullable=False),
    sa.Column("lifecycle_status", sa.String(32), nullable=False),
    sa.Column("health", sa.String(16), nullable=False, server_default="HEALTHY"),
    sa.Column("version", Version, nullable=False, server_default="1"),
    sa.Column("task_count", sa.Integer, nullable=False, server_default="0"),
    # Folded by the workflow projector (design D8.15): counts per lifecycle, progress.
    sa.Column("aggregate", Json, nullable=True),
    sa.Column("dynamic_registration_policy", Json, nullable=True),
    sa.Column("request_hash", sa.String(64), nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("started_at", Timestamp, nullable=True),
    sa.Column("finished_at", Timestamp, nullable=True),
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.UniqueConstraint("tenant_id", "authority_scope", "client_workflow_key", name="workflow_client_key_uk"),
    sa.Index("workflow_owner_updated_idx", "tenant_id", "owner_id", "updated_at", "id"),
    sa.Index("workflow_lifecycle_updated_idx", "lifecycle_status", "updated_at"),  # retention
    **MYSQL_TABLE_ARGS,
)

task = sa.Table(
    "task",
    metadata,
    sa.Column("id", Id, primary_key=True),
    sa.Column("workflow_id", Id, nullable=False),
    sa.Column("client_task_key", sa.String(128), nullable=False),
    sa.Column("tenant_id", sa.String(64), nullable=False),
    sa.Column("owner_id", sa.String(64), nullable=False),
    sa.Column("authority_scope", sa.String(64), nullable=False),
    sa.Column("bucket_id", sa.Integer, nullable=False),
    sa.Column("product_id", sa.String(64), nullable=True),
    sa.Column("task_type", sa.String(128), nullable=True),
    sa.Column("project_id", sa.String(64), nullable=True),
    sa.Column("batch_id", sa.String(64), nullable=True),
    sa.Column("parent_task_id", Id, nullable=True),
    sa.Column("title", sa.String(255), nullable=False),
    sa.Column("lifecycle_status", sa.String(32), nullable=False),
    sa.Column("business_status", sa.String(64), nullable=False),
    sa.Column("status_definition_version", sa.Integer, nullable=True),
    sa.Column("operation_definition_version", sa.Integer, nullable=True),
    sa.Column("attempt", sa.Integer, nullable=False, server_default="1"),
    sa.Column("coordinator_source_seq", Version, nullable=False, server_default="0"),
    sa.Column("version", Version, nullable=False, server_default="1"),
    sa.Column("health", sa.String(16), nullable=False, server_default="HEALTHY"),
    sa.Column("summary_schema", sa.String(128), nullable=True),
    sa.Column("summary_data", Json, nullable=True),
    sa.Column("dynamic_registration_policy", Json, nullable=True),
    sa.Column("dynamic_step_count", sa.Integer, nullable=False, server_default="0"),
    # TASK_FAILED's error object (design D6.1); failure_diagnostics_ref is for operators only.
    sa.Column("failure_code", sa.String(128), nullable=True),
    sa.Column("failure_message", sa.String(512), nullable=True),
    sa.Column("failed_step_id", sa.String(128), nullable=True),
    sa.Column("failure_category", sa.String(64), nullable=True),
    sa.Column("failure_retryable", sa.Boolean, nullable=True),
    sa.Column("failure_diagnostics_ref", sa.String(255), nullable=True),
    sa.Column("request_hash", sa.String(64), nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("started_at", Timestamp, nullable=True),
    sa.Column("finished_at", Timestamp, nullable=True),
    sa.Column("duration_ms", sa.BigInteger, nullable=True),
    sa.Column("updated_at", Timestamp, nullable=False),
    # The Temporal run that owns the task (it created it, or was handed it): when that run closes,
    # Temporal's verdict ends the task (observer/runs.py). No run id: any run of the workflow id.
    sa.Column("temporal_namespace", sa.String(255), nullable=True),
    sa.Column("temporal_workflow_id", sa.String(255), nullable=True),
    sa.Column("temporal_run_id", sa.String(64), nullable=True),
    # Since when Temporal reports the owning run's workflow task failing again and again (the run
    # is open but makes no progress): the task shows it until the run moves again.
    sa.Column("workflow_stuck_since", Timestamp, nullable=True),
    # The user-safe reason its ending came with (an operator's stop, a timeout's length).
    sa.Column("end_reason", sa.String(512), nullable=True),
    # Until when someone may follow the task's detail channel (a detail grant's expiry and a
    # margin; status/app/watching.py): a change after it writes no detail message. Not part of
    # the task's state: written without a version, under the row lock. A new task: never
    # followed (status.domain.watching.NEVER_FOLLOWED); NULL: a row from before it was kept.
    sa.Column("detail_watched_until", Timestamp, nullable=True, server_default=sa.text("'1970-01-01 00:00:01'")),
    sa.UniqueConstraint("workflow_id", "client_task_key", name="task_workflow_client_key_uk"),
    sa.Index("task_workflow_updated_idx", "workflow_id", "updated_at", "id"),
    sa.Index("task_owner_updated_idx", "tenant_id", "owner_id", "updated_at", "id"),
    sa.Index("task_owner_created_idx", "tenant_id", "owner_id", "created_at", "id"),  # the user's list
    sa.Index("task_batch_idx", "tenant_id", "batch_id", "created_at", "id"),
    sa.Index("task_parent_idx", "tenant_id", "parent_task_id", "created_at", "id"),
    sa.Index("task_lifecycle_updated_idx", "lifecycle_status", "updated_at"),
    sa.Index("task_temporal_owner_idx", "temporal_namespace", "temporal_workflow_id"),
    sa.Index("task_stuck_idx", "workflow_stuck_since"),
    **MYSQL_TABLE_ARGS,
)

# The Temporal activity behind a step attempt (sent by the plugin when it binds the execution):
# before a silent attempt goes STALE, the reconciler asks Temporal whether it is still pending.
task_step_temporal = sa.Table(
    "task_step_temporal",
    metadata,
    sa.Column("execution_id", Id, primary_key=True),
    sa.Column("task_id", Id, nullable=False),
    sa.Column("namespace", sa.String(255), nullable=False),
    sa.Column("workflow_id", sa.String(255), nullable=False),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("activity_id", sa.String(255), nullable=False),
    # Its worker said the activity completes elsewhere (through its task token): no heartbeat is
    # due any more; the observer asks Temporal at next_check_at how it ended (backing off).
    sa.Column("completes_elsewhere_at", Timestamp, nullable=True),
    sa.Column("next_check_at", Timestamp, nullable=True),
    sa.Index("task_step_temporal_check_idx", "next_check_at"),
    **MYSQL_TABLE_ARGS,
)

# How far the run follower has read each namespace's closed runs (by CloseTime): a restarted or
# second observer goes on from here instead of from the beginning of visibility.
temporal_close_watermark = sa.Table(
    "temporal_close_watermark",
    metadata,
    sa.Column("namespace", sa.String(255), primary_key=True),
    sa.Column("close_time", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    **MYSQL_TABLE_ARGS,
)

task_step = sa.Table(
    "task_step",
    metadata,
    sa.Column("task_id", Id, sa.ForeignKey("task.id", name="task_step_task_fk"), primary_key=True),
    sa.Column("step_id", sa.String(128), primary_key=True),
    sa.Column("attempt", sa.Integer, primary_key=True),
    sa.Column("client_step_key", sa.String(128), nullable=False),
    sa.Column("step_kind", sa.String(16), nullable=False, server_default="KNOWN"),  # KNOWN | DYNAMIC
    sa.Column("display_name", sa.String(128), nullable=True),
    sa.Column("step_order", sa.Integer, nullable=False, server_default="0"),
    sa.Column("parent_execution_id", Id, nullable=True),
    sa.Column("depth", sa.Integer, nullable=False, server_default="0"),
    sa.Column("operation_code", sa.String(128), nullable=False),
    sa.Column("operation_definition_version", sa.Integer, nullable=False),
    sa.Column("service_name", sa.String(128), nullable=False),
    sa.Column("producer_id", sa.String(128), nullable=True),
    sa.Column("execution_id", Id, nullable=True),
    # Set when a newer attempt of the same step is activated: late events of
    # this attempt are STALE_ATTEMPT without a MAX(attempt) query.
    sa.Column("superseded", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("failure_policy", sa.String(32), nullable=True),
    sa.Column("source_seq", Version, nullable=False, server_default="0"),
    sa.Column("version", Version, nullable=False, server_default="1"),
    sa.Column("lifecycle_status", sa.String(32), nullable=False),
    sa.Column("business_status", sa.String(64), nullable=False),
    sa.Column("health", sa.String(16), nullable=False, server_default="HEALTHY"),
    sa.Column("heartbeat_interval_seconds", sa.SmallInteger, nullable=True),
    sa.Column("heartbeat_timeout_seconds", sa.Integer, nullable=True),  # up to 86,400 (the contract)
    sa.Column("last_heartbeat_seq", Version, nullable=False, server_default="0"),
    sa.Column("last_heartbeat_at", Timestamp, nullable=True),
    # last_heartbeat_at + timeout, kept so the reconciler scan is an index range (design D8.6).
    sa.Column("heartbeat_deadline_at", Timestamp, nullable=True),
    sa.Column("stale_since", Timestamp, nullable=True),
    sa.Column("progress_current", sa.Float, nullable=True),
    sa.Column("progress_total", sa.Float, nullable=True),
    sa.Column("progress_unit", sa.String(32), nullable=True),
    sa.Column("phase_code", sa.String(64), nullable=True),
    sa.Column("phase_label", sa.String(128), nullable=True),
    sa.Column("data_schema", sa.String(128), nullable=True),
    sa.Column("state_data", Json, nullable=True),
    sa.Column("activated_at", Timestamp, nullable=True),
    sa.Column("started_at", Timestamp, nullable=True),
    sa.Column("finished_at", Timestamp, nullable=True),
    sa.Column("duration_ms", sa.BigInteger, nullable=True),
    sa.Column("error_category", sa.String(64), nullable=True),
    sa.Column("error_code", sa.String(128), nullable=True),
    sa.Column("error_message", sa.Text, nullable=True),
    sa.Column("error_retryable", sa.Boolean, nullable=True),
    sa.Column("diagnostics_ref", sa.String(255), nullable=True),
    sa.Column("updated_at", Timestamp, nullable=False),
    # The Temporal activity (a digest of namespace, workflow id, run id, activity id) and Temporal's
    # attempt number this step attempt ran as: the next activation is placed by them.
    sa.Column("temporal_activity", sa.String(32), nullable=True),
    sa.Column("temporal_attempt", sa.Integer, nullable=True),
    sa.UniqueConstraint("task_id", "client_step_key", "attempt", name="task_step_client_key_uk"),
    sa.UniqueConstraint("execution_id", name="task_step_execution_uk"),
    sa.Index("task_step_heartbeat_idx", "lifecycle_status", "health", "heartbeat_deadline_at"),
    # ETA history: the newest successes of an operation (status.app.durations).
    sa.Index("task_step_duration_idx", "operation_code", "lifecycle_status", "finished_at"),
    **MYSQL_TABLE_ARGS,
)

task_execution_handle = sa.Table(
    "task_execution_handle",
    metadata,
    # SHA-256 of the opaque handle; the handle itself is never stored (design D3).
    sa.Column("handle_hash", sa.String(64), primary_key=True),
    sa.Column("execution_id", Id, nullable=False),
    sa.Column("task_id", Id, nullable=False),
    sa.Column("step_id", sa.String(128), nullable=False),
    sa.Column("step_attempt", sa.Integer, nullable=False),
    sa.Column("producer_id", sa.String(128), nullable=False),
    sa.Column("expires_at", Timestamp, nullable=False),
    sa.Column("revoked_at", Timestamp, nullable=True),
    sa.Column("revoke_reason", sa.String(64), nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Index("task_execution_handle_execution_idx", "execution_id"),
    **MYSQL_TABLE_ARGS,
)

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

task_outbox = sa.Table(
    "task_outbox",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("aggregate_type", sa.String(16), nullable=False),  # WORKFLOW | TASK
    sa.Column("aggregate_id", Id, nullable=False),
    sa.Column("aggregate_version", Version, nullable=False),
    sa.Column("channel", sa.String(255), nullable=False),
    sa.Column("projection", sa.String(32), nullable=False),
    # Marks messages the relay must never coalesce away (design D8.14): terminal, new
    # task, new attempt, removal, notice.
    sa.Column("must_deliver", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("event_id", sa.String(128), nullable=True),
    # A change's messages (status.infra.outbox_rows): compressed text since revision 0020; the
    # JSON column holds rows written before it, and nothing newer.
    sa.Column("payload", Json, nullable=True),
    sa.Column("payload_zstd", sa.Text().with_variant(mysql.LONGTEXT(charset="ascii"), "mysql", "mariadb")),
    sa.Column("status", sa.String(16), nullable=False, server_default="PENDING"),
    sa.Column("available_at", Timestamp, nullable=False),
    sa.Column("locked_by", sa.String(128), nullable=True),
    sa.Column("locked_at", Timestamp, nullable=True),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("last_error", sa.String(1024), nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("published_at", Timestamp, nullable=True),
    # Centrifugo's idempotency key for this row: random, written with the row. An id
    # derived from the auto-increment counter repeats after a restore, a failover to
    # a lagging replica or a re-created database, and Centrifugo would silently drop
    # the new publication as a duplicate of an old one for minutes.
    sa.Column("publish_key", sa.String(32), nullable=False),
    # crc32(channel) mod OUTBOX_PARTITIONS: one relay at a time owns a partition
    # (outbox_partition), so every home channel's rows are published in commit order.
    sa.Column("partition_no", sa.SmallInteger, nullable=False, server_default="0"),
    sa.UniqueConstraint(
        "aggregate_type",
        "aggregate_id",
        "aggregate_version",
        "channel",
        "projection",
        name="outbox_aggregate_version_channel_uk",
    ),
    # Claims scan PENDING rows in id order and stop after LIMIT rows; with
    # (status, available_at, id) the ORDER BY id needs a filesort that locks
    # every pending row and defeats SKIP LOCKED for concurrent relays.
    sa.Index("outbox_claim_idx", "status", "id"),
    # A relay claims each of its partitions in id order within that partition's own range.
    sa.Index("outbox_partition_claim_idx", "status", "partition_no", "id"),
    sa.Index("outbox_event_idx", "event_id"),
    **MYSQL_TABLE_ARGS,
)

# Which relay publishes which outbox partition, under a lease renewed while it lives.
outbox_partition = sa.Table(
    "outbox_partition",
    metadata,
    sa.Column("partition_no", sa.SmallInteger, primary_key=True, autoincrement=False),
    sa.Column("relay_id", sa.String(128), nullable=True),
    sa.Column("lease_until", Timestamp, nullable=True),
    **MYSQL_TABLE_ARGS,
)

# Live relays (each renews its row with its partition leases), so that a relay
# holding no partition yet still counts when the others compute their fair share,
# and the UDP address where each takes wake-ups from API processes.
outbox_relay = sa.Table(
    "outbox_relay",
    metadata,
    sa.Column("relay_id", sa.String(128), primary_key=True),
    sa.Column("alive_until", Timestamp, nullable=False),
    sa.Column("wake_address", sa.String(255), nullable=True),
    sa.Index("outbox_relay_alive_idx", "alive_until"),
    **MYSQL_TABLE_ARGS,
)


# Service credentials revoked before their expiry, by ``jti`` (read by every API
# process every few seconds; kept until the credential would have expired anyway).
revoked_credential = sa.Table(
    "revoked_credential",
    metadata,
    sa.Column("jti", sa.String(64), primary_key=True),
    sa.Column("revoked_at", Timestamp, nullable=False),
    sa.Column("expires_at", Timestamp, nullable=True),
    sa.Column("reason", sa.String(255), nullable=True),
    **MYSQL_TABLE_ARGS,
)

task_acl = sa.Table(
    "task_acl",
    metadata,
    sa.Column("task_id", Id, sa.ForeignKey("task.id", name="task_acl_task_fk"), primary_key=True),
    sa.Column("principal_type", sa.String(16), primary_key=True),  # USER | PROJECT | ROLE
    sa.Column("principal_id", sa.String(64), primary_key=True),
    sa.Column("tenant_id", sa.String(64), nullable=False),
    sa.Column("permission", sa.String(16), nullable=False),  # VIEW | OPERATE | ADMIN
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("revoked_at", Timestamp, nullable=True),
    sa.Index(
        "task_acl_principal_idx",
        "tenant_id",
        "principal_type",
        "principal_id",
        "revoked_at",
        "task_id",
    ),
    **MYSQL_TABLE_ARGS,
)

task_external_ref = sa.Table(
    "task_external_ref",
    metadata,
    sa.Column("tenant_id", sa.String(64), primary_key=True),
    sa.Column("authority_scope", sa.String(64), primary_key=True),
    sa.Column("ref_type", sa.String(64), primary_key=True),
    # SHA-256 of the value's UTF-8 bytes: references are exact strings, and MySQL's collations
    # pad spaces ("SO-x " = "SO-x"); the value itself is kept beside it.
    sa.Column("ref_hash", sa.String(64), primary_key=True),
    sa.Column("ref_value", sa.String(255), nullable=False),
    sa.Column("task_id", Id, sa.ForeignKey("task.id", name="task_external_ref_task_fk"), nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Index("task_external_ref_task_idx", "task_id"),
    **MYSQL_TABLE_ARGS,
)

external_ref_claim = sa.Table(
    "external_ref_claim",
    metadata,
    # With shards, the bucket an external reference was claimed for (in the control store): a
    # reference is unique per tenant and scope across shards, not only within one.
    sa.Column("tenant_id", sa.String(64), primary_key=True),
    sa.Column("authority_scope", sa.String(64), primary_key=True),
    sa.Column("ref_type", sa.String(64), primary_key=True),
    sa.Column("ref_hash", sa.String(64), primary_key=True),
    sa.Column("bucket_id", sa.SmallInteger, nullable=False),
    sa.Column("claimed_at", Timestamp, nullable=False),
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

task_status_definition = sa.Table(
    "task_status_definition",
    metadata,
    sa.Column("tenant_id", sa.String(64), primary_key=True),
    sa.Column("authority_scope", sa.String(64), primary_key=True),
    sa.Column("task_type", sa.String(128), primary_key=True),
    sa.Column("definition_version", sa.Integer, primary_key=True),
    sa.Column("code", sa.String(64), primary_key=True),
    sa.Column("display_name", sa.String(128), nullable=False),
    sa.Column("lifecycle_status", sa.String(32), nullable=False),
    sa.Column("terminal", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("severity", sa.String(16), nullable=False, server_default="INFO"),
    sa.Column("sort_order", sa.Integer, nullable=False, server_default="0"),
    sa.Column("presentation", Json, nullable=True),
    sa.Column("allowed_from", Json, nullable=False),
    sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.true()),
    # Set once a task binds this version; a frozen definition never changes (design P16).
    sa.Column("frozen_at", Timestamp, nullable=True),
    **MYSQL_TABLE_ARGS,
)

task_operation_definition = sa.Table(
    "task_operation_definition",
    metadata,
    sa.Column("tenant_id", sa.String(64), primary_key=True),
    sa.Column("authority_scope", sa.String(64), primary_key=True),
    sa.Column("task_type_pattern", sa.String(128), primary_key=True, server_default="*"),
    sa.Column("definition_version", sa.Integer, primary_key=True),
    sa.Column("operation_code", sa.String(128), primary_key=True),
    sa.Column("display_name", sa.String(128), nullable=False),
    sa.Column("producer_pattern", sa.String(255), nullable=False),
    sa.Column("allowed_event_types", Json, nullable=False),
    sa.Column("allowed_data_schemas", Json, nullable=False),
    # JSON Schema documents keyed by schema id, validated with ``jsonschema``.
    sa.Column("data_schema_documents", Json, nullable=True),
    sa.Column("failure_policy", sa.String(32), nullable=False),
    sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.true()),
    sa.Column("frozen_at", Timestamp, nullable=True),
    # How long one attempt may run before operators see its task as overdue (None: the default).
    sa.Column("max_runtime_seconds", sa.Integer, nullable=True),
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

# Detail/workflow subscriptions granted to a realtime session: the server-side
# limit (DETAIL_SUBSCRIPTION_LIMIT) counts unexpired rows per session.
realtime_grant = sa.Table(
    "realtime_grant",
    metadata,
    sa.Column("session_id", sa.String(128), primary_key=True),
    sa.Column("channel", sa.String(255), primary_key=True),
    sa.Column("tenant_id", sa.String(64), nullable=False),
    sa.Column("user_id", sa.String(64), nullable=False),
    sa.Column("expires_at", Timestamp, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Index("realtime_grant_expiry_idx", "expires_at"),
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


# Sharding (design D14.2; docs/architecture.md, "Shards: the engine"). The bucket map lives in
# the control store (the one database of a single-database install): one route per virtual
# bucket, each with its own epoch, raised whenever the bucket changes shards, and one row naming
# the map's version, raised in the same transaction as any route change, so an API process
# re-reads the 4096 routes only when the version moved. No rows: every bucket is on the one
# database (nothing is routed, nothing fenced).
shard_map = sa.Table(
    "shard_map",
    metadata,
    sa.Column("id", sa.SmallInteger, primary_key=True, autoincrement=False),  # always 1
    sa.Column("version", Version, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    **MYSQL_TABLE_ARGS,
)

shard_bucket_route = sa.Table(
    "shard_bucket_route",
    metadata,
    sa.Column("bucket_id", sa.SmallInteger, primary_key=True, autoincrement=False),
    sa.Column("route_epoch", Version, nullable=False),
    sa.Column("physical_shard", sa.String(64), nullable=False),  # a shard's name, never its address
    sa.Column("route_state", sa.String(16), nullable=False),  # ACTIVE, COPYING, CUTOVER
    sa.Column("target_shard", sa.String(64), nullable=True),  # while the bucket moves
    sa.Column("fenced_at", Timestamp, nullable=True),
    sa.Column("updated_at", Timestamp, nullable=False),
    **MYSQL_TABLE_ARGS,
)

# On every shard: which buckets this shard may write, and under which epoch. Every write
# transaction of a sharded install reads its buckets' rows FOR SHARE and holds the lock to its
# commit; a move takes the row FOR UPDATE to fence it, so it waits for the writes already
# under way and every later write (from a process with an old map too) is refused.
bucket_write_fence = sa.Table(
    "bucket_write_fence",
    metadata,
    sa.Column("bucket_id", sa.SmallInteger, primary_key=True, autoincrement=False),
    sa.Column("route_epoch", Version, nullable=False),
    sa.Column("writable", sa.Boolean, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    **MYSQL_TABLE_ARGS,
)
