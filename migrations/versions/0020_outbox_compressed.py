"""Outbox rows hold their messages compressed (``payload_zstd``): a change's row carries its
projections' full states, 8 KB of JSON for a 10-step task and 26 KB for a 30-step one, which
the database parsed, checked and stored with every change; compressed it is a twentieth.
Rows written before keep their JSON ``payload``, now nullable, and are read as they were.

Revision ID: 0020_outbox_compressed
Revises: 0019_external_ref_claims
Create Date: 2026-12-06 19:00:00.000000
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

import sqlalchemy as sa
import zstandard
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0020_outbox_compressed"
down_revision: str | None = "0019_external_ref_claims"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COMPRESSED = sa.Text().with_variant(mysql.LONGTEXT(charset="ascii"), "mysql", "mariadb")


def upgrade() -> None:
    # MariaDB copies the outbox once (its unpublished and retained rows); SQLite's batch mode
    # rebuilds it.
    with op.batch_alter_table("task_outbox") as batch:
        batch.add_column(sa.Column("payload_zstd", _COMPRESSED, nullable=True))
        batch.alter_column("payload", existing_type=sa.JSON(), nullable=True)


def downgrade() -> None:
    # Every compressed row back into the JSON column first, so an earlier relay still publishes
    # what is pending (the same encoding as ``status.infra.outbox_rows``: base64 of zstd frames).
    outbox = sa.table("task_outbox", sa.column("id"), sa.column("payload", sa.Text), sa.column("payload_zstd"))
    conn = op.get_bind()
    rows = conn.execute(sa.select(outbox.c.id, outbox.c.payload_zstd).where(outbox.c.payload.is_(None))).all()
    expand = zstandard.ZstdDecompressor()
    for row_id, packed in rows:
        text = expand.decompress(base64.b64decode(packed)).decode()
        conn.execute(sa.update(outbox).where(outbox.c.id == row_id).values(payload=text))
    with op.batch_alter_table("task_outbox") as batch:
        batch.alter_column("payload", existing_type=sa.JSON(), nullable=False)
        batch.drop_column("payload_zstd")
