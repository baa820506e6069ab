"""Workflows, tasks and their step attempts, with what ties an attempt to its Temporal activity."""

from __future__ import annotations

import sqlalchemy as sa

from status.infra.tables.base import MYSQL_TABLE_ARGS, Id, Json, Timestamp, Version, metadata

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
