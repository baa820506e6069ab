"""The bucket map and the write fence (design D14.2): ``shard_map`` and ``shard_bucket_route`` in
the control store, ``bucket_write_fence`` on every shard. Empty on a single-database install.

Revision ID: 0018_shard_routes
Revises: 0017_task_owner_created
Create Date: 2026-12-06 10:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0018_shard_routes"
down_revision: str | None = "0017_task_owner_created"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "shard_map",
        sa.Column("id", sa.SmallInteger, autoincrement=False),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("updated_at", _TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_shard_map")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    op.create_table(
        "shard_bucket_route",
        sa.Column("bucket_id", sa.SmallInteger, autoincrement=False),
        sa.Column("route_epoch", sa.BigInteger, nullable=False),
        sa.Column("physical_shard", sa.String(64), nullable=False),
        sa.Column("route_state", sa.String(16), nullable=False),
        sa.Column("target_shard", sa.String(64), nullable=True),
        sa.Column("fenced_at", _TIMESTAMP, nullable=True),
        sa.Column("updated_at", _TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("bucket_id", name=op.f("pk_shard_bucket_route")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    op.create_table(
        "bucket_write_fence",
        sa.Column("bucket_id", sa.SmallInteger, autoincrement=False),
        sa.Column("route_epoch", sa.BigInteger, nullable=False),
        sa.Column("writable", sa.Boolean, nullable=False),
        sa.Column("updated_at", _TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("bucket_id", name=op.f("pk_bucket_write_fence")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )


def downgrade() -> None:
    op.drop_table("bucket_write_fence")
    op.drop_table("shard_bucket_route")
    op.drop_table("shard_map")
