"""How reports travel: one interface for the service's REST API and its gRPC adapter.

A transport only moves bodies and answers; what to do with an answer (drop, keep,
rebind, back off) is the reporter's policy. Its calls block: only the reporter's own
sender thread makes them, never the worker's event loop. A sender's pass is one call:
the events batch carries the pass's bindings, each with its events (``report_pass``).
From a service without that, bindings go over the events' transport: gRPC
``BindExecutions`` (any number), or REST (``executions:bind`` for several, a step's own
activate/register call for one); a gRPC adapter without ``BindExecutions`` gets them
over REST.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from task_status_interceptors._http_client import KeptAliveClient, Reply, RequestFailed

log = logging.getLogger("task_status_interceptors.reporter")


class TransportError(Exception):
    """The service could not be reached or answered for the whole request: the reports stay queued."""


class BatchRefused(TransportError):
    """The service refused the request as a whole as malformed (a service from before a field the
    request used: heartbeats or bindings riding in an events batch)."""


class CredentialRefused(TransportError):
    """The service refused the worker's credential for the whole request (HTTP 401 or 403)."""


# (per binding: the HTTP status it would have had alone and its answer — None when the service
# did not answer for bindings —, one result per event, the heartbeats' answers or None)
PassAnswer = tuple[list[tuple[int, Any]] | None, list[dict[str, Any]], list[dict[str, Any]] | None]


class Transport(Protocol):
    def report_events(
        self, body: list[dict[str, Any]], beats: list[dict[str, Any]] | None = None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        """One result per event, in order, and with ``beats`` one per heartbeat (None when the
        service did not answer for them); raises ``TransportError`` when nothing was decided."""
        ...

    def report_pass(
        self, bindings: list[dict[str, Any]], body: list[dict[str, Any]], beats: list[dict[str, Any]]
    ) -> PassAnswer:
        """A sender's pass in one request: ``bindings`` (each with its own events) bound first, then
        ``body``'s events, with ``beats``; raises ``BatchRefused`` when the service takes no
        bindings there, ``TransportError`` when nothing was decided."""
        ...

    def record_heartbeats(self, beats: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """One result per heartbeat, or None when the round was not delivered (the next one is)."""
        ...

    def bind_batch(self, items: list[dict[str, Any]]) -> list[tuple[int, Any]] | None:
        """Bind many executions in one call: (the HTTP status each would have had alone, its answer)
        per item; None when the service has no such call; raises ``TransportError`` when unreachable."""
        ...

    def close(self) -> None: ...


class HttpTransport:
    """Events, heartbeats and binds over the service's REST API, on one kept-alive connection."""

    def __init__(self, status_url: str, service_token: str, timeout: float) -> None:
        self.client = KeptAliveClient(status_url, {"Authorization": f"Bearer {service_token}"}, timeout)

    def report_events(
        self, body: list[dict[str, Any]], beats: list[dict[str, Any]] | None = None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        payload: dict[str, Any] = {"events": body, **({"heartbeats": beats} if beats else {})}
        try:
            response = self.client.post("/internal/v1/task-events:batch", payload)
        except RequestFailed as exc:
            raise TransportError(str(exc)) from exc
        if response.status_code == 422 and beats:
            raise BatchRefused(f"HTTP 422: {response.text[:200]}")
        if response.status_code != 200:
            raise TransportError(f"HTTP {response.status_code}: {response.text[:200]}")
        answer = response.json()
        heartbeats = answer.get("heartbeats")
        return answer["results"], heartbeats["results"] if beats and heartbeats else None

    def report_pass(
        self, bindings: list[dict[str, Any]], body: list[dict[str, Any]], beats: list[dict[str, Any]]
    ) -> PassAnswer:
        payload: dict[str, Any] = {"bindings": bindings, "events": body, **({"heartbeats": beats} if beats else {})}
        try:
            response = self.client.post("/internal/v1/task-events:batch", payload)
        except RequestFailed as exc:
            raise TransportError(str(exc)) from exc
        if response.status_code == 422:  # what the plugin writes is well-formed: a service from before
            raise BatchRefused(f"HTTP 422: {response.text[:200]}")
        if response.status_code in (401, 403):
            raise CredentialRefused(f"HTTP {response.status_code}: {response.text[:200]}")
        if response.status_code != 200:
            raise TransportError(f"HTTP {response.status_code}: {response.text[:200]}")
        answer = response.json()
        bound = answer.get("bindings")
        heartbeats = answer.get("heartbeats")
        return (
            None if bound is None else [(int(item.get("status", 500)), item) for item in bound],
            answer["results"],
            heartbeats["results"] if beats and heartbeats else None,
        )

    def record_heartbeats(self, beats: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        try:
            response = self.client.post("/internal/v1/task-heartbeats:batch", {"heartbeats": beats})
        except RequestFailed as exc:
            log.info("heartbeats not delivered (%s); next round", exc)
            return None
        if response.status_code != 200:
            return None
        results: list[dict[str, Any]] = response.json()["results"]
        return results

    def bind(self, path: str, payload: dict[str, Any]) -> Reply:
        """Activate or register an execution; raises ``TransportError`` when the service is unreachable."""
        try:
            return self.client.post(path, payload)
        except RequestFailed as exc:
            raise TransportError(str(exc)) from exc

    def bind_batch(self, items: list[dict[str, Any]]) -> list[tuple[int, Any]] | None:
        response = self.bind("/internal/v1/executions:bind", {"items": items})
        if response.status_code in (404, 405):  # the route itself is unknown (items answer inside a 200)
            return None
        if response.status_code != 200:
            return [(response.status_code, response)] * len(items)
        return [(int(item.get("status", 500)), item) for item in response.json()["results"]]

    def close(self) -> None:
        self.client.close()
