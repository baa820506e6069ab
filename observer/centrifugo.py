"""Publishing to Centrifugo's server HTTP API, with per-publication results.

The relay uses Centrifugo's ``batch`` method directly rather than ``cent``'s
``batch()``: cent 5.2.0 raises ``KeyError`` as soon as one command of a batch
fails, which would hide which publications succeeded.  Here every command gets
its own result, so one bad channel never blocks its neighbours.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

# Centrifugo error codes (v6): which are worth retrying.
UNKNOWN_CHANNEL = 102
BAD_REQUEST = 107
PERMANENT_CODES = frozenset({UNKNOWN_CHANNEL, BAD_REQUEST, 103, 106, 110})


class TransportError(Exception):
    """The whole request failed (network, timeout, 5xx, 429): retry later."""


class Unauthorized(Exception):
    """The API key was refused: a configuration error, not a message's fault."""


@dataclass(frozen=True)
class Publication:
    channel: str
    data: dict[str, Any]
    idempotency_key: str | None = None
    version: int | None = None
    version_epoch: str | None = None


@dataclass(frozen=True)
class PublishResult:
    ok: bool
    permanent: bool = False
    error: str | None = None


class CentrifugoPublisher:
    """An async client for ``POST /api/batch`` (keeps a connection pool)."""

    def __init__(self, api_url: str, api_key: str, timeout: float = 5.0) -> None:
        self._url = api_url.rstrip("/")
        self._client = httpx.AsyncClient(
            headers={"X-API-Key": api_key, "Content-Type": "application/json"},
            timeout=timeout,
            limits=httpx.Limits(max_connections=8, max_keepalive_connections=8),
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def publish_batch(self, publications: Sequence[Publication]) -> list[PublishResult]:
        """Publish in order (``parallel: false`` keeps per-channel order); one result per publication."""
        if not publications:
            return []
        commands = [{"publish": _publish_params(p)} for p in publications]
        try:
            response = await self._client.post(f"{self._url}/batch", json={"commands": commands, "parallel": False})
        except httpx.HTTPError as exc:
            raise TransportError(f"{type(exc).__name__}") from exc
        if response.status_code in (401, 403):
            raise Unauthorized("Centrifugo refused the API key")
        if response.status_code == 429 or response.status_code >= 500:
            raise TransportError(f"HTTP {response.status_code}")
        if response.status_code != 200:
            raise TransportError(f"unexpected HTTP {response.status_code}")
        try:
            body = response.json()
        except ValueError as exc:
            raise TransportError("the reply was not JSON") from exc
        if "error" in body:
            raise TransportError(f"batch error {body['error'].get('code')}")
        replies = body.get("replies") or []
        if len(replies) != len(publications):
            raise TransportError("the reply count does not match the commands")
        return [_result(reply) for reply in replies]

    async def broadcast(
        self, channels: Sequence[str], data: dict[str, Any], idempotency_key: str
    ) -> list[PublishResult]:
        """One payload to many channels (used for large audiences); one result per channel."""
        try:
            response = await self._client.post(
                f"{self._url}/broadcast",
                json={"channels": list(channels), "data": data, "idempotency_key": idempotency_key},
            )
        except httpx.HTTPError as exc:
            raise TransportError(type(exc).__name__) from exc
        if response.status_code != 200:
            raise TransportError(f"HTTP {response.status_code}")
        responses = response.json().get("result", {}).get("responses", [])
        return [_result(r) for r in responses]


def _publish_params(p: Publication) -> dict[str, Any]:
    params: dict[str, Any] = {"channel": p.channel, "data": p.data}
    if p.idempotency_key:
        params["idempotency_key"] = p.idempotency_key
    if p.version is not None:
        params["version"] = p.version
        if p.version_epoch:
            params["version_epoch"] = p.version_epoch
    return params


def _result(reply: dict[str, Any]) -> PublishResult:
    error = reply.get("error")
    if not error:
        return PublishResult(ok=True)
    code = int(error.get("code", 100))
    return PublishResult(ok=False, permanent=code in PERMANENT_CODES, error=f"centrifugo error {code}")
