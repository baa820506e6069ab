"""Tasks record the Temporal run that owns them; the run follower's watermark per namespace;
operations may say how long an attempt may run (overdue tasks); the Temporal activity behind each
step attempt.

Revision ID: 0009_temporal_owner
Revises: 0008_step_duration_index
Create Date: 2026-12-01 09:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0009_temporal_owner"
down_revision: str | None = "0008_step_duration_index"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb")


def upgrade() -> None:
    with op.batch_alter_table("task", schema=None) as batch_op:
        batch_op.add_column(sa.Column("temporal_namespace", sa.String(255), nullable=True))
        batch_op.add_column(sa.Column("temporal_workflow_id", sa.String(255), nullable=True))
        batch_op.add_column(sa.Column("temporal_run_id", sa.String(64), nullable=True))
        batch_op.create_index("task_temporal_owner_idx", ["temporal_namespace", "temporal_workflow_id"], unique=False)
    op.create_table(
        "temporal_close_watermark",
        sa.Column("namespace", sa.String(255), nullable=False),
        sa.Column("close_time", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("namespace", name=op.f("pk_temporal_close_watermark")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    with op.batch_alter_table("task_operation_definition", schema=None) as batch_op:
        batch_op.add_column(sa.Column("max_runtime_seconds", sa.Integer(), nullable=True))
    op.create_table(
        "task_step_temporal",
        sa.Column("execution_id", sa.String(64), nullable=False),
        sa.Column("task_id", sa.String(64), nullable=False),
        sa.Column("namespace", sa.String(255), nullable=False),
        sa.Column("workflow_id", sa.String(255), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("activity_id", sa.String(255), nullable=False),
        sa.PrimaryKeyConstraint("execution_id", name=op.f("pk_task_step_temporal")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )


def downgrade() -> None:
    op.drop_table("task_step_temporal")
    with op.batch_alter_table("task_operation_definition", schema=None) as batch_op:
        batch_op.drop_column("max_runtime_seconds")
    op.drop_table("temporal_close_watermark")
    with op.batch_alter_table("task", schema=None) as batch_op:
        batch_op.drop_index("task_temporal_owner_idx")
        batch_op.drop_column("temporal_run_id")
        batch_op.drop_column("temporal_workflow_id")
        batch_op.drop_column("temporal_namespace")
