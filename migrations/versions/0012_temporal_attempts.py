"""Step attempts remember the Temporal activity and attempt they ran as (Temporal's attempt numbers
are the truth: an activation is placed by them, status/domain/attempts.py).

Revision ID: 0012_temporal_attempts
Revises: 0011_retention
Create Date: 2026-12-01 22:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_temporal_attempts"
down_revision: str | None = "0011_retention"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable, no default: an instant column add on MySQL/MariaDB (no table rebuild); attempts
    # bound before this name no Temporal activity and are placed by their numbers, as before.
    with op.batch_alter_table("task_step") as batch:
        batch.add_column(sa.Column("temporal_activity", sa.String(32), nullable=True))
        batch.add_column(sa.Column("temporal_attempt", sa.Integer, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("task_step") as batch:
        batch.drop_column("temporal_attempt")
        batch.drop_column("temporal_activity")
