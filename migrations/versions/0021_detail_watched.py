"""Until when a task's detail channel may be followed (``task.detail_watched_until``): a change
writes its detail message only while someone may be watching (docs/architecture.md, "Detail
messages only while watched"). The tasks there are say nothing (NULL: their changes publish their
detail as before, and the first grant for one publishes its current detail); a task created
afterwards starts as never followed. Both steps change only the table's definition (MariaDB
adds a nullable column and changes a default in place).

Revision ID: 0021_detail_watched
Revises: 0020_outbox_compressed
Create Date: 2026-12-07 09:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0021_detail_watched"
down_revision: str | None = "0020_outbox_compressed"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb")


def upgrade() -> None:
    with op.batch_alter_table("task") as batch:
        batch.add_column(sa.Column("detail_watched_until", _TIMESTAMP, nullable=True))
    with op.batch_alter_table("task") as batch:
        batch.alter_column(
            "detail_watched_until",
            existing_type=_TIMESTAMP,
            existing_nullable=True,
            server_default=sa.text("'1970-01-01 00:00:01'"),
        )


def downgrade() -> None:
    with op.batch_alter_table("task") as batch:
        batch.drop_column("detail_watched_until")
