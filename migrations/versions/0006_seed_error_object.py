"""TASK_FAILED carries the error object of design D6.1: its category, retryable flag and (server-side only)
diagnostics reference join the task's failure code and user message.

Revision ID: 0006_seed_error_object
Revises: 0005_revoked_credentials
Create Date: 2026-11-30 10:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_seed_error_object"
down_revision: str | None = "0005_revoked_credentials"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("task") as batch:
        batch.add_column(sa.Column("failure_category", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("failure_retryable", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("failure_diagnostics_ref", sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("task") as batch:
        batch.drop_column("failure_diagnostics_ref")
        batch.drop_column("failure_retryable")
        batch.drop_column("failure_category")
