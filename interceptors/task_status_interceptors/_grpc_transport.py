"""The plugin's reports over the service's gRPC adapter (``TaskStatusPlugin(..., grpc_target=...)``):
event batches, heartbeats and batches of bindings as protobuf, with the same semantics as REST."""

from __future__ import annotations

import logging
from typing import Any

from task_status_interceptors._transport import BatchRefused, CredentialRefused, PassAnswer, TransportError

log = logging.getLogger("task_status_interceptors.reporter")


class GrpcTransport:
    """Events, heartbeats and bindings over the service's gRPC adapter (the same semantics as REST)."""

    def __init__(self, target: str, service_token: str, timeout: float) -> None:
        import grpc  # only workers that choose gRPC need grpcio
        from task_status_wire import convert
        from task_status_wire import task_events_pb2 as pb
        from task_status_wire import task_events_pb2_grpc as pb_grpc

        self._grpc, self._convert, self._pb = grpc, convert, pb
        self._channel = grpc.insecure_channel(target)
        self._stub = pb_grpc.TaskEventsStub(self._channel)  # type: ignore[no-untyped-call]
        self._metadata = (("authorization", f"Bearer {service_token}"),)
        self._timeout = timeout

    def report_events(
        self, body: list[dict[str, Any]], beats: list[dict[str, Any]] | None = None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        request = self._pb.EventBatch(
            events=[self._convert.event_from_json(e) for e in body],
            heartbeats=[self._convert.heartbeat_from_json(b) for b in beats or ()],
        )
        try:
            reply = self._stub.ReportEvents(request, metadata=self._metadata, timeout=self._timeout)
        except self._grpc.RpcError as exc:
            # Unavailable, overloaded, a refused credential: the events stay queued (as on REST).
            raise TransportError(f"gRPC {exc.code().name}") from exc
        results = [self._convert.result_to_json(r) for r in reply.results]
        # A service from before heartbeats rode in this call ignores them: no answer for them then.
        if not beats or not reply.HasField("heartbeats"):
            return results, None
        return results, [self._convert.heartbeat_result_to_json(r) for r in reply.heartbeats.results]

    def report_pass(
        self, bindings: list[dict[str, Any]], body: list[dict[str, Any]], beats: list[dict[str, Any]]
    ) -> PassAnswer:
        request = self._pb.EventBatch(
            bindings=self._convert.bind_items_from_json(bindings),
            events=[self._convert.event_from_json(e) for e in body],
            heartbeats=[self._convert.heartbeat_from_json(b) for b in beats],
        )
        try:
            reply = self._stub.ReportEvents(request, metadata=self._metadata, timeout=self._timeout)
        except self._grpc.RpcError as exc:
            if exc.code() == self._grpc.StatusCode.INVALID_ARGUMENT:  # well-formed: a service from before
                raise BatchRefused(f"gRPC INVALID_ARGUMENT: {exc.details()}") from exc
            if exc.code().name in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
                raise CredentialRefused(f"gRPC {exc.code().name}: {exc.details()}") from exc
            raise TransportError(f"gRPC {exc.code().name}") from exc
        results = [self._convert.result_to_json(r) for r in reply.results]
        # A service from before bindings rode in this call ignores them (and heartbeats likewise).
        bound = [(int(r.status), self._convert.bind_result_to_json(r)) for r in reply.bindings] or None
        beaten = None
        if beats and reply.HasField("heartbeats"):
            beaten = [self._convert.heartbeat_result_to_json(r) for r in reply.heartbeats.results]
        return bound, results, beaten

    def record_heartbeats(self, beats: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        request = self._pb.HeartbeatBatch(heartbeats=[self._convert.heartbeat_from_json(b) for b in beats])
        try:
            reply = self._stub.RecordHeartbeats(request, metadata=self._metadata, timeout=self._timeout)
        except self._grpc.RpcError as exc:
            log.info("heartbeats not delivered (gRPC %s); next round", exc.code().name)
            return None
        return [self._convert.heartbeat_result_to_json(r) for r in reply.results]

    def bind_batch(self, items: list[dict[str, Any]]) -> list[tuple[int, Any]] | None:
        request = self._convert.bind_batch_from_json({"items": items})
        try:
            reply = self._stub.BindExecutions(request, metadata=self._metadata, timeout=self._timeout)
        except self._grpc.RpcError as exc:
            code = exc.code()
            if code == self._grpc.StatusCode.UNIMPLEMENTED:  # a service from before BindExecutions
                return None
            status = _HTTP_STATUS.get(code.name)
            if status is None:  # unavailable, overloaded, timed out: the bindings wait for a retry
                raise TransportError(f"gRPC {code.name}") from exc
            # Refused as a whole (a credential, a malformed batch): every item answers as REST would.
            stable = dict(exc.trailing_metadata() or ()).get("task-status-error-code", code.name)
            return [(status, {"error": {"code": stable, "message": exc.details() or ""}})] * len(items)
        return [(int(r.status), self._convert.bind_result_to_json(r)) for r in reply.results]

    def close(self) -> None:
        self._channel.close()


# The HTTP status a refusal of the whole call would have had on REST (the service's own table, read
# backwards); any other code is a transport problem, retried.
_HTTP_STATUS = {
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "INVALID_ARGUMENT": 422,
    "FAILED_PRECONDITION": 409,
}
