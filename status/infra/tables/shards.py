"""Sharding: the bucket map in the control store and each shard's write fences."""

from __future__ import annotations

import sqlalchemy as sa

from status.infra.tables.base import MYSQL_TABLE_ARGS, Timestamp, Version, metadata

# Sharding (design D14.2; docs/architecture.md, "Shards: the engine"). The bucket map lives in
# the control store (the one database of a single-database install): one route per virtual
# bucket, each with its own epoch, raised whenever the bucket changes shards, and one row naming
# the map's version, raised in the same transaction as any route change, so an API process
# re-reads the 4096 routes only when the version moved. No rows: every bucket is on the one
# database (nothing is routed, nothing fenced).
shard_map = sa.Table(
    "shard_map",
    metadata,
    sa.Column("id", sa.SmallInteger, primary_key=True, autoincrement=False),  # always 1
    sa.Column("version", Version, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    **MYSQL_TABLE_ARGS,
)

shard_bucket_route = sa.Table(
    "shard_bucket_route",
    metadata,
    sa.Column("bucket_id", sa.SmallInteger, primary_key=True, autoincrement=False),
    sa.Column("route_epoch", Version, nullable=False),
    sa.Column("physical_shard", sa.String(64), nullable=False),  # a shard's name, never its address
    sa.Column("route_state", sa.String(16), nullable=False),  # ACTIVE, COPYING, CUTOVER
    sa.Column("target_shard", sa.String(64), nullable=True),  # while the bucket moves
    sa.Column("fenced_at", Timestamp, nullable=True),
    sa.Column("updated_at", Timestamp, nullable=False),
    **MYSQL_TABLE_ARGS,
)

# On every shard: which buckets this shard may write, and under which epoch. Every write
# transaction of a sharded install reads its buckets' rows FOR SHARE and holds the lock to its
# commit; a move takes the row FOR UPDATE to fence it, so it waits for the writes already
# under way and every later write (from a process with an old map too) is refused.
bucket_write_fence = sa.Table(
    "bucket_write_fence",
    metadata,
    sa.Column("bucket_id", sa.SmallInteger, primary_key=True, autoincrement=False),
    sa.Column("route_epoch", Version, nullable=False),
    sa.Column("writable", sa.Boolean, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    **MYSQL_TABLE_ARGS,
)
