"""External references are exact strings: keyed by a hash of their UTF-8 bytes.

MySQL/MariaDB's utf8mb4_bin is a PAD SPACE collation: "SO-x " and "SO-x" were the same key, so
one task's reference conflicted with another's and a look-up of one found the other. The key
is now the SHA-256 of the value's bytes (exact on every database); the value stays beside it.

Revision ID: 0010_exact_external_refs
Revises: 0009_temporal_owner
Create Date: 2026-12-01 10:00:00.000000
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_exact_external_refs"
down_revision: str | None = "0009_temporal_owner"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEY = ["tenant_id", "authority_scope", "ref_type"]


def upgrade() -> None:
    with op.batch_alter_table("task_external_ref", schema=None) as batch_op:
        batch_op.add_column(sa.Column("ref_hash", sa.String(64), nullable=True))
    refs = sa.table(
        "task_external_ref",
        *(sa.column(c) for c in (*KEY, "ref_value", "ref_hash")),
    )
    conn = op.get_bind()
    for row in conn.execute(sa.select(refs)).mappings().all():
        digest = hashlib.sha256(row["ref_value"].encode("utf-8")).hexdigest()
        conn.execute(
            sa.update(refs)
            .where(*(refs.c[k] == row[k] for k in KEY), refs.c.ref_value == row["ref_value"])
            .values(ref_hash=digest)
        )
    with op.batch_alter_table("task_external_ref", schema=None) as batch_op:
        batch_op.alter_column("ref_hash", existing_type=sa.String(64), nullable=False)
        batch_op.drop_constraint("pk_task_external_ref", type_="primary")
        batch_op.create_primary_key("pk_task_external_ref", [*KEY, "ref_hash"])


def downgrade() -> None:
    with op.batch_alter_table("task_external_ref", schema=None) as batch_op:
        batch_op.drop_constraint("pk_task_external_ref", type_="primary")
        batch_op.create_primary_key("pk_task_external_ref", [*KEY, "ref_value"])
        batch_op.drop_column("ref_hash")
