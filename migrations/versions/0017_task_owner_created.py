"""The user's task list reads their own tasks newest first from an index, instead of scanning the
tenant's tasks: (tenant_id, owner_id, created_at, id), the order GET /api/me/tasks pages in.

Revision ID: 0017_task_owner_created
Revises: 0016_full_notices
Create Date: 2026-12-02 12:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0017_task_owner_created"
down_revision: str | None = "0016_full_notices"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # An online index build on MariaDB/MySQL (InnoDB adds a secondary index without blocking writes).
    op.create_index("task_owner_created_idx", "task", ["tenant_id", "owner_id", "created_at", "id"])


def downgrade() -> None:
    op.drop_index("task_owner_created_idx", table_name="task")
