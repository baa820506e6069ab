"""Status and operation definitions: what a task type's statuses and operations may do."""

from __future__ import annotations

import sqlalchemy as sa

from status.infra.tables.base import MYSQL_TABLE_ARGS, Json, Timestamp, metadata

task_status_definition = sa.Table(
    "task_status_definition",
    metadata,
    sa.Column("tenant_id", sa.String(64), primary_key=True),
    sa.Column("authority_scope", sa.String(64), primary_key=True),
    sa.Column("task_type", sa.String(128), primary_key=True),
    sa.Column("definition_version", sa.Integer, primary_key=True),
    sa.Column("code", sa.String(64), primary_key=True),
    sa.Column("display_name", sa.String(128), nullable=False),
    sa.Column("lifecycle_status", sa.String(32), nullable=False),
    sa.Column("terminal", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("severity", sa.String(16), nullable=False, server_default="INFO"),
    sa.Column("sort_order", sa.Integer, nullable=False, server_default="0"),
    sa.Column("presentation", Json, nullable=True),
    sa.Column("allowed_from", Json, nullable=False),
    sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.true()),
    # Set once a task binds this version; a frozen definition never changes (design P16).
    sa.Column("frozen_at", Timestamp, nullable=True),
    **MYSQL_TABLE_ARGS,
)

task_operation_definition = sa.Table(
    "task_operation_definition",
    metadata,
    sa.Column("tenant_id", sa.String(64), primary_key=True),
    sa.Column("authority_scope", sa.String(64), primary_key=True),
    sa.Column("task_type_pattern", sa.String(128), primary_key=True, server_default="*"),
    sa.Column("definition_version", sa.Integer, primary_key=True),
    sa.Column("operation_code", sa.String(128), primary_key=True),
    sa.Column("display_name", sa.String(128), nullable=False),
    sa.Column("producer_pattern", sa.String(255), nullable=False),
    sa.Column("allowed_event_types", Json, nullable=False),
    sa.Column("allowed_data_schemas", Json, nullable=False),
    # JSON Schema documents keyed by schema id, validated with ``jsonschema``.
    sa.Column("data_schema_documents", Json, nullable=True),
    sa.Column("failure_policy", sa.String(32), nullable=False),
    sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.true()),
    sa.Column("frozen_at", Timestamp, nullable=True),
    # How long one attempt may run before operators see its task as overdue (None: the default).
    sa.Column("max_runtime_seconds", sa.Integer, nullable=True),
    **MYSQL_TABLE_ARGS,
)
