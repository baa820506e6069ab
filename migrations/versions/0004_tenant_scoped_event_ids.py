"""Event ids are unique per tenant: tenant_id joins the keys of the event log and the dedup results.

Revision ID: 0004_tenant_scoped_event_ids
Revises: 0003_outbox_partitions
Create Date: 2026-11-30 08:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_tenant_scoped_event_ids"
down_revision: str | None = "0003_outbox_partitions"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("task_event_log", "task_event_dedup")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("tenant_id", sa.String(length=64), nullable=True))
        # Existing rows take their task's tenant (a correlated subquery: MySQL, MariaDB and SQLite).
        op.execute(f"UPDATE {table} SET tenant_id = (SELECT task.tenant_id FROM task WHERE task.id = {table}.task_id)")
        op.execute(f"UPDATE {table} SET tenant_id = '' WHERE tenant_id IS NULL")  # rows of purged tasks
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.alter_column("tenant_id", existing_type=sa.String(length=64), nullable=False)
            batch_op.drop_constraint(f"pk_{table}", type_="primary")
            batch_op.create_primary_key(f"pk_{table}", ["tenant_id", "event_id"])


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_constraint(f"pk_{table}", type_="primary")
            batch_op.create_primary_key(f"pk_{table}", ["event_id"])
            batch_op.drop_column("tenant_id")
