"""SQLAlchemy Core tables: the whole schema in one ``MetaData``, a module per concern.

Alembic's ``env.py`` and every store use this package (``from status.infra import tables as t``),
so the migration and the code can never disagree about a column. The column types the tables
share, and why, are in ``base``.
"""

from status.infra.tables.access import (
    external_ref_claim,
    realtime_grant,
    revoked_credential,
    task_acl,
    task_external_ref,
)
from status.infra.tables.base import MYSQL_TABLE_ARGS, BigId, Id, Json, Timestamp, Version, metadata
from status.infra.tables.definitions import task_operation_definition, task_status_definition
from status.infra.tables.events import (
    retention_watermark,
    task_correction,
    task_event_dedup,
    task_event_log,
    user_notification,
    workflow_change,
)
from status.infra.tables.outbox import outbox_partition, outbox_relay, task_outbox
from status.infra.tables.shards import bucket_write_fence, shard_bucket_route, shard_map
from status.infra.tables.tasks import (
    task,
    task_execution_handle,
    task_step,
    task_step_temporal,
    temporal_close_watermark,
    workflow,
)

__all__ = [
    "MYSQL_TABLE_ARGS",
    "BigId",
    "Id",
    "Json",
    "Timestamp",
    "Version",
    "bucket_write_fence",
    "external_ref_claim",
    "metadata",
    "outbox_partition",
    "outbox_relay",
    "realtime_grant",
    "retention_watermark",
    "revoked_credential",
    "shard_bucket_route",
    "shard_map",
    "task",
    "task_acl",
    "task_correction",
    "task_event_dedup",
    "task_event_log",
    "task_execution_handle",
    "task_external_ref",
    "task_operation_definition",
    "task_outbox",
    "task_status_definition",
    "task_step",
    "task_step_temporal",
    "temporal_close_watermark",
    "user_notification",
    "workflow",
    "workflow_change",
]
