"""A task keeps the reason its ending came with, and a stored notification the whole live notice
(the state it reports, why, the error code, the actions), so a reload shows how a run ended as a
connected page did.

Revision ID: 0016_full_notices
Revises: 0015_heartbeat_timeout_int
Create Date: 2026-12-02 02:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016_full_notices"
down_revision: str | None = "0015_heartbeat_timeout_int"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable, no default: instant column adds on MySQL/MariaDB. Rows written before keep NULL
    # (a notification without details reads as it did; a task without a reason shows none).
    with op.batch_alter_table("task") as batch:
        batch.add_column(sa.Column("end_reason", sa.String(512), nullable=True))
    with op.batch_alter_table("user_notification") as batch:
        batch.add_column(sa.Column("lifecycle_status", sa.String(32), nullable=True))
        batch.add_column(sa.Column("details", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("user_notification") as batch:
        batch.drop_column("details")
        batch.drop_column("lifecycle_status")
    with op.batch_alter_table("task") as batch:
        batch.drop_column("end_reason")
