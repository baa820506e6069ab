"""Outbox: random publish keys, channel partitions, relay partition leases and live relays.

Revision ID: 0003_outbox_partitions
Revises: 0002_feeds
Create Date: 2026-11-30 07:20:00.000000
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0003_outbox_partitions"
down_revision: str | None = "0002_feeds"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb")
# Must equal status.infra.outbox_rows.OUTBOX_PARTITIONS at the time of this revision.
PARTITIONS = 16


def upgrade() -> None:
    with op.batch_alter_table("task_outbox", schema=None) as batch_op:
        batch_op.add_column(sa.Column("publish_key", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("partition_no", sa.SmallInteger(), server_default="0", nullable=False))
    # Rows written before this revision get a random key and their channel's partition
    # (rows still PENDING must not reuse the old `outbox-<id>` keys either).
    conn = op.get_bind()
    outbox = sa.table(
        "task_outbox",
        sa.column("id", sa.BigInteger),
        sa.column("channel", sa.String),
        sa.column("publish_key", sa.String),
        sa.column("partition_no", sa.SmallInteger),
    )
    while True:
        rows = conn.execute(sa.select(outbox.c.id, outbox.c.channel).where(outbox.c.publish_key.is_(None)).limit(5000))
        batch = [
            {"_id": r.id, "_key": os.urandom(16).hex(), "_partition": zlib.crc32(r.channel.encode()) % PARTITIONS}
            for r in rows
        ]
        if not batch:
            break
        conn.execute(
            sa.update(outbox)
            .where(outbox.c.id == sa.bindparam("_id"))
            .values(publish_key=sa.bindparam("_key"), partition_no=sa.bindparam("_partition")),
            batch,
        )
    with op.batch_alter_table("task_outbox", schema=None) as batch_op:
        batch_op.alter_column("publish_key", existing_type=sa.String(length=32), nullable=False)
        batch_op.create_index("outbox_partition_claim_idx", ["status", "partition_no", "id"], unique=False)
        # Relays no longer lease rows (PROCESSING is only what older relays left behind).
        batch_op.drop_index("outbox_lock_timeout_idx")

    op.create_table(
        "outbox_partition",
        sa.Column("partition_no", sa.SmallInteger(), autoincrement=False, nullable=False),
        sa.Column("relay_id", sa.String(length=128), nullable=True),
        sa.Column("lease_until", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("partition_no", name=op.f("pk_outbox_partition")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    op.create_table(
        "outbox_relay",
        sa.Column("relay_id", sa.String(length=128), nullable=False),
        sa.Column("alive_until", TIMESTAMP, nullable=False),
        sa.Column("wake_address", sa.String(length=255), nullable=True),
        sa.PrimaryKeyConstraint("relay_id", name=op.f("pk_outbox_relay")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    with op.batch_alter_table("outbox_relay", schema=None) as batch_op:
        batch_op.create_index("outbox_relay_alive_idx", ["alive_until"], unique=False)


def downgrade() -> None:
    op.drop_table("outbox_relay")
    op.drop_table("outbox_partition")
    with op.batch_alter_table("task_outbox", schema=None) as batch_op:
        batch_op.drop_index("outbox_partition_claim_idx")
        batch_op.create_index("outbox_lock_timeout_idx", ["status", "locked_at"], unique=False)
        batch_op.drop_column("partition_no")
        batch_op.drop_column("publish_key")
