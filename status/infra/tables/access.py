"""Who may see what: grants on tasks, external references, revoked credentials and the
subscriptions granted to realtime sessions."""

from __future__ import annotations

import sqlalchemy as sa

from status.infra.tables.base import MYSQL_TABLE_ARGS, Id, Timestamp, metadata

# Service credentials revoked before their expiry, by ``jti`` (read by every API
# process every few seconds; kept until the credential would have expired anyway).
revoked_credential = sa.Table(
    "revoked_credential",
    metadata,
    sa.Column("jti", sa.String(64), primary_key=True),
    sa.Column("revoked_at", Timestamp, nullable=False),
    sa.Column("expires_at", Timestamp, nullable=True),
    sa.Column("reason", sa.String(255), nullable=True),
    **MYSQL_TABLE_ARGS,
)

task_acl = sa.Table(
    "task_acl",
    metadata,
    sa.Column("task_id", Id, sa.ForeignKey("task.id", name="task_acl_task_fk"), primary_key=True),
    sa.Column("principal_type", sa.String(16), primary_key=True),  # USER | PROJECT | ROLE
    sa.Column("principal_id", sa.String(64), primary_key=True),
    sa.Column("tenant_id", sa.String(64), nullable=False),
    sa.Column("permission", sa.String(16), nullable=False),  # VIEW | OPERATE | ADMIN
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("revoked_at", Timestamp, nullable=True),
    sa.Index(
        "task_acl_principal_idx",
        "tenant_id",
        "principal_type",
        "principal_id",
        "revoked_at",
        "task_id",
    ),
    **MYSQL_TABLE_ARGS,
)

task_external_ref = sa.Table(
    "task_external_ref",
    metadata,
    sa.Column("tenant_id", sa.String(64), primary_key=True),
    sa.Column("authority_scope", sa.String(64), primary_key=True),
    sa.Column("ref_type", sa.String(64), primary_key=True),
    # SHA-256 of the value's UTF-8 bytes: references are exact strings, and MySQL's collations
    # pad spaces ("SO-x " = "SO-x"); the value itself is kept beside it.
    sa.Column("ref_hash", sa.String(64), primary_key=True),
    sa.Column("ref_value", sa.String(255), nullable=False),
    sa.Column("task_id", Id, sa.ForeignKey("task.id", name="task_external_ref_task_fk"), nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Index("task_external_ref_task_idx", "task_id"),
    **MYSQL_TABLE_ARGS,
)

external_ref_claim = sa.Table(
    "external_ref_claim",
    metadata,
    # With shards, the bucket an external reference was claimed for (in the control store): a
    # reference is unique per tenant and scope across shards, not only within one.
    sa.Column("tenant_id", sa.String(64), primary_key=True),
    sa.Column("authority_scope", sa.String(64), primary_key=True),
    sa.Column("ref_type", sa.String(64), primary_key=True),
    sa.Column("ref_hash", sa.String(64), primary_key=True),
    sa.Column("bucket_id", sa.SmallInteger, nullable=False),
    sa.Column("claimed_at", Timestamp, nullable=False),
    **MYSQL_TABLE_ARGS,
)

# Detail/workflow subscriptions granted to a realtime session: the server-side
# limit (DETAIL_SUBSCRIPTION_LIMIT) counts unexpired rows per session.
realtime_grant = sa.Table(
    "realtime_grant",
    metadata,
    sa.Column("session_id", sa.String(128), primary_key=True),
    sa.Column("channel", sa.String(255), primary_key=True),
    sa.Column("tenant_id", sa.String(64), nullable=False),
    sa.Column("user_id", sa.String(64), nullable=False),
    sa.Column("expires_at", Timestamp, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Index("realtime_grant_expiry_idx", "expires_at"),
    **MYSQL_TABLE_ARGS,
)
