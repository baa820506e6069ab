"""Initial schema: every table of design D5 (with the definitions of D5.1).

Revision ID: 0001_initial
Revises:
Create Date: 2026-11-29 22:27:39.039429
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0001_initial"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Millisecond UTC timestamps on MySQL/MariaDB (SQLite stores ISO text).
TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "task",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("workflow_id", sa.String(length=64), nullable=False),
        sa.Column("client_task_key", sa.String(length=128), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("owner_id", sa.String(length=64), nullable=False),
        sa.Column("authority_scope", sa.String(length=64), nullable=False),
        sa.Column("bucket_id", sa.Integer(), nullable=False),
        sa.Column("product_id", sa.String(length=64), nullable=True),
        sa.Column("task_type", sa.String(length=128), nullable=True),
        sa.Column("project_id", sa.String(length=64), nullable=True),
        sa.Column("batch_id", sa.String(length=64), nullable=True),
        sa.Column("parent_task_id", sa.String(length=64), nullable=True),
        sa.Column("title", sa.String(length=255), nullable=False),
        sa.Column("lifecycle_status", sa.String(length=32), nullable=False),
        sa.Column("business_status", sa.String(length=64), nullable=False),
        sa.Column("status_definition_version", sa.Integer(), nullable=True),
        sa.Column("operation_definition_version", sa.Integer(), nullable=True),
        sa.Column("attempt", sa.Integer(), server_default="1", nullable=False),
        sa.Column("coordinator_source_seq", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("version", sa.BigInteger(), server_default="1", nullable=False),
        sa.Column("health", sa.String(length=16), server_default="HEALTHY", nullable=False),
        sa.Column("summary_schema", sa.String(length=128), nullable=True),
        sa.Column("summary_data", sa.JSON(), nullable=True),
        sa.Column("dynamic_registration_policy", sa.JSON(), nullable=True),
        sa.Column("dynamic_step_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("failure_code", sa.String(length=128), nullable=True),
        sa.Column("failure_message", sa.String(length=512), nullable=True),
        sa.Column("failed_step_id", sa.String(length=128), nullable=True),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("started_at", TIMESTAMP, nullable=True),
        sa.Column("finished_at", TIMESTAMP, nullable=True),
        sa.Column("duration_ms", sa.BigInteger(), nullable=True),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task")),
        sa.UniqueConstraint("workflow_id", "client_task_key", name="task_workflow_client_key_uk"),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    with op.batch_alter_table("task", schema=None) as batch_op:
        batch_op.create_index("task_batch_idx", ["tenant_id", "batch_id", "created_at", "id"], unique=False)
        batch_op.create_index("task_lifecycle_updated_idx", ["lifecycle_status", "updated_at"], unique=False)
        batch_op.create_index("task_owner_updated_idx", ["tenant_id", "owner_id", "updated_at", "id"], unique=False)
        batch_op.create_index("task_parent_idx", ["tenant_id", "parent_task_id", "created_at", "id"], unique=False)
        batch_op.create_index("task_workflow_updated_idx", ["workflow_id", "updated_at", "id"], unique=False)

    op.create_table(
        "task_event_dedup",
        sa.Column("event_id", sa.String(length=128), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("payload_hash", sa.String(length=64), nullable=False),
        sa.Column("result", sa.JSON(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("event_id", name=op.f("pk_task_event_dedup")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    with op.batch_alter_table("task_event_dedup", schema=None) as batch_op:
        batch_op.create_index("task_event_dedup_created_idx", ["created_at"], unique=False)
        batch_op.create_index("task_event_task_idx", ["task_id", "created_at"], unique=False)

    op.create_table(
        "task_event_log",
        sa.Column("event_id", sa.String(length=128), nullable=False),
        sa.Column("workflow_id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("task_version", sa.BigInteger(), nullable=False),
        sa.Column("step_id", sa.String(length=128), nullable=True),
        sa.Column("operation_code", sa.String(length=128), nullable=True),
        sa.Column("execution_id", sa.String(length=64), nullable=True),
        sa.Column("step_version", sa.BigInteger(), nullable=True),
        sa.Column("task_attempt", sa.Integer(), nullable=False),
        sa.Column("step_attempt", sa.Integer(), nullable=True),
        sa.Column("producer_id", sa.String(length=128), nullable=False),
        sa.Column("source_seq", sa.BigInteger(), nullable=False),
        sa.Column("event_type", sa.String(length=64), nullable=False),
        sa.Column("lifecycle_status", sa.String(length=32), nullable=False),
        sa.Column("business_status", sa.String(length=64), nullable=False),
        sa.Column("health", sa.String(length=16), nullable=False),
        sa.Column("data_schema", sa.String(length=128), nullable=True),
        sa.Column("error_code", sa.String(length=128), nullable=True),
        sa.Column("occurred_at", TIMESTAMP, nullable=False),
        sa.Column("received_at", TIMESTAMP, nullable=False),
        sa.Column("committed_at", TIMESTAMP, nullable=False),
        sa.Column("duration_ms", sa.BigInteger(), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("event_id", name=op.f("pk_task_event_log")),
        sa.UniqueConstraint(
            "task_id",
            "step_id",
            "step_attempt",
            "producer_id",
            "source_seq",
            name="task_step_event_seq_uk",
        ),
        sa.UniqueConstraint("task_id", "task_version", name="task_event_version_uk"),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    with op.batch_alter_table("task_event_log", schema=None) as batch_op:
        batch_op.create_index("task_event_committed_idx", ["committed_at"], unique=False)
        batch_op.create_index("task_event_timeline_idx", ["task_id", "committed_at", "event_id"], unique=False)

    op.create_table(
        "task_execution_handle",
        sa.Column("handle_hash", sa.String(length=64), nullable=False),
        sa.Column("execution_id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("step_id", sa.String(length=128), nullable=False),
        sa.Column("step_attempt", sa.Integer(), nullable=False),
        sa.Column("producer_id", sa.String(length=128), nullable=False),
        sa.Column("expires_at", TIMESTAMP, nullable=False),
        sa.Column("revoked_at", TIMESTAMP, nullable=True),
        sa.Column("revoke_reason", sa.String(length=64), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("handle_hash", name=op.f("pk_task_execution_handle")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    with op.batch_alter_table("task_execution_handle", schema=None) as batch_op:
        batch_op.create_index("task_execution_handle_execution_idx", ["execution_id"], unique=False)

    op.create_table(
        "task_operation_definition",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("authority_scope", sa.String(length=64), nullable=False),
        sa.Column("task_type_pattern", sa.String(length=128), server_default="*", nullable=False),
        sa.Column("definition_version", sa.Integer(), nullable=False),
        sa.Column("operation_code", sa.String(length=128), nullable=False),
        sa.Column("display_name", sa.String(length=128), nullable=False),
        sa.Column("producer_pattern", sa.String(length=255), nullable=False),
        sa.Column("allowed_event_types", sa.JSON(), nullable=False),
        sa.Column("allowed_data_schemas", sa.JSON(), nullable=False),
        sa.Column("data_schema_documents", sa.JSON(), nullable=True),
        sa.Column("failure_policy", sa.String(length=32), nullable=False),
        sa.Column("enabled", sa.Boolean(), server_default=sa.text("1"), nullable=False),
        sa.Column("frozen_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint(
            "tenant_id",
            "authority_scope",
            "task_type_pattern",
            "definition_version",
            "operation_code",
            name=op.f("pk_task_operation_definition"),
        ),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    op.create_table(
        "task_outbox",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("aggregate_type", sa.String(length=16), nullable=False),
        sa.Column("aggregate_id", sa.String(length=64), nullable=False),
        sa.Column("aggregate_version", sa.BigInteger(), nullable=False),
        sa.Column("channel", sa.String(length=255), nullable=False),
        sa.Column("projection", sa.String(length=32), nullable=False),
        sa.Column("must_deliver", sa.Boolean(), server_default=sa.text("0"), nullable=False),
        sa.Column("event_id", sa.String(length=128), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), server_default="PENDING", nullable=False),
        sa.Column("available_at", TIMESTAMP, nullable=False),
        sa.Column("locked_by", sa.String(length=128), nullable=True),
        sa.Column("locked_at", TIMESTAMP, nullable=True),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("last_error", sa.String(length=1024), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("published_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_outbox")),
        sa.UniqueConstraint(
            "aggregate_type",
            "aggregate_id",
            "aggregate_version",
            "channel",
            "projection",
            name="outbox_aggregate_version_channel_uk",
        ),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    with op.batch_alter_table("task_outbox", schema=None) as batch_op:
        batch_op.create_index("outbox_claim_idx", ["status", "id"], unique=False)
        batch_op.create_index("outbox_event_idx", ["event_id"], unique=False)
        batch_op.create_index("outbox_lock_timeout_idx", ["status", "locked_at"], unique=False)

    op.create_table(
        "task_status_definition",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("authority_scope", sa.String(length=64), nullable=False),
        sa.Column("task_type", sa.String(length=128), nullable=False),
        sa.Column("definition_version", sa.Integer(), nullable=False),
        sa.Column("code", sa.String(length=64), nullable=False),
        sa.Column("display_name", sa.String(length=128), nullable=False),
        sa.Column("lifecycle_status", sa.String(length=32), nullable=False),
        sa.Column("terminal", sa.Boolean(), server_default=sa.text("0"), nullable=False),
        sa.Column("severity", sa.String(length=16), server_default="INFO", nullable=False),
        sa.Column("sort_order", sa.Integer(), server_default="0", nullable=False),
        sa.Column("presentation", sa.JSON(), nullable=True),
        sa.Column("allowed_from", sa.JSON(), nullable=False),
        sa.Column("enabled", sa.Boolean(), server_default=sa.text("1"), nullable=False),
        sa.Column("frozen_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint(
            "tenant_id",
            "authority_scope",
            "task_type",
            "definition_version",
            "code",
            name=op.f("pk_task_status_definition"),
        ),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    op.create_table(
        "workflow",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("owner_id", sa.String(length=64), nullable=False),
        sa.Column("authority_scope", sa.String(length=64), nullable=False),
        sa.Column("coordinator_id", sa.String(length=128), nullable=False),
        sa.Column("client_workflow_key", sa.String(length=128), nullable=False),
        sa.Column("workflow_type", sa.String(length=128), nullable=True),
        sa.Column("title", sa.String(length=255), nullable=False),
        sa.Column("lifecycle_status", sa.String(length=32), nullable=False),
        sa.Column("health", sa.String(length=16), server_default="HEALTHY", nullable=False),
        sa.Column("version", sa.BigInteger(), server_default="1", nullable=False),
        sa.Column("task_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("aggregate", sa.JSON(), nullable=True),
        sa.Column("dynamic_registration_policy", sa.JSON(), nullable=True),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("started_at", TIMESTAMP, nullable=True),
        sa.Column("finished_at", TIMESTAMP, nullable=True),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workflow")),
        sa.UniqueConstraint("tenant_id", "authority_scope", "client_workflow_key", name="workflow_client_key_uk"),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    with op.batch_alter_table("workflow", schema=None) as batch_op:
        batch_op.create_index(
            "workflow_owner_updated_idx",
            ["tenant_id", "owner_id", "updated_at", "id"],
            unique=False,
        )

    op.create_table(
        "task_acl",
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("principal_type", sa.String(length=16), nullable=False),
        sa.Column("principal_id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("permission", sa.String(length=16), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("revoked_at", TIMESTAMP, nullable=True),
        sa.ForeignKeyConstraint(["task_id"], ["task.id"], name="task_acl_task_fk"),
        sa.PrimaryKeyConstraint("task_id", "principal_type", "principal_id", name=op.f("pk_task_acl")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    with op.batch_alter_table("task_acl", schema=None) as batch_op:
        batch_op.create_index(
            "task_acl_principal_idx",
            ["tenant_id", "principal_type", "principal_id", "revoked_at", "task_id"],
            unique=False,
        )

    op.create_table(
        "task_external_ref",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("authority_scope", sa.String(length=64), nullable=False),
        sa.Column("ref_type", sa.String(length=64), nullable=False),
        sa.Column("ref_value", sa.String(length=255), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["task.id"], name="task_external_ref_task_fk"),
        sa.PrimaryKeyConstraint(
            "tenant_id",
            "authority_scope",
            "ref_type",
            "ref_value",
            name=op.f("pk_task_external_ref"),
        ),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    with op.batch_alter_table("task_external_ref", schema=None) as batch_op:
        batch_op.create_index("task_external_ref_task_idx", ["task_id"], unique=False)

    op.create_table(
        "task_step",
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("step_id", sa.String(length=128), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("client_step_key", sa.String(length=128), nullable=False),
        sa.Column("step_kind", sa.String(length=16), server_default="KNOWN", nullable=False),
        sa.Column("display_name", sa.String(length=128), nullable=True),
        sa.Column("step_order", sa.Integer(), server_default="0", nullable=False),
        sa.Column("parent_execution_id", sa.String(length=64), nullable=True),
        sa.Column("depth", sa.Integer(), server_default="0", nullable=False),
        sa.Column("operation_code", sa.String(length=128), nullable=False),
        sa.Column("operation_definition_version", sa.Integer(), nullable=False),
        sa.Column("service_name", sa.String(length=128), nullable=False),
        sa.Column("producer_id", sa.String(length=128), nullable=True),
        sa.Column("execution_id", sa.String(length=64), nullable=True),
        sa.Column("superseded", sa.Boolean(), server_default=sa.text("0"), nullable=False),
        sa.Column("failure_policy", sa.String(length=32), nullable=True),
        sa.Column("source_seq", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("version", sa.BigInteger(), server_default="1", nullable=False),
        sa.Column("lifecycle_status", sa.String(length=32), nullable=False),
        sa.Column("business_status", sa.String(length=64), nullable=False),
        sa.Column("health", sa.String(length=16), server_default="HEALTHY", nullable=False),
        sa.Column("heartbeat_interval_seconds", sa.SmallInteger(), nullable=True),
        sa.Column("heartbeat_timeout_seconds", sa.SmallInteger(), nullable=True),
        sa.Column("last_heartbeat_seq", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("last_heartbeat_at", TIMESTAMP, nullable=True),
        sa.Column("heartbeat_deadline_at", TIMESTAMP, nullable=True),
        sa.Column("stale_since", TIMESTAMP, nullable=True),
        sa.Column("progress_current", sa.Float(), nullable=True),
        sa.Column("progress_total", sa.Float(), nullable=True),
        sa.Column("progress_unit", sa.String(length=32), nullable=True),
        sa.Column("phase_code", sa.String(length=64), nullable=True),
        sa.Column("phase_label", sa.String(length=128), nullable=True),
        sa.Column("data_schema", sa.String(length=128), nullable=True),
        sa.Column("state_data", sa.JSON(), nullable=True),
        sa.Column("activated_at", TIMESTAMP, nullable=True),
        sa.Column("started_at", TIMESTAMP, nullable=True),
        sa.Column("finished_at", TIMESTAMP, nullable=True),
        sa.Column("duration_ms", sa.BigInteger(), nullable=True),
        sa.Column("error_category", sa.String(length=64), nullable=True),
        sa.Column("error_code", sa.String(length=128), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("error_retryable", sa.Boolean(), nullable=True),
        sa.Column("diagnostics_ref", sa.String(length=255), nullable=True),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["task.id"], name="task_step_task_fk"),
        sa.PrimaryKeyConstraint("task_id", "step_id", "attempt", name=op.f("pk_task_step")),
        sa.UniqueConstraint("execution_id", name="task_step_execution_uk"),
        sa.UniqueConstraint("task_id", "client_step_key", "attempt", name="task_step_client_key_uk"),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    with op.batch_alter_table("task_step", schema=None) as batch_op:
        batch_op.create_index(
            "task_step_heartbeat_idx",
            ["lifecycle_status", "health", "heartbeat_deadline_at"],
            unique=False,
        )


def downgrade() -> None:
    # Dropping a table drops its indexes; dropping indexes first fails on MySQL
    # for indexes that back a foreign key.
    op.drop_table("task_step")
    op.drop_table("task_external_ref")
    op.drop_table("task_acl")
    op.drop_table("workflow")
    op.drop_table("task_status_definition")
    op.drop_table("task_outbox")
    op.drop_table("task_operation_definition")
    op.drop_table("task_execution_handle")
    op.drop_table("task_event_log")
    op.drop_table("task_event_dedup")
    op.drop_table("task")
