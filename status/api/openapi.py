"""The OpenAPI document of the HTTP API, generated from the request models and the published shapes.

``python -m status.api.openapi > docs/openapi.json`` refreshes the checked-in
copy; a test keeps the two equal.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict

from pydantic import BaseModel

from status.api import models as m
from status.api import report_models as r
from status.domain import shapes
from status.domain.errors import ErrorCode

ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "retryable"],
            "properties": {
                "code": {
                    "type": "string",
                    "enum": sorted({c.value for c in ErrorCode} | {"INTERNAL"}),
                    "description": (
                        "stable error code (design D6.1); INTERNAL is a fault of the service, never retryable"
                    ),
                },
                "message": {"type": "string"},
                "retryable": {"type": "boolean"},
            },
        }
    },
}
ANY_OBJECT = {"type": "object", "additionalProperties": True}
_PRIMITIVES: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    Any: {},
}


def shape_schemas() -> dict[str, dict[str, Any]]:
    """JSON schemas of the published shapes (``status.domain.shapes``), by name, with those they refer to."""
    schemas: dict[str, dict[str, Any]] = {}
    pending: list[type] = list(shapes.MESSAGES)
    while pending:
        shape = pending.pop()
        if shape.__name__ not in schemas:
            schemas[shape.__name__] = _object_schema(shape, pending)
    return schemas


def _object_schema(shape: type, refer: list[type]) -> dict[str, Any]:
    hints = get_type_hints(shape, include_extras=True)
    required: frozenset[str] = getattr(shape, "__required_keys__", frozenset())
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {name: _schema(hint, refer) for name, hint in hints.items()},
        "required": [name for name in hints if name in required],
        "additionalProperties": False,
    }
    if shape.__doc__:
        schema["description"] = " ".join(shape.__doc__.split())
    return schema


def _schema(hint: Any, refer: list[type]) -> dict[str, Any]:
    origin = get_origin(hint)
    if origin is Annotated:
        return _annotated(hint, refer)
    if origin in (Union, UnionType):
        return _union([_schema(arg, refer) for arg in get_args(hint)])
    if origin is Literal:
        (value,) = get_args(hint)
        return {"const": value}
    if origin is list:
        (item,) = get_args(hint)
        return {"type": "array", "items": _schema(item, refer)}
    if origin is dict:
        return {"type": "object"}
    if is_typeddict(hint):
        refer.append(hint)
        return {"$ref": f"#/components/schemas/{hint.__name__}"}
    return dict(_PRIMITIVES[hint])


def _annotated(hint: Any, refer: list[type]) -> dict[str, Any]:
    """``Annotated[T, "text"]`` describes; ``Annotated[str, AnEnum]`` lists the enumeration's values."""
    inner, *extras = get_args(hint)
    schema = _schema(inner, refer)
    for extra in extras:
        if isinstance(extra, str):
            schema["description"] = extra
        elif isinstance(extra, type) and issubclass(extra, Enum):
            schema["enum"] = [member.value for member in extra]
    return schema


def _union(options: list[dict[str, Any]]) -> dict[str, Any]:
    """``str | None`` as one schema with a list of types (as pydantic writes them); else anyOf."""
    if any(set(option) - {"type", "enum", "description"} for option in options):
        return {"anyOf": options}
    merged: dict[str, Any] = {"type": [option["type"] for option in options]}
    for option in options:
        merged.update({k: v for k, v in option.items() if k != "type"})
    if "enum" in merged:
        merged["enum"] = [*merged["enum"], None]
    return merged


# Responses with a described shape (the rest: any object).
RESPONSE_SCHEMAS: dict[tuple[str, str], str] = {
    ("get", "/api/tasks/{taskId}"): "TaskSnapshot",
    ("get", "/api/tasks:byExternalRef"): "TaskSnapshot",
    ("get", "/api/workflows/{workflowId}"): "WorkflowSummaryMessage",
    ("get", "/api/workflows/{workflowId}/tasks"): "WorkflowTasks",
}
_REF = [("refType", True, "e.g. ORDER_ID"), ("refValue", True, "the other system's id")]

# path → query parameters (name, required, description)
QUERY_PARAMETERS: dict[str, list[tuple[str, bool, str]]] = {
    "/internal/v1/external-refs": _REF,
    "/api/tasks:byExternalRef": [
        *_REF,
        ("authorityScope", False, "needed only when the reference exists in several scopes"),
    ],
    "/api/tasks/{taskId}/events": [("afterTaskVersion", False, "decimal"), ("limit", False, "1–500")],
    "/api/me/tasks": [
        ("cursor", False, "from nextCursor"),
        ("limit", False, "1–100"),
        ("status", False, "running | failed | needs_action | done"),
        ("q", False, "only tasks whose title contains this (case-insensitive, literal; at most 100 characters)"),
    ],
    "/api/me/notifications": [
        ("unread", False, "true: unread only"),
        ("cursor", False, "from nextCursor"),
        ("limit", False, "1–100"),
    ],
}

# (method, path, summary, request model or None, auth, success status)
OPERATIONS: list[tuple[str, str, str, type[BaseModel] | None, str, str]] = [
    (
        "post",
        "/internal/v1/workflows",
        "Create a workflow and its initial tasks (idempotent)",
        m.CreateWorkflowIn,
        "service",
        "201",
    ),
    (
        "post",
        "/internal/v1/workflows/{workflowId}/tasks",
        "Add a task (idempotent by clientTaskKey)",
        m.NewTaskIn,
        "service",
        "201",
    ),
    (
        "post",
        "/internal/v1/tasks/{taskId}/steps/{stepId}:activate",
        "Activate attempt N of a known step; its startedEvent and further events commit with it",
        r.ActivateStepIn,
        "service",
        "201",
    ),
    (
        "post",
        "/internal/v1/tasks/{taskId}/executions:register",
        "Register a dynamic execution; its startedEvent and further events commit with it",
        r.RegisterExecutionIn,
        "service",
        "201",
    ),
    (
        "post",
        "/internal/v1/executions:bind",
        "Bind many executions (activations, registrations; each with its events) in one transaction",
        r.BindBatchIn,
        "execution",
        "200",
    ),
    ("post", "/internal/v1/task-events", "Report one event", r.EventIn, "execution", "200"),
    (
        "post",
        "/internal/v1/task-events:batch",
        "Report many events, one result each; optional `bindings` are bound first, each with its own"
        " events, and answered under `bindings` as executions:bind answers; optional `heartbeats`"
        " (service token with WORKER) are recorded after them and answered under `heartbeats` as"
        " task-heartbeats:batch answers",
        r.EventBatchIn,
        "execution",
        "200",
    ),
    (
        "post",
        "/internal/v1/task-heartbeats:batch",
        "Record execution heartbeats; each accepted beat past its credential's half-life renews it"
        " (its result carries expiresAt, and a new executionToken when the beat named one)",
        r.HeartbeatBatchIn,
        "service",
        "200",
    ),
    (
        "patch",
        "/internal/v1/tasks/{taskId}/classification",
        "Bind productId, taskType, definition version",
        m.ClassifyIn,
        "service",
        "200",
    ),
    (
        "get",
        "/internal/v1/tasks:overdue",
        "Tasks RUNNING or STALE beyond their operation's maxRuntimeSeconds or the default (ADMIN)",
        None,
        "service",
        "200",
    ),
    (
        "put",
        "/internal/v1/tasks/{taskId}/temporal-owner",
        "Hand an open task to another Temporal run: when that run closes, its verdict ends the task",
        m.TemporalOwnerIn,
        "service",
        "200",
    ),
    ("put", "/internal/v1/tasks/{taskId}/acl/{principalType}/{principalId}", "Grant access", m.AclIn, "service", "200"),
    (
        "delete",
        "/internal/v1/tasks/{taskId}/acl/{principalType}/{principalId}",
        "Revoke access",
        None,
        "service",
        "200",
    ),
    ("put", "/internal/v1/definitions", "Store versioned status and operation definitions", None, "service", "200"),
    (
        "post",
        "/internal/v1/broadcasts",
        "A notice to a project, tenant, the system, or many users (fan-out)",
        m.BroadcastIn,
        "service",
        "201",
    ),
    (
        "post",
        "/internal/v1/tasks/{taskId}/external-refs",
        "Attach other systems' ids to a task (idempotent; EXTERNAL_REF_CONFLICT if another task has one)",
        m.AttachRefsIn,
        "service",
        "201",
    ),
    (
        "get",
        "/internal/v1/external-refs",
        "The task an external reference maps to, in the credential's authority scope",
        None,
        "service",
        "200",
    ),
    (
        "get",
        "/api/tasks:byExternalRef",
        "Snapshot of the task an external reference maps to (404 when unknown or not visible)",
        None,
        "user",
        "200",
    ),
    (
        "post",
        "/internal/v1/tasks/{taskId}/corrections",
        "Admin correction of a task's or a step attempt's status (ADMIN; audited; idempotent by correctionId)",
        m.CorrectionIn,
        "service",
        "201",
    ),
    ("get", "/internal/v1/tasks/{taskId}/corrections", "Audit records of a task's corrections", None, "service", "200"),
    ("get", "/api/tasks/{taskId}", "Task snapshot (404 when not visible)", None, "user", "200"),
    ("get", "/api/tasks/{taskId}/events", "Committed timeline after afterTaskVersion", None, "user", "200"),
    (
        "post",
        "/api/tasks/status:batchGet",
        "Snapshots of tasks newer than the known versions",
        m.BatchGetIn,
        "user",
        "200",
    ),
    (
        "post",
        "/api/workflows:batchGet",
        "Summaries of up to 100 workflows in one read (as GET /api/workflows/{id}; unseen ones in notFound)",
        m.WorkflowBatchGetIn,
        "user",
        "200",
    ),
    ("get", "/api/me/tasks", "The user's tasks, newest first", None, "user", "200"),
    (
        "get",
        "/api/me/notifications",
        "The user's durable notifications (terminal and action-required changes), newest first, with unreadCount",
        None,
        "user",
        "200",
    ),
    (
        "post",
        "/api/me/notifications:read",
        "Mark notifications read (ids, or all: true); shared by all of the user's devices",
        m.MarkReadIn,
        "user",
        "200",
    ),
    (
        "post",
        "/api/me/telemetry",
        "A page's realtime counters, snapshot times and commit → visible latencies, for Prometheus"
        " (about once a minute; 204; RATE_LIMITED past a few per minute)",
        m.ClientTelemetryIn,
        "user",
        "204",
    ),
    ("get", "/api/workflows/{workflowId}", "Workflow summary", None, "user", "200"),
    ("get", "/api/workflows/{workflowId}/tasks", "Workflow summary and its visible tasks", None, "user", "200"),
    ("get", "/api/realtime/session", "Centrifugo connection token, endpoints and channel names", None, "user", "200"),
    (
        "post",
        "/api/realtime/subscription-token",
        "Subscription token for a detail/workflow channel (ACL, per-session limit)",
        m.SubscriptionIn,
        "user",
        "200",
    ),
    (
        "post",
        "/api/realtime/subscription-token:release",
        "Release a detail subscription slot",
        m.ReleaseIn,
        "user",
        "200",
    ),
    (
        "get",
        "/api/v1/me/task-stream",
        "Native SSE stream of the user's summaries and watched details (access_token query allowed)",
        None,
        "user",
        "200",
    ),
    ("put", "/api/v1/me/task-watch-set", "Replace the detail streams of an SSE session", m.WatchSetIn, "user", "200"),
    ("get", "/healthz", "Liveness", None, "none", "200"),
    ("get", "/readyz", "Readiness (database reachable)", None, "none", "200"),
    ("get", "/metrics", "Prometheus metrics", None, "none", "200"),
]


def _response(method: str, path: str) -> dict[str, Any]:
    named = RESPONSE_SCHEMAS.get((method, path))
    return {"$ref": f"#/components/schemas/{named}"} if named else ANY_OBJECT


def build_openapi() -> dict[str, Any]:
    components: dict[str, Any] = {"Error": ERROR, **shape_schemas()}
    paths: dict[str, Any] = {}
    for method, path, summary, model, auth, ok in OPERATIONS:
        op: dict[str, Any] = {
            "summary": summary,
            "responses": {
                ok: {"description": "OK", "content": {"application/json": {"schema": _response(method, path)}}},
                "default": {
                    "description": "error",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                },
            },
        }
        params = [p.strip("{}") for p in path.replace(":", "/").split("/") if p.startswith("{")]
        parameters = [{"name": p, "in": "path", "required": True, "schema": {"type": "string"}} for p in params]
        parameters += [
            {"name": name, "in": "query", "required": required, "description": text, "schema": {"type": "string"}}
            for name, required, text in QUERY_PARAMETERS.get(path, [])
        ]
        if parameters:
            op["parameters"] = parameters
        if model is not None:
            schema = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
            components.update(schema.pop("$defs", {}))
            components[model.__name__] = schema
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}},
            }
        if auth != "none":
            op["security"] = [{auth: []}]
        paths.setdefault(path, {})[method] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "Task Status Observer", "version": "1"},
        "paths": paths,
        "components": {
            "schemas": dict(sorted(components.items())),
            "securitySchemes": {
                "service": {"type": "http", "scheme": "bearer", "description": "service token"},
                "execution": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": (
                        "execution token or service token; an execution token (and handle) lives"
                        " EXECUTION_TOKEN_TTL_SECONDS (an hour) and is renewed by the heartbeats its execution sends"
                    ),
                },
                "user": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": (
                        "A user token your backend or identity provider issues (docs/frontend.md, 'User tokens')."
                        " HMAC mode (USER_TOKEN_SECRET, HS256): claims typ='usr' (required), sub (user id),"
                        " tnt or tenant_id (tenant), exp (required), optional projects and roles (lists of ids:"
                        " tasks granted to them are visible), sid (login session), iat. JWKS mode (USER_JWKS_URL,"
                        " RS256 or ES256 with kid): exp and sub required, aud and iss when USER_JWKS_AUDIENCE /"
                        " USER_JWKS_ISSUER are set; tnt, projects, roles, sid as above. Ids are 1-64 of"
                        " A-Z a-z 0-9 . _ @ + = | - starting with a letter or digit. Each claim has one JSON type"
                        " (sub, tnt, sid, iss: strings; projects, roles: lists of strings, never a bare string;"
                        " exp, iat, nbf: numbers): a claim of any other type is refused with 401 UNAUTHENTICATED,"
                        " never read as something else."
                    ),
                },
            },
        },
    }


if __name__ == "__main__":
    json.dump(build_openapi(), sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
