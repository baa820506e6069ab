"""A task remembers since when Temporal reports its run stuck (the run's workflow task keeps
failing: open, but making no progress), so it shows so until the run moves again.

Revision ID: 0014_workflow_stuck
Revises: 0013_completes_elsewhere
Create Date: 2026-12-02 00:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0014_workflow_stuck"
down_revision: str | None = "0013_completes_elsewhere"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb")


def upgrade() -> None:
    # Nullable, no default: an instant column add on MySQL/MariaDB. The index finds the few stuck
    # tasks without reading the others (NULLs sort first and are skipped by the range).
    with op.batch_alter_table("task") as batch:
        batch.add_column(sa.Column("workflow_stuck_since", TIMESTAMP, nullable=True))
    op.create_index("task_stuck_idx", "task", ["workflow_stuck_since"])


def downgrade() -> None:
    op.drop_index("task_stuck_idx", table_name="task")
    with op.batch_alter_table("task") as batch:
        batch.drop_column("workflow_stuck_since")
