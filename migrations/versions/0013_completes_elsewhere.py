"""An attempt whose activity completes elsewhere (asynchronous completion through its task token)
is watched in Temporal instead of timed on heartbeats: when its worker said so, and when Temporal
is asked about it next.

Revision ID: 0013_completes_elsewhere
Revises: 0012_temporal_attempts
Create Date: 2026-12-02 00:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0013_completes_elsewhere"
down_revision: str | None = "0012_temporal_attempts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb")


def upgrade() -> None:
    # Nullable, no default (an instant column add on MySQL/MariaDB); the index holds only the few
    # awaited attempts' rows in its useful range (NULLs first), so the watch reads what is due.
    with op.batch_alter_table("task_step_temporal") as batch:
        batch.add_column(sa.Column("completes_elsewhere_at", TIMESTAMP, nullable=True))
        batch.add_column(sa.Column("next_check_at", TIMESTAMP, nullable=True))
    op.create_index("task_step_temporal_check_idx", "task_step_temporal", ["next_check_at"])


def downgrade() -> None:
    op.drop_index("task_step_temporal_check_idx", table_name="task_step_temporal")
    with op.batch_alter_table("task_step_temporal") as batch:
        batch.drop_column("next_check_at")
        batch.drop_column("completes_elsewhere_at")
