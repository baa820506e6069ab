"""Centrifugo's server API through ``cent`` (publish batches, broadcast, subscribe, unsubscribe, history, presence).

Two things of cent 5.2.0 are contained here so that callers keep one result per
command:

* ``batch()`` raises ``KeyError`` as soon as one command of the batch failed
  (its reply holds ``error`` instead of ``publish``), hiding which
  publications succeeded; it also builds a pydantic ``TypeAdapter`` per reply
  (~250 µs each, more than the publication itself).  Publication batches use a
  ``BatchRequest`` whose ``parse_response`` reads each reply as it is —
  success or Centrifugo error code — and, should a future cent bypass that
  and raise anyway, the batch is re-sent one command at a time.  Re-sending is
  safe: every publication carries its idempotency key.
* cent's request models cost ~30 µs per publication to build and dump, and
  an outbox payload would be decoded from the database only to be encoded
  again.  A batch's HTTP body is assembled here instead, with each payload's
  stored JSON text inlined as it is (``RawJson``), and handed to the aiohttp
  session cent uses through its ``json_serialize`` hook; a single publish
  uses cent's ``PublishRequest``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import aiohttp
from cent import (
    AsyncClient,
    BatchRequest,
    BroadcastRequest,
    CentApiResponseError,
    CentDecodeError,
    CentError,
    CentNetworkError,
    CentTransportError,
    CentUnauthorizedError,
    HistoryRequest,
    PresenceRequest,
    PublishRequest,
    SubscribeRequest,
    UnsubscribeRequest,
)

# Centrifugo error codes (v6): which are never worth retrying.
UNKNOWN_CHANNEL = 102
BAD_REQUEST = 107
PERMANENT_CODES = frozenset({UNKNOWN_CHANNEL, 103, 106, BAD_REQUEST, 110})


class TransportError(Exception):
    """The whole request failed (network, timeout, 5xx, 429, a batch-level error): retry later."""


class Unauthorized(Exception):
    """The API key was refused: a configuration error, not a message's fault."""


class RawJson(str):
    """JSON text that is already encoded (an outbox payload as the database stores it)."""


@dataclass(frozen=True)
class Publication:
    channel: str
    data: dict[str, Any] | RawJson
    idempotency_key: str | None = None
    version: int | None = None
    version_epoch: str | None = None
    # Ask Centrifugo to send a fossil delta to subscribers that negotiated it.
    delta: bool = False
    # Approximate encoded size of ``data`` (bytes), to keep each HTTP request small.
    size_hint: int = 0


@dataclass(frozen=True)
class Broadcast:
    """One message to many channels in one command (Centrifugo's ``broadcast``)."""

    channels: tuple[str, ...]
    data: dict[str, Any] | RawJson
    idempotency_key: str | None = None
    size_hint: int = 0


Command = Publication | Broadcast


@dataclass(frozen=True)
class PublishResult:
    ok: bool
    permanent: bool = False
    error: str | None = None
    # The request itself failed (Centrifugo unreachable, key refused): not this message's fault.
    unreachable: bool = False
    # With ``unreachable``: Centrifugo answered, refusing this command for now while it took
    # others (the relay decides); such refusals count towards a row's attempts.
    counted: bool = False


OK = PublishResult(ok=True)
# Not sent: an earlier command of its channel was refused for now (``publish_batch``).
HELD = PublishResult(ok=False, error="held: an earlier message of its channel was refused for now", unreachable=True)
# One HTTP request carries at most about this much: aiohttp encodes a JSON body in
# one piece on the event loop (and warns past 1 MiB), and smaller requests let the
# first publications of a large drain go out sooner.
MAX_REQUEST_BYTES = 256 * 1024
_COMMAND_OVERHEAD = 160  # channel, keys and JSON punctuation of one publish command, roughly


def _failed(code: int) -> PublishResult:
    return PublishResult(ok=False, permanent=code in PERMANENT_CODES, error=f"centrifugo error {code}")


def _reply_result(reply: Any) -> PublishResult:
    """A command's reply as one result; a broadcast's is its channels' worst: a temporary error
    (the command is worth sending again) before a permanent one."""
    if not isinstance(reply, dict):
        return _failed(100)
    error = reply.get("error")
    if error:
        return _failed(int(error.get("code", 100)))
    broadcast = reply.get("broadcast")
    if isinstance(broadcast, dict):
        results = [
            _failed(int(r["error"].get("code", 100))) for r in broadcast.get("responses") or () if r.get("error")
        ]
        return min(results, key=lambda r: r.permanent, default=OK)
    return OK


class _Body(dict[str, Any]):
    """A request payload whose JSON text is already assembled."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


def _serialize(payload: Any) -> str:
    """The aiohttp session's JSON encoder: assembled bodies as they are, anything else as usual."""
    return payload.text if isinstance(payload, _Body) else json.dumps(payload)


class _PublishBatch(BatchRequest):
    """A batch of publications, encoded once by us; its replies are read one by one.

    A failed command is a result, not an exception.
    """

    @property
    def api_payload(self) -> Any:
        commands = ",".join(_command(p) for p in self.requests)
        return _Body(f'{{"commands":[{commands}],"parallel":{"true" if self.parallel else "false"}}}')

    def parse_response(self, content: str) -> Any:
        try:
            body = json.loads(content)
        except ValueError as exc:
            raise CentDecodeError from exc
        if not isinstance(body, dict):
            raise CentDecodeError
        if body.get("error"):
            raise CentApiResponseError(int(body["error"].get("code", 100)), str(body["error"].get("message", "")))
        replies = body.get("replies")
        if not isinstance(replies, list) or len(replies) != len(self.requests):
            raise CentDecodeError
        return SimpleNamespace(result=[_reply_result(reply) for reply in replies])


def _command(c: Command) -> str:
    if isinstance(c, Broadcast):
        method, params = "broadcast", _broadcast_params(c)
    else:
        method, params = "publish", _params(c)
    data = params.pop("data")
    head = json.dumps(params)
    text = data if isinstance(data, RawJson) else json.dumps(data)
    return f'{{"{method}":{head[:-1]},"data":{text}}}}}'


def _broadcast_params(b: Broadcast) -> dict[str, Any]:
    params: dict[str, Any] = {"channels": list(b.channels), "data": b.data}
    if b.idempotency_key:
        params["idempotency_key"] = b.idempotency_key
    return params


def _params(p: Publication) -> dict[str, Any]:
    params: dict[str, Any] = {"channel": p.channel, "data": p.data}
    if p.idempotency_key:
        params["idempotency_key"] = p.idempotency_key
    # version, version_epoch and delta are not declared by cent 5.2.0's PublishRequest
    # (extra fields pass through).
    if p.version is not None:
        params["version"] = p.version
        if p.version_epoch:
            params["version_epoch"] = p.version_epoch
    if p.delta:
        params["delta"] = True
    return params


def _channels(command: Command) -> tuple[str, ...]:
    return command.channels if isinstance(command, Broadcast) else (command.channel,)


def _waves(commands: Sequence[Command]) -> list[list[tuple[int, Command]]]:
    """The commands (with their indexes) in waves, in which no channel appears twice: a channel's
    commands go in successive waves, in their order, so that waves sent one after the other,
    each in parallel, keep every channel's order (what a channel's subscribers and its history
    see). Commands on channels of their own all go in the first wave."""
    last: dict[str, int] = {}  # channel -> the wave of its latest command
    waves: list[list[tuple[int, Command]]] = []
    for i, command in enumerate(commands):
        channels = _channels(command)
        wave = 1 + max((last.get(channel, -1) for channel in channels), default=-1)
        for channel in channels:
            last[channel] = wave
        if wave == len(waves):
            waves.append([])
        waves[wave].append((i, command))
    return waves


def _chunks(wave: Sequence[tuple[int, Command]]) -> list[list[int]]:
    """A wave's command indexes in runs of about MAX_REQUEST_BYTES each."""
    chunks: list[list[int]] = []
    size = 0
    for i, command in wave:
        cost = (command.size_hint or 1024) + _COMMAND_OVERHEAD
        if isinstance(command, Broadcast):
            cost += sum(len(channel) + 3 for channel in command.channels)
        if chunks and chunks[-1] and size + cost <= MAX_REQUEST_BYTES:
            chunks[-1].append(i)
            size += cost
        else:
            chunks.append([i])
            size = cost
    return chunks


class CentrifugoApi:
    """An async client of one Centrifugo cluster's server API (one aiohttp pool, opened on first use)."""

    def __init__(self, api_url: str, api_key: str, timeout: float = 5.0) -> None:
        self._url = api_url.rstrip("/")
        self._key = api_key
        self._timeout = timeout
        self._client: AsyncClient | None = None

    def _api(self) -> AsyncClient:
        # aiohttp sessions belong to the running event loop: create it there.
        if self._client is None:
            session = aiohttp.ClientSession(json_serialize=_serialize)
            self._client = AsyncClient(self._url, self._key, timeout=self._timeout, session=session)
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    async def _call(self, method: str, request: Any) -> Any:
        try:
            return await getattr(self._api(), method)(request)
        except CentUnauthorizedError as exc:
            raise Unauthorized("Centrifugo refused the API key") from exc
        except CentTransportError as exc:
            if exc.status_code in (401, 403):
                raise Unauthorized("Centrifugo refused the API key") from exc
            raise TransportError(f"HTTP {exc.status_code}") from exc
        except (CentNetworkError, CentDecodeError) as exc:
            raise TransportError(type(exc).__name__) from exc
        except CentError as exc:
            if isinstance(exc, CentApiResponseError):
                raise
            raise TransportError(type(exc).__name__) from exc

    async def publish_batch(self, commands: Sequence[Command]) -> list[PublishResult]:
        """Publish and broadcast, each channel's commands in their order; one result per command.

        A batch is sent as waves (``_waves``): each a ``parallel`` batch in which no channel
        appears twice, one wave after the other. Centrifugo runs a sequential batch one command
        after the other, each waiting for its broker (Redis) to answer; a wave's commands wait
        together. A channel whose command Centrifugo refused for now (its broker failing over, the
        node overloaded) gets none of its later commands sent: they are answered ``HELD``, to go
        after it, else a subscriber saw a later message before an earlier one."""
        results: list[PublishResult | None] = [None] * len(commands)
        stalled: set[str] = set()  # channels with a command refused for now
        for wave in _waves(commands):
            sendable = []
            for i, command in wave:
                if stalled.isdisjoint(_channels(command)):
                    sendable.append((i, command))
                else:
                    results[i] = HELD
                    stalled.update(_channels(command))  # a broadcast held holds its other channels too
            for chunk in _chunks(sendable):
                answers = await self._publish_chunk([commands[i] for i in chunk])
                for i, answer in zip(chunk, answers, strict=True):
                    results[i] = answer
                    if not answer.ok and not answer.permanent:
                        stalled.update(_channels(commands[i]))
        assert all(r is not None for r in results), "every command is answered"
        return [r for r in results if r is not None]

    async def _publish_chunk(self, commands: Sequence[Command]) -> list[PublishResult]:
        try:
            results: list[PublishResult] = await self._call(
                "batch", _PublishBatch.model_construct(requests=list(commands), parallel=True)
            )
            return results
        except CentApiResponseError as exc:
            raise TransportError(f"batch error {exc.code}") from exc
        except KeyError:
            # cent's own batch parsing refused a failed command: find out per command.
            return [await self._one(c) for c in commands]

    async def _one(self, command: Command) -> PublishResult:
        if isinstance(command, Publication):
            return await self.publish(command)
        data = command.data
        replies = await self.broadcast(
            command.channels, json.loads(data) if isinstance(data, RawJson) else data, command.idempotency_key
        )
        return min((r for r in replies if not r.ok), key=lambda r: r.permanent, default=OK)

    async def publish(self, publication: Publication) -> PublishResult:
        try:
            params = _params(publication)
            if isinstance(params["data"], RawJson):
                params["data"] = json.loads(params["data"])
            await self._call("publish", PublishRequest(**params))
        except CentApiResponseError as exc:
            return PublishResult(ok=False, permanent=exc.code in PERMANENT_CODES, error=f"centrifugo error {exc.code}")
        return OK

    async def broadcast(
        self, channels: Sequence[str], data: dict[str, Any], idempotency_key: str | None = None
    ) -> list[PublishResult]:
        """One payload to many channels (large audiences); one result per channel."""
        try:
            result = await self._call(
                "broadcast", BroadcastRequest(channels=list(channels), data=data, idempotency_key=idempotency_key)
            )
        except CentApiResponseError as exc:
            raise TransportError(f"broadcast error {exc.code}") from exc
        return [
            PublishResult(
                ok=False,
                permanent=response.error.code in PERMANENT_CODES,
                error=f"centrifugo error {response.error.code}",
            )
            if response.error
            else OK
            for response in result.responses
        ]

    async def subscribe(self, user: str, channel: str, client: str | None = None) -> None:
        """Server-side subscription of a user's connection (or one client of it)."""
        await self._call("subscribe", SubscribeRequest(user=user, channel=channel, client=client))

    async def unsubscribe(self, user: str, channel: str, client: str | None = None) -> None:
        """End a user's subscription on every connection (or one client): live data stops at once."""
        await self._call("unsubscribe", UnsubscribeRequest(user=user, channel=channel, client=client))

    async def history(self, channel: str, limit: int = 100) -> list[dict[str, Any]]:
        result = await self._call("history", HistoryRequest(channel=channel, limit=limit))
        return [p.data for p in result.publications]

    async def presence(self, channel: str) -> dict[str, Any]:
        result = await self._call("presence", PresenceRequest(channel=channel))
        return {client_id: info.model_dump() for client_id, info in result.presence.items()}
