"""The outbox (design D8.14) and the relays that share its partitions."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from status.infra.tables.base import MYSQL_TABLE_ARGS, BigId, Id, Json, Timestamp, Version, metadata

task_outbox = sa.Table(
    "task_outbox",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("aggregate_type", sa.String(16), nullable=False),  # WORKFLOW | TASK
    sa.Column("aggregate_id", Id, nullable=False),
    sa.Column("aggregate_version", Version, nullable=False),
    sa.Column("channel", sa.String(255), nullable=False),
    sa.Column("projection", sa.String(32), nullable=False),
    # Marks messages the relay must never coalesce away (design D8.14): terminal, new
    # task, new attempt, removal, notice.
    sa.Column("must_deliver", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("event_id", sa.String(128), nullable=True),
    # A change's messages (status.infra.outbox_rows): compressed text since revision 0020; the
    # JSON column holds rows written before it, and nothing newer.
    sa.Column("payload", Json, nullable=True),
    sa.Column("payload_zstd", sa.Text().with_variant(mysql.LONGTEXT(charset="ascii"), "mysql", "mariadb")),
    sa.Column("status", sa.String(16), nullable=False, server_default="PENDING"),
    sa.Column("available_at", Timestamp, nullable=False),
    sa.Column("locked_by", sa.String(128), nullable=True),
    sa.Column("locked_at", Timestamp, nullable=True),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("last_error", sa.String(1024), nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("published_at", Timestamp, nullable=True),
    # Centrifugo's idempotency key for this row: random, written with the row. An id
    # derived from the auto-increment counter repeats after a restore, a failover to
    # a lagging replica or a re-created database, and Centrifugo would silently drop
    # the new publication as a duplicate of an old one for minutes.
    sa.Column("publish_key", sa.String(32), nullable=False),
    # crc32(channel) mod OUTBOX_PARTITIONS: one relay at a time owns a partition
    # (outbox_partition), so every home channel's rows are published in commit order.
    sa.Column("partition_no", sa.SmallInteger, nullable=False, server_default="0"),
    sa.UniqueConstraint(
        "aggregate_type",
        "aggregate_id",
        "aggregate_version",
        "channel",
        "projection",
        name="outbox_aggregate_version_channel_uk",
    ),
    # Claims scan PENDING rows in id order and stop after LIMIT rows; with
    # (status, available_at, id) the ORDER BY id needs a filesort that locks
    # every pending row and defeats SKIP LOCKED for concurrent relays.
    sa.Index("outbox_claim_idx", "status", "id"),
    # A relay claims each of its partitions in id order within that partition's own range.
    sa.Index("outbox_partition_claim_idx", "status", "partition_no", "id"),
    sa.Index("outbox_event_idx", "event_id"),
    **MYSQL_TABLE_ARGS,
)

# Which relay publishes which outbox partition, under a lease renewed while it lives.
outbox_partition = sa.Table(
    "outbox_partition",
    metadata,
    sa.Column("partition_no", sa.SmallInteger, primary_key=True, autoincrement=False),
    sa.Column("relay_id", sa.String(128), nullable=True),
    sa.Column("lease_until", Timestamp, nullable=True),
    **MYSQL_TABLE_ARGS,
)

# Live relays (each renews its row with its partition leases), so that a relay
# holding no partition yet still counts when the others compute their fair share,
# and the UDP address where each takes wake-ups from API processes.
outbox_relay = sa.Table(
    "outbox_relay",
    metadata,
    sa.Column("relay_id", sa.String(128), primary_key=True),
    sa.Column("alive_until", Timestamp, nullable=False),
    sa.Column("wake_address", sa.String(255), nullable=True),
    sa.Index("outbox_relay_alive_idx", "alive_until"),
    **MYSQL_TABLE_ARGS,
)
