"""An index for ETA history: the newest successful attempts of an operation.

Revision ID: 0008_step_duration_index
Revises: 0007_corrections_notifications
Create Date: 2026-11-30 11:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0008_step_duration_index"
down_revision: str | None = "0007_corrections_notifications"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("task_step", schema=None) as batch_op:
        batch_op.create_index(
            "task_step_duration_idx", ["operation_code", "lifecycle_status", "finished_at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("task_step", schema=None) as batch_op:
        batch_op.drop_index("task_step_duration_idx")
