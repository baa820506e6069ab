"""Workflow change feed (projector, design D8.15) and realtime grants (detail subscription limit).

Revision ID: 0002_feeds
Revises: 0001_initial
Create Date: 2026-11-29 23:09:23.407770
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0002_feeds"
down_revision: str | None = "0001_initial"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "realtime_grant",
        sa.Column("session_id", sa.String(length=128), nullable=False),
        sa.Column("channel", sa.String(length=255), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("expires_at", TIMESTAMP, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("session_id", "channel", name=op.f("pk_realtime_grant")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    with op.batch_alter_table("realtime_grant", schema=None) as batch_op:
        batch_op.create_index("realtime_grant_expiry_idx", ["expires_at"], unique=False)

    op.create_table(
        "workflow_change",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("workflow_id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("task_version", sa.BigInteger(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workflow_change")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    with op.batch_alter_table("workflow_change", schema=None) as batch_op:
        batch_op.create_index("workflow_change_workflow_idx", ["workflow_id", "id"], unique=False)


def downgrade() -> None:
    op.drop_table("workflow_change")
    op.drop_table("realtime_grant")
