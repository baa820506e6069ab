"""The gRPC adapter (``task_status_wire/task_events.proto``): authentication, decoding and
protocol-level error mapping only (design D4).  Each message becomes the command
REST builds for the same body, checked field by field by REST's own field types
(``status.api.proto_commands``), and runs through the same application service, so the same
eventId gets the same result and taskVersion over REST, REST batch and gRPC.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
from starlette.concurrency import run_in_threadpool
from task_status_wire import convert
from task_status_wire import task_events_pb2 as pb
from task_status_wire import task_events_pb2_grpc as pb_grpc

from status import logs
from status.api import metrics, proto_commands
from status.api.changes import ChangeLog
from status.api.deadline import MESSAGE as DEADLINE_MESSAGE
from status.api.errors import HTTP_STATUS, binding_results, status_for, unexpected_error
from status.api.gate import Gate, heartbeat_caller
from status.app import commands as c
from status.app.answers import EventAccepted, EventAnswer, refused
from status.app.beats import BeatsAnswer
from status.app.group_commit import GroupCommitter
from status.app.service import EventCaller
from status.domain.auth import ExecutionClaims, Role, ServicePrincipal
from status.domain.errors import (
    DomainError,
    ErrorCode,
    Forbidden,
    Invalid,
    NotFound,
    Unauthenticated,
    Unavailable,
)

log = logs.get("status.grpc")
R = TypeVar("R")

# The HTTP statuses of the error table, as gRPC status codes.
GRPC_STATUS = {
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    409: grpc.StatusCode.FAILED_PRECONDITION,
    413: grpc.StatusCode.INVALID_ARGUMENT,
    422: grpc.StatusCode.INVALID_ARGUMENT,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    503: grpc.StatusCode.UNAVAILABLE,
}
assert set(HTTP_STATUS.values()) <= set(GRPC_STATUS)
MAX_REFS_PER_STREAM = 10_000


def _rejection(err: DomainError) -> pb.Rejection:
    return pb.Rejection(code=err.code.value, message=err.message, retryable=err.retryable)


def _bearer(context: grpc.aio.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == "authorization":
            scheme, _, token = str(value).partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    raise Unauthenticated("a Bearer credential is required in the authorization metadata")


def _trace(context: grpc.aio.ServicerContext) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == "traceparent":
            return str(value)
    return None


class TaskEventsService(pb_grpc.TaskEventsServicer):
    def __init__(self, gate: Gate, committer: GroupCommitter, changes: ChangeLog) -> None:
        self.gate = gate
        self.service = gate.service
        # Its own group committer (same service method as REST's): groups never span event loops.
        self.committer = committer
        # The same counters, latency histogram and change log as REST (transport "grpc").
        self.changes = changes

    async def _submit(self, caller: EventCaller, cmd: c.ReportEvent, trace: str | None) -> EventAccepted:
        """One event through the group committer, counted and logged as REST counts and logs it."""
        return await self.changes.submitted(self.committer, caller, cmd, trace, "grpc")

    async def _abort(self, context: grpc.aio.ServicerContext, method: str, err: DomainError) -> None:
        metrics.GRPC_CALLS.labels(method=method, code=err.code.value).inc()
        context.set_trailing_metadata(
            (("task-status-error-code", err.code.value), ("task-status-retryable", str(err.retryable).lower()))
        )
        await context.abort(GRPC_STATUS[status_for(err)], err.message)

    async def _abort_unexpected(self, context: grpc.aio.ServicerContext, method: str, exc: Exception) -> None:
        """As on REST: UNAVAILABLE when retrying can help, otherwise INTERNAL and not retryable."""
        transient = unexpected_error(exc)
        if transient is not None:
            await self._abort(context, method, transient)
        log.exception("unhandled error in gRPC %s", method)
        metrics.GRPC_CALLS.labels(method=method, code="INTERNAL").inc()
        context.set_trailing_metadata((("task-status-error-code", "INTERNAL"), ("task-status-retryable", "false")))
        await context.abort(grpc.StatusCode.INTERNAL, "internal error (reported to operators)")

    async def _answer(self, context: grpc.aio.ServicerContext, method: str, work: Callable[[], Awaitable[R]]) -> R:
        """A unary call's answer: what ``work`` returns, or the abort a REST client would have had
        as a response (the stable code in the trailing metadata). A call past REQUEST_DEADLINE_SECONDS
        is answered UNAVAILABLE (retryable), as REST answers 503 (status.api.deadline)."""
        deadline = self.gate.settings.request_deadline_seconds
        limit = asyncio.timeout(deadline if deadline > 0 else None)
        try:
            async with limit:
                answer = await work()
        except TimeoutError as exc:
            if not limit.expired():
                await self._abort_unexpected(context, method, exc)
                raise AssertionError("unreachable") from exc
            metrics.DEADLINE_EXCEEDED.labels(transport="grpc").inc()
            await self._abort(context, method, Unavailable(DEADLINE_MESSAGE))
            raise AssertionError("unreachable") from exc
        except DomainError as err:
            await self._abort(context, method, err)
            raise AssertionError("unreachable") from err
        except Exception as exc:
            await self._abort_unexpected(context, method, exc)
            raise AssertionError("unreachable") from exc  # abort raises
        metrics.GRPC_CALLS.labels(method=method, code="OK").inc()
        return answer

    async def ReportEvent(self, request: pb.Event, context: grpc.aio.ServicerContext) -> pb.EventResult:
        async def work() -> pb.EventResult:
            caller = self.gate.event_caller_of(_bearer(context))
            cmd = proto_commands.report_event(request)
            return convert.result_to_proto(await self._submit(caller, cmd, _trace(context)))

        return await self._answer(context, "ReportEvent", work)

    async def ReportEvents(self, request: pb.EventBatch, context: grpc.aio.ServicerContext) -> pb.EventBatchResult:
        async def work() -> pb.EventBatchResult:
            started = time.perf_counter()
            caller = self.gate.event_caller_of(_bearer(context))
            bindings, commands, beats = proto_commands.event_batch(request)  # all read first: a refusal applies nothing
            beating = heartbeat_caller(caller) if beats else None
            bound: list[dict[str, Any]] = []
            if bindings:  # before the events, as on REST
                outcomes = await run_in_threadpool(self.service.bind_executions, [(caller, b) for b in bindings])
                self.changes.bound(caller, bindings, outcomes, _trace(context), "grpc")
                bound = binding_results(outcomes)
            results = await run_in_threadpool(self.service.report_events, caller, commands) if commands else []
            if commands:
                self.changes.ingest_time(started, "grpc", "batch")
            self.changes.batch(caller, commands, results, _trace(context), "grpc")
            reply = pb.EventBatchResult(results=[convert.result_to_proto(r) for r in results])
            if bound:
                reply.bindings.extend(convert.bind_results_to_proto(bound).results)
            if beating is not None:
                recorded = await run_in_threadpool(self.service.record_heartbeats, beating, beats)
                self.changes.heartbeats(recorded["results"], "grpc")
                reply.heartbeats.CopyFrom(_heartbeat_reply(recorded))
            return reply

        return await self._answer(context, "ReportEvents", work)

    async def BindExecutions(self, request: pb.BindBatch, context: grpc.aio.ServicerContext) -> pb.BindBatchResult:
        async def work() -> pb.BindBatchResult:
            caller = self.gate.event_caller_of(_bearer(context))
            bindings = proto_commands.bind_batch(request)
            outcomes = await run_in_threadpool(self.service.bind_executions, [(caller, b) for b in bindings])
            self.changes.bound(caller, bindings, outcomes, _trace(context), "grpc")
            return convert.bind_results_to_proto(binding_results(outcomes))

        return await self._answer(context, "BindExecutions", work)

    async def RecordHeartbeats(
        self, request: pb.HeartbeatBatch, context: grpc.aio.ServicerContext
    ) -> pb.HeartbeatBatchResult:
        async def work() -> pb.HeartbeatBatchResult:
            caller = self.gate.service_principal_of(_bearer(context))
            beats = proto_commands.heartbeat_batch(request)
            recorded = await run_in_threadpool(self.service.record_heartbeats, caller, beats)
            self.changes.heartbeats(recorded["results"], "grpc")
            return _heartbeat_reply(recorded)

        return await self._answer(context, "RecordHeartbeats", work)

    async def Stream(
        self, request_iterator: AsyncIterator[pb.StreamRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.StreamResponse]:
        try:
            bearer = _bearer(context)
            principal = self.gate.service_principal_of(bearer)
            if not principal.has(Role.WORKER):
                raise Forbidden("the stream needs a service token with the WORKER role")
        except DomainError as err:
            await self._abort(context, "Stream", err)
            return
        # ref → (execution token, its claims): this connection's short numbers, gone with it.
        bound: dict[int, tuple[str, ExecutionClaims]] = {}
        async for request in request_iterator:
            metrics.GRPC_CALLS.labels(method="Stream", code=request.WhichOneof("body") or "").inc()
            try:
                # The stream's credential is checked again for every message (revocation lists and
                # expiry, from memory): a credential revoked while the stream is open stops it.
                self.gate.service_tokens.verify(bearer)
            except DomainError as err:
                await self._abort(context, "Stream", err)
                return
            try:
                yield await self._stream_item(principal, bound, request)
            except DomainError as err:
                yield pb.StreamResponse(request_id=request.request_id, error=_rejection(err))

    async def _stream_item(
        self, principal: ServicePrincipal, bound: dict[int, tuple[str, ExecutionClaims]], request: pb.StreamRequest
    ) -> pb.StreamResponse:
        kind = request.WhichOneof("body")
        if kind == "bind":
            token = request.bind.execution_token
            claims = self.service.resolve_caller(token, self.gate.service_tokens)
            if not isinstance(claims, ExecutionClaims):
                raise Invalid("bind takes an execution token")
            if claims.tenant_id != principal.tenant_id:
                raise NotFound("unknown execution")
            if len(bound) >= MAX_REFS_PER_STREAM:
                raise Invalid(f"at most {MAX_REFS_PER_STREAM} executions per stream; open another")
            ref = len(bound) + 1
            bound[ref] = (token, claims)
            return pb.StreamResponse(
                request_id=request.request_id,
                bound=pb.Bound(
                    ref=ref, execution_id=claims.execution_id, task_id=claims.task_id, step_id=claims.step_id
                ),
            )
        if kind == "event":
            token, claims = self._ref(bound, request.event.ref)
            self.gate.rate_limiter.check(f"{claims.tenant_id}/{claims.producer_id}")
            cmd = proto_commands.report_event(request.event.event)
            result: EventAnswer
            try:
                result = await self._submit(claims, cmd, None)
            except DomainError as err:
                result = refused(cmd.event_id, err)
            return pb.StreamResponse(request_id=request.request_id, event=convert.result_to_proto(result))
        if kind == "heartbeat":
            token, _ = self._ref(bound, request.heartbeat.ref)
            observed = request.heartbeat.observed_at if request.heartbeat.HasField("observed_at") else None
            beat = proto_commands.heartbeat(request.heartbeat.heartbeat_seq, observed, execution_token=token)
            beaten = await run_in_threadpool(self.service.record_heartbeats, principal, [beat])
            self.changes.heartbeats(beaten["results"], "grpc")
            return pb.StreamResponse(
                request_id=request.request_id, heartbeat=convert.heartbeat_result_to_proto(beaten["results"][0])
            )
        raise Invalid("a stream request carries bind, event or heartbeat")

    def _ref(self, bound: dict[int, tuple[str, ExecutionClaims]], ref: int) -> tuple[str, ExecutionClaims]:
        found = bound.get(ref)
        if found is None:
            # After a reconnect every execution must be bound again: numbers never outlive a stream.
            raise NotFound(f"ref {ref} is not bound on this stream; bind the execution first")
        if found[1].expires_at <= self.service.now():  # as REST answers for the same token
            raise Forbidden("the execution token has expired; bind a fresh one", ErrorCode.TOKEN_EXPIRED)
        return found


def _heartbeat_reply(result: BeatsAnswer) -> pb.HeartbeatBatchResult:
    return pb.HeartbeatBatchResult(
        results=[convert.heartbeat_result_to_proto(r) for r in result["results"]],
        received_at=result["receivedAt"],
    )


async def start_grpc_server(
    gate: Gate, committer: GroupCommitter, changes: ChangeLog, host: str, port: int
) -> tuple[grpc.aio.Server, int]:
    """Serve the adapter on host:port (0: any free port); returns the server and its port."""
    server = grpc.aio.server(options=[("grpc.so_reuseport", 1), ("grpc.max_receive_message_length", 4 << 20)])
    pb_grpc.add_TaskEventsServicer_to_server(TaskEventsService(gate, committer, changes), server)  # type: ignore[no-untyped-call]
    bound_port = server.add_insecure_port(f"{host}:{port}")
    await server.start()
    log.info("gRPC adapter listening", address=f"{host}:{bound_port}")
    return server, bound_port
