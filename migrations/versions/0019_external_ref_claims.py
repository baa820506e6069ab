"""External references claimed per bucket in the control store (``external_ref_claim``), so a
reference stays unique per tenant and scope across shards. Empty on a single-database install.

Revision ID: 0019_external_ref_claims
Revises: 0018_shard_routes
Create Date: 2026-12-06 15:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0019_external_ref_claims"
down_revision: str | None = "0018_shard_routes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "external_ref_claim",
        sa.Column("tenant_id", sa.String(64)),
        sa.Column("authority_scope", sa.String(64)),
        sa.Column("ref_type", sa.String(64)),
        sa.Column("ref_hash", sa.String(64)),
        sa.Column("bucket_id", sa.SmallInteger, nullable=False),
        sa.Column("claimed_at", _TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint(
            "tenant_id", "authority_scope", "ref_type", "ref_hash", name=op.f("pk_external_ref_claim")
        ),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )


def downgrade() -> None:
    op.drop_table("external_ref_claim")
