"""Revocable service credentials: revoked_credential keyed by the token's jti.

Revision ID: 0005_revoked_credentials
Revises: 0004_tenant_scoped_event_ids
Create Date: 2026-11-30 08:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0005_revoked_credentials"
down_revision: str | None = "0004_tenant_scoped_event_ids"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "revoked_credential",
        sa.Column("jti", sa.String(length=64), nullable=False),
        sa.Column("revoked_at", TIMESTAMP, nullable=False),
        sa.Column("expires_at", TIMESTAMP, nullable=True),
        sa.Column("reason", sa.String(length=255), nullable=True),
        sa.PrimaryKeyConstraint("jti", name=op.f("pk_revoked_credential")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )


def downgrade() -> None:
    op.drop_table("revoked_credential")
