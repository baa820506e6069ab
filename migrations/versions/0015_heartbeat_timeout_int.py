"""A step's heartbeat timeout holds the contract's whole range (up to 86,400 s): SMALLINT stopped
at 32,767, so a longer timeout the API accepted failed to store (HTTP 500).

Revision ID: 0015_heartbeat_timeout_int
Revises: 0014_workflow_stuck
Create Date: 2026-12-02 01:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015_heartbeat_timeout_int"
down_revision: str | None = "0014_workflow_stuck"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Widening an integer column copies the table on MariaDB (once, at upgrade); SQLite's batch
    # mode rebuilds it. Values are kept as they are.
    with op.batch_alter_table("task_step") as batch:
        batch.alter_column(
            "heartbeat_timeout_seconds", existing_type=sa.SmallInteger(), type_=sa.Integer(), existing_nullable=True
        )


def downgrade() -> None:
    with op.batch_alter_table("task_step") as batch:
        batch.alter_column(
            "heartbeat_timeout_seconds", existing_type=sa.Integer(), type_=sa.SmallInteger(), existing_nullable=True
        )
