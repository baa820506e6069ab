"""The Starlette application of the status service: parse → command → service → response."""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import sqlalchemy as sa
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from status.api import metrics
from status.api.answers import CountAnswers
from status.api.changes import ChangeLog
from status.api.corrections import CorrectionEndpoints
from status.api.deadline import RequestDeadline
from status.api.draining import CloseWhileDraining
from status.api.errors import (
    binding_results,
    domain_error_handler,
    error_body,
    unexpected_error_handler,
)
from status.api.gate import heartbeat_caller, is_ascii_digits
from status.api.http_gate import HttpGate, int_param
from status.api.models import (
    AclIn,
    BatchGetIn,
    Body,
    BroadcastIn,
    ClassifyIn,
    CreateWorkflowIn,
    NewTaskIn,
    ReleaseIn,
    SubscriptionIn,
    TemporalOwnerIn,
    WorkflowBatchGetIn,
)
from status.api.notifications import NotificationEndpoints
from status.api.openapi import build_openapi
from status.api.references import ReferenceEndpoints
from status.api.report_models import (
    ActivateStepIn,
    BindBatchIn,
    EventBatchIn,
    EventIn,
    HeartbeatBatchIn,
    RegisterExecutionIn,
)
from status.api.responses import JSONResponse
from status.api.stream import StreamEndpoints
from status.api.telemetry import TelemetryEndpoints
from status.app import commands as c
from status.app.beats import BeatsAnswer
from status.app.service import EventCaller, StatusService
from status.bootstrap import Components
from status.domain.auth import ServicePrincipal, UserPrincipal
from status.domain.errors import DomainError, Invalid
from status.infra.metrics import REGISTRY
from status.settings import Settings

M = TypeVar("M", bound=Body)


class Api:
    """Request handlers; each one is parse → command → service → response."""

    def __init__(self, parts: Components) -> None:
        self.settings = settings = parts.settings
        self.service = parts.service
        self.realtime = parts.realtime
        self.gate = HttpGate(settings, parts.service, parts.service_tokens, parts.user_tokens)
        self.service_tokens = self.gate.service_tokens
        self.user_tokens = self.gate.user_tokens
        self.user_rate_limiter = self.gate.user_rate_limiter
        self.committer = parts.group_committer()
        self.changes = ChangeLog(parts.service, settings.change_log_sample)
        self.grpc_committer = parts.group_committer()  # its own: groups never span event loops

    # ------------------------------------------------------------ the gate (shared with gRPC)
    async def parse(self, request: Request, model: type[M], *, empty: bool = False) -> M:
        return await self.gate.parse(request, model, empty=empty)

    def service_principal(self, request: Request) -> ServicePrincipal:
        return self.gate.service_principal(request)

    def event_caller(self, request: Request) -> EventCaller:
        return self.gate.event_caller(request)

    def user(self, request: Request) -> UserPrincipal:
        return self.gate.user(request)

    # ------------------------------------------------------------ internal API
    async def create_workflow(self, request: Request) -> JSONResponse:
        caller = self.service_principal(request)
        cmd = (await self.parse(request, CreateWorkflowIn)).command()
        result = await run_in_threadpool(self.service.create_workflow, caller, cmd)
        return JSONResponse(result, status_code=201 if result["created"] else 200)

    async def add_task(self, request: Request) -> JSONResponse:
        caller = self.service_principal(request)
        cmd = (await self.parse(request, NewTaskIn)).command()
        result = await run_in_threadpool(self.service.add_task, caller, request.path_params["workflow_id"], cmd)
        return JSONResponse(result, status_code=201 if result["created"] else 200)

    async def activate_step(self, request: Request) -> JSONResponse:
        caller = self.service_principal(request)
        body = await self.parse(request, ActivateStepIn)
        cmd = body.of_step(request.path_params["task_id"], request.path_params["step_id"])
        ctx = await run_in_threadpool(self.service.activate_step, caller, cmd)
        self.changes.bound(caller, [cmd], [ctx], request.headers.get("traceparent"), "http")
        return JSONResponse(ctx.to_json(), status_code=201 if ctx.created else 200)

    async def register_execution(self, request: Request) -> JSONResponse:
        caller = self.event_caller(request)
        cmd = (await self.parse(request, RegisterExecutionIn)).of_task(request.path_params["task_id"])
        ctx = await run_in_threadpool(self.service.register_execution, caller, cmd)
        self.changes.bound(caller, [cmd], [ctx], request.headers.get("traceparent"), "http")
        return JSONResponse(ctx.to_json(), status_code=201 if ctx.created else 200)

    async def bind_executions(self, request: Request) -> JSONResponse:
        """Many activations and registrations in one transaction; one result per item, with the
        status it would have had alone (``status``) so a client handles it as it handles that answer."""
        caller = self.event_caller(request)
        body = await self.parse(request, BindBatchIn)
        bindings = [item.command() for item in body.items]
        outcomes = await run_in_threadpool(self.service.bind_executions, [(caller, b) for b in bindings])
        trace = request.headers.get("traceparent")
        self.changes.bound(caller, bindings, outcomes, trace, "http")
        return JSONResponse({"results": binding_results(outcomes)})

    async def report_event(self, request: Request) -> JSONResponse:
        caller = self.event_caller(request)
        cmd = (await self.parse(request, EventIn)).command()
        trace = request.headers.get("traceparent")
        return JSONResponse(await self.changes.submitted(self.committer, caller, cmd, trace, "http"))

    async def report_events(self, request: Request) -> JSONResponse:
        started = time.perf_counter()
        caller = self.event_caller(request)
        body = await self.parse(request, EventBatchIn)
        beating = heartbeat_caller(caller) if body.heartbeats else None
        bindings, commands, beats = body.commands()  # the whole batch parsed first: a refusal applies nothing
        trace = request.headers.get("traceparent")
        answer: dict[str, Any] = {}
        if bindings:  # before the events: a pass's new executions, then what the bound ones said
            outcomes = await run_in_threadpool(self.service.bind_executions, [(caller, b) for b in bindings])
            self.changes.bound(caller, bindings, outcomes, trace, "http")
            answer["bindings"] = binding_results(outcomes)
        results = await run_in_threadpool(self.service.report_events, caller, commands) if commands else []
        if commands:
            self.changes.ingest_time(started, "http", "batch")
        self.changes.batch(caller, commands, results, trace, "http")
        answer["results"] = results
        if beating is not None:
            answer["heartbeats"] = await self.record_heartbeats(beating, beats)
        return JSONResponse(answer)

    async def heartbeats(self, request: Request) -> JSONResponse:
        caller = self.service_principal(request)
        body = await self.gate.parse(request, HeartbeatBatchIn)
        return JSONResponse(await self.record_heartbeats(caller, [h.command() for h in body.heartbeats]))

    async def record_heartbeats(self, caller: ServicePrincipal, beats: list[c.Heartbeat]) -> BeatsAnswer:
        result = await run_in_threadpool(self.service.record_heartbeats, caller, beats)
        self.changes.heartbeats(result["results"], "http")
        return result

    async def set_temporal_owner(self, request: Request) -> JSONResponse:
        caller = self.service_principal(request)
        owner = (await self.parse(request, TemporalOwnerIn)).command()
        task_id = request.path_params["task_id"]
        return JSONResponse(await run_in_threadpool(self.service.set_temporal_owner, caller, task_id, owner))

    async def classify(self, request: Request) -> JSONResponse:
        caller = self.service_principal(request)
        body = await self.parse(request, ClassifyIn)
        expected = _if_match_version(request.headers.get("if-match"))
        cmd = c.Classify(
            task_id=request.path_params["task_id"],
            expected_version=expected,
            product_id=body.product_id,
            task_type=body.task_type,
            status_definition_version=body.status_definition_version,
            fields=frozenset(body.model_dump(by_alias=True, exclude_unset=True)),
        )
        return JSONResponse(await run_in_threadpool(self.service.classify, caller, cmd))

    async def acl(self, request: Request) -> JSONResponse:
        caller = self.service_principal(request)
        p = request.path_params
        if request.method == "PUT":
            body = await self.parse(request, AclIn, empty=True)
            result = await run_in_threadpool(
                self.service.grant_access, caller, p["task_id"], p["principal_type"], p["principal_id"], body.permission
            )
        else:
            result = await run_in_threadpool(
                self.service.revoke_access, caller, p["task_id"], p["principal_type"], p["principal_id"]
            )
        return JSONResponse(result)

    async def broadcast(self, request: Request) -> JSONResponse:
        caller = self.service_principal(request)
        body = await self.parse(request, BroadcastIn)
        result = await run_in_threadpool(
            lambda: self.service.broadcast(
                caller,
                broadcast_id=body.broadcast_id,
                audience=body.audience,
                level=body.level,
                text=body.text,
                project_id=body.project_id,
                user_ids=body.user_ids,
            )
        )
        return JSONResponse(result, status_code=200 if result["duplicate"] else 201)

    async def put_definitions(self, request: Request) -> JSONResponse:
        caller = self.service_principal(request)
        raw = await self.gate.body(request)
        if not isinstance(raw, dict) or set(raw) - {"operations", "statuses"}:
            raise Invalid("the body must be an object with 'operations' and/or 'statuses'")
        return JSONResponse(await run_in_threadpool(self.service.put_definitions, caller, raw))

    # ------------------------------------------------------------ public API
    async def get_task(self, request: Request) -> JSONResponse:
        user = self.user(request)
        return JSONResponse(await run_in_threadpool(self.service.get_task, user, request.path_params["task_id"]))

    async def task_events(self, request: Request) -> JSONResponse:
        user = self.user(request)
        after = int_param(request, "afterTaskVersion", 0)
        limit = int_param(request, "limit", 100)
        result = await run_in_threadpool(self.service.task_events, user, request.path_params["task_id"], after, limit)
        return JSONResponse(result)

    async def batch_get(self, request: Request) -> JSONResponse:
        user = self.user(request)
        body = await self.parse(request, BatchGetIn)
        known = {k: int(v) for k, v in body.knownVersions.items()}
        return JSONResponse(await run_in_threadpool(self.service.batch_get, user, body.taskIds, known))

    async def my_tasks(self, request: Request) -> JSONResponse:
        user = self.user(request)
        cursor = request.query_params.get("cursor") or None
        if cursor is not None and len(cursor) > 512:
            raise Invalid("cursor is not valid")
        limit = int_param(request, "limit", 50)
        status = request.query_params.get("status") or None
        title = request.query_params.get("q") or None
        return JSONResponse(await run_in_threadpool(self.service.my_tasks, user, cursor, limit, status, title))

    async def workflows(self, request: Request) -> JSONResponse:
        user = self.user(request)
        body = await self.parse(request, WorkflowBatchGetIn)
        return JSONResponse(await run_in_threadpool(self.service.workflow_summaries, user, body.workflowIds))

    async def workflow(self, request: Request) -> JSONResponse:
        user = self.user(request)
        result = await run_in_threadpool(
            self.service.get_workflow, user, request.path_params["workflow_id"], with_tasks=False
        )
        return JSONResponse(result)

    async def workflow_tasks(self, request: Request) -> JSONResponse:
        user = self.user(request)
        result = await run_in_threadpool(
            self.service.get_workflow, user, request.path_params["workflow_id"], with_tasks=True
        )
        return JSONResponse(result)

    # ------------------------------------------------------------ realtime
    def session_id(self, request: Request, user: UserPrincipal) -> str:
        """The realtime session: the login's ``sid`` claim, else a hash of the credential."""
        if user.session_id:
            return f"{user.subject}:{user.session_id}"
        return f"{user.subject}:{hashlib.sha256(self.gate.bearer(request).encode()).hexdigest()[:32]}"

    async def realtime_session(self, request: Request) -> JSONResponse:
        user = self.user(request)
        return JSONResponse(self.realtime.session(user))

    async def subscription_token(self, request: Request) -> JSONResponse:
        user = self.user(request)
        body = await self.parse(request, SubscriptionIn)
        if body.broadcast is not None or body.projectId is not None:
            if body.taskId or body.workflowId or (body.broadcast and body.projectId):
                raise Invalid("send exactly one of taskId, workflowId, projectId or broadcast")
            return JSONResponse(self.realtime.broadcast_token(user, scope=body.broadcast, project_id=body.projectId))
        result = await run_in_threadpool(
            self.realtime.subscription_token,
            user,
            self.session_id(request, user),
            task_id=body.taskId,
            workflow_id=body.workflowId,
        )
        return JSONResponse(result)

    async def release_subscription(self, request: Request) -> JSONResponse:
        user = self.user(request)
        body = await self.parse(request, ReleaseIn)
        return JSONResponse(
            await run_in_threadpool(self.realtime.release, self.session_id(request, user), body.channel)
        )


def _if_match_version(header: str | None) -> int | None:
    """``If-Match: "task-version-N"`` → N."""
    if header is None:
        return None
    value = header.strip().removeprefix("W/").strip('"')
    prefix = "task-version-"
    if not value.startswith(prefix) or not is_ascii_digits(value[len(prefix) :]) or len(value) > len(prefix) + 18:
        raise Invalid('If-Match must look like "task-version-N"')
    return int(value[len(prefix) :])


def routes(api: Api) -> list[Route]:
    return [
        # The routes every activity calls, first: Starlette tries routes in order, a pattern each.
        Route("/internal/v1/task-events", api.report_event, methods=["POST"]),
        Route("/internal/v1/task-events:batch", api.report_events, methods=["POST"]),
        Route("/internal/v1/executions:bind", api.bind_executions, methods=["POST"]),
        Route("/internal/v1/task-heartbeats:batch", api.heartbeats, methods=["POST"]),
        Route("/internal/v1/workflows", api.create_workflow, methods=["POST"]),
        Route("/internal/v1/workflows/{workflow_id}/tasks", api.add_task, methods=["POST"]),
        Route("/internal/v1/tasks/{task_id}/steps/{step_id}:activate", api.activate_step, methods=["POST"]),
        Route("/internal/v1/tasks/{task_id}/executions:register", api.register_execution, methods=["POST"]),
        Route("/internal/v1/tasks/{task_id}/classification", api.classify, methods=["PATCH"]),
        Route("/internal/v1/tasks/{task_id}/temporal-owner", api.set_temporal_owner, methods=["PUT"]),
        Route("/internal/v1/tasks/{task_id}/acl/{principal_type}/{principal_id}", api.acl, methods=["PUT", "DELETE"]),
        Route("/internal/v1/definitions", api.put_definitions, methods=["PUT"]),
        Route("/internal/v1/broadcasts", api.broadcast, methods=["POST"]),
        *ReferenceEndpoints(api.gate).routes(),
        *CorrectionEndpoints(api.gate).routes(),
        *NotificationEndpoints(api.gate).routes(),
        *StreamEndpoints(api.gate, api.realtime, api.settings).routes(),
        *TelemetryEndpoints(api.gate).routes(),
        Route("/api/tasks/status:batchGet", api.batch_get, methods=["POST"]),
        Route("/api/workflows:batchGet", api.workflows, methods=["POST"]),
        Route("/api/tasks/{task_id}/events", api.task_events, methods=["GET"]),
        Route("/api/tasks/{task_id}", api.get_task, methods=["GET"]),
        Route("/api/me/tasks", api.my_tasks, methods=["GET"]),
        Route("/api/workflows/{workflow_id}/tasks", api.workflow_tasks, methods=["GET"]),
        Route("/api/workflows/{workflow_id}", api.workflow, methods=["GET"]),
        Route("/api/realtime/session", api.realtime_session, methods=["GET"]),
        Route("/api/realtime/subscription-token", api.subscription_token, methods=["POST"]),
        Route("/api/realtime/subscription-token:release", api.release_subscription, methods=["POST"]),
    ]


def dashboard_routes(settings: Settings) -> list[BaseRoute]:
    """The built dashboard (static files from web/dist) at /dashboard/, and / pointing at it."""
    directory = settings.dashboard_dir
    if directory is None:
        return []

    async def to_dashboard(_: Request) -> Response:
        return RedirectResponse("/dashboard/", status_code=307)

    if not (directory / "index.html").is_file():

        async def not_built(_: Request) -> JSONResponse:
            message = f"the dashboard is not built ({directory}); run: scripts/web build"
            return JSONResponse(error_body("NOT_FOUND", message), status_code=404)

        return [Route("/", to_dashboard), Route("/dashboard", not_built), Route("/dashboard/{path:path}", not_built)]
    static = StaticFiles(directory=directory, html=True)
    return [Route("/", to_dashboard), Mount("/dashboard", static, name="dashboard")]


class _ContractCORS(CORSMiddleware):
    """Starlette's CORS, with a refused preflight answered as every refusal is: the contract's
    error object (403 PERMISSION_DENIED, saying what was refused), not a text/plain 400."""

    def preflight_response(self, request_headers: Headers) -> Response:
        answer = super().preflight_response(request_headers)
        if answer.status_code < 400:
            return answer
        refused = bytes(answer.body).decode("utf-8", "replace").removeprefix("Disallowed CORS ")
        headers = {k: v for k, v in answer.headers.items() if k.lower() not in ("content-length", "content-type")}
        return JSONResponse(
            error_body("PERMISSION_DENIED", f"this cross-origin request is not allowed ({refused})"),
            status_code=403,
            headers=headers,
        )


def cross_origin(settings: Settings) -> list[Middleware]:
    """CORS for pages on the configured other origins only (none: same origin, behind a proxy, and
    a preflight is the 405 any unknown method gets). Credentials are bearer headers, never cookies,
    so the answers are not credentialed; preflights are answered before anything else runs."""
    if not settings.cors_allowed_origins:
        return []
    return [
        Middleware(
            _ContractCORS,
            allow_origins=list(settings.cors_allowed_origins),
            allow_methods=["GET", "POST", "PUT", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "If-Match", "traceparent"],
            expose_headers=["Retry-After"],
            max_age=600,
        )
    ]


def create_app(settings: Settings, engine: sa.Engine | None = None, service: StatusService | None = None) -> Starlette:
    """The application over the composition root's parts (``service``: one built there already)."""
    parts = Components(settings, engine)
    if service is not None:
        parts.service = service
    return app_of(parts)


def app_of(parts: Components) -> Starlette:
    settings, engine, service = parts.settings, parts.engine, parts.service
    api = Api(parts)
    openapi = build_openapi()

    async def healthz(_: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(_: Request) -> JSONResponse:
        # Hysteresis and draining (status.domain.readiness): one failed probe is no reason to leave
        # the load balancer, and a replica that received SIGTERM says so before it stops.
        state = await run_in_threadpool(parts.readiness.check)
        metrics.READY.set(1 if state.ready else 0)
        metrics.DRAINING.set(1 if state.draining else 0)
        database = "up" if state.failures == 0 and state.started else "down"
        if state.ready:
            return JSONResponse({"status": "ok", "database": database})
        status = "draining" if state.draining else "unavailable"
        return JSONResponse({"status": status, "database": database, "reason": state.reason}, status_code=503)

    async def openapi_json(_: Request) -> JSONResponse:
        return JSONResponse(openapi)

    async def metrics_endpoint(_: Request) -> Response:
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    async def http_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        code = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(exc.status_code, "VALIDATION_FAILED")
        return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        grpc_server = None
        if settings.grpc_port:
            from status.api.grpc_server import start_grpc_server

            grpc_server, app.state.grpc_port = await start_grpc_server(
                api.gate, api.grpc_committer, api.changes, settings.grpc_host, settings.grpc_port
            )
        try:
            yield
        finally:
            if grpc_server is not None:
                await grpc_server.stop(grace=2)

    app = Starlette(
        lifespan=lifespan,
        middleware=[
            # Outermost but for Starlette's own error handler (an unhandled error still counts).
            Middleware(CountAnswers),
            *cross_origin(settings),
            Middleware(CloseWhileDraining, readiness=parts.readiness),
            Middleware(
                RequestDeadline,
                seconds=settings.request_deadline_seconds,
                exempt=frozenset({"/api/v1/me/task-stream"}),
            ),
        ],
        routes=[
            *routes(api),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/openapi.json", openapi_json),
            Route("/metrics", metrics_endpoint),
            *dashboard_routes(settings),
        ],
        exception_handlers={
            DomainError: domain_error_handler,
            HTTPException: http_error,
            Exception: unexpected_error_handler,
        },
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.service = service
    app.state.api = api
    app.state.parts = parts
    return app
