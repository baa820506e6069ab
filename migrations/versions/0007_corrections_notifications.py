"""Admin corrections' audit records (task_correction) and durable user notifications
(user_notification, idempotent by user + task + version + type, with shared read state).

Revision ID: 0007_corrections_notifications
Revises: 0006_seed_error_object
Create Date: 2026-11-30 10:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0007_corrections_notifications"
down_revision: str | None = "0006_seed_error_object"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "task_correction",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("correction_id", sa.String(length=128), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("task_version", sa.BigInteger(), nullable=False),
        sa.Column("step_id", sa.String(length=128), nullable=True),
        sa.Column("step_attempt", sa.Integer(), nullable=True),
        sa.Column("operator_id", sa.String(length=64), nullable=False),
        sa.Column("credential_id", sa.String(length=128), nullable=False),
        sa.Column("reason", sa.String(length=500), nullable=False),
        sa.Column("changes", sa.JSON(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "correction_id", name=op.f("pk_task_correction")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    with op.batch_alter_table("task_correction", schema=None) as batch_op:
        batch_op.create_index("task_correction_task_idx", ["task_id", "task_version"], unique=False)

    op.create_table(
        "user_notification",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("notification_id", sa.String(length=200), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("task_version", sa.BigInteger(), nullable=False),
        sa.Column("notification_type", sa.String(length=32), nullable=False),
        sa.Column("level", sa.String(length=16), nullable=False),
        sa.Column("title", sa.String(length=300), nullable=False),
        sa.Column("message", sa.String(length=600), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("read_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", "user_id", "notification_id", name=op.f("pk_user_notification")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    with op.batch_alter_table("user_notification", schema=None) as batch_op:
        batch_op.create_index("user_notification_list_idx", ["tenant_id", "user_id", "created_at"], unique=False)
        batch_op.create_index(
            "user_notification_unread_idx", ["tenant_id", "user_id", "read_at", "created_at"], unique=False
        )


def downgrade() -> None:
    op.drop_table("user_notification")
    op.drop_table("task_correction")
