"""Retention with watermarks: where each purge has got to, and the indexes that date its rows.

Revision ID: 0011_retention
Revises: 0010_exact_external_refs
Create Date: 2026-12-01 14:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0011_retention"
down_revision: str | None = "0010_exact_external_refs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb")

# Each purge reads its table in date order (status/infra/retention.py).
INDEXES = [
    ("workflow", "workflow_lifecycle_updated_idx", ["lifecycle_status", "updated_at"]),
    ("task_correction", "task_correction_created_idx", ["created_at"]),
    ("user_notification", "user_notification_created_idx", ["created_at"]),
]


def upgrade() -> None:
    op.create_table(
        "retention_watermark",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("position", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_retention_watermark")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    for table, index, columns in INDEXES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.create_index(index, columns, unique=False)


def downgrade() -> None:
    for table, index, _ in reversed(INDEXES):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_index(index)
    op.drop_table("retention_watermark")
