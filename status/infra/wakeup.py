"""Wake-ups for the outbox consumers (relay, projector) instead of polling.

A unit of work that wrote outbox or projector-feed rows calls, after its COMMIT, the
notifier the composition root injected: the process's :class:`OutboxSignal`, which tells

* consumers in the same process directly (``dev`` runs API and observer together), and
* every live relay through one UDP datagram to the address it advertises in
  ``outbox_relay`` (re-read every couple of seconds off the request path).

A datagram says only which kinds of rows the commit wrote (``o`` outbox, ``f`` projector feed:
the relay needs no look after a commit that only fed the projector, nor the projector after one
that only wrote messages) and proves nothing; a lost or forged one costs one cheap look, and a
datagram that names no kind (an older sender's ``w``) wakes every consumer.  Consumers also look
on a slow safety poll, so a lost wake-up only delays a publication, never loses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
import weakref
from collections.abc import Callable
from datetime import UTC, datetime

import sqlalchemy as sa

from status.infra import tables as t

log = logging.getLogger("status.wakeup")

ADDRESS_REFRESH_SECONDS = 2.0
# The kinds of rows whose commit wakes a consumer, and each one's letter in a datagram.
WAKE_KINDS = frozenset({"outbox", "feed"})
_LETTERS = {"outbox": "o", "feed": "f"}


def datagram_for(kinds: frozenset[str]) -> bytes:
    return "".join(sorted(_LETTERS[k] for k in kinds & WAKE_KINDS)).encode() or b"w"


def kinds_of(datagram: bytes) -> frozenset[str]:
    """The kinds a datagram names; every kind when it names none it knows (``w``, or anything else)."""
    named = frozenset(kind for kind, letter in _LETTERS.items() if letter.encode() in datagram)
    return named or WAKE_KINDS


REFRESHER_IDLE_SECONDS = 60.0


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port``."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class OutboxSignal:
    """After-commit notification of one database's outbox consumers."""

    def __init__(self, engine: sa.Engine, sender_host: str = "127.0.0.1") -> None:
        self._engine = engine
        self._sender_host = sender_host  # the interface datagrams leave from (WAKEUP_HOST)
        self._listeners: list[Callable[[frozenset[str]], None]] = []
        self._lock = threading.Lock()
        self._addresses: list[tuple[str, int]] = []
        self._last_notify = float("-inf")
        self._refresher: threading.Thread | None = None
        self._resend = False
        self._socket: socket.socket | None = None

    def subscribe(self, listener: Callable[[frozenset[str]], None]) -> Callable[[], None]:
        """Call ``listener`` with the kinds written (from any thread, must not block) after each such
        commit; returns the unsubscriber."""
        with self._lock:
            self._listeners = [*self._listeners, listener]

        def unsubscribe() -> None:
            with self._lock:
                self._listeners = [item for item in self._listeners if item is not listener]

        return unsubscribe

    def committed(self, written: frozenset[str]) -> None:
        """The unit of work's after-commit notifier: wake the consumers of the outbox and feed rows written."""
        kinds = written & WAKE_KINDS
        if kinds:
            self.notify(kinds)

    def notify(self, kinds: frozenset[str] = WAKE_KINDS) -> None:
        """Never raises and never blocks on a consumer: the commit it follows has already happened."""
        for listener in self._listeners:
            try:
                listener(kinds)
            except Exception:  # a consumer that went away must not fail a producer's request
                log.debug("an in-process outbox listener failed", exc_info=True)
        datagram = datagram_for(kinds)
        for address in self._remote_addresses():
            with contextlib.suppress(OSError):  # unreachable relay: its safety poll still finds the rows
                self._udp().sendto(datagram, address)

    def _udp(self) -> socket.socket:
        if self._socket is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.setblocking(False)
            # Send from the configured interface, not from every interface (0.0.0.0:<port>).
            with contextlib.suppress(OSError):
                sock.bind((self._sender_host, 0))
            self._socket = sock
            # Parts are built per process (and per test): the socket goes with its signal.
            weakref.finalize(self, sock.close)
        return self._socket

    def _remote_addresses(self) -> list[tuple[str, int]]:
        """The relays' addresses as last read; a background thread keeps them fresh while commits happen."""
        self._last_notify = time.monotonic()
        if self._refresher is None or not self._refresher.is_alive():
            with self._lock:
                if self._refresher is None or not self._refresher.is_alive():
                    # The list may be stale or empty after an idle spell: the refresher
                    # sends this wake-up again once it has read the current one.
                    self._resend = True
                    self._refresher = threading.Thread(target=self._refresh_while_busy, daemon=True)
                    self._refresher.start()
        return self._addresses

    def _refresh_while_busy(self) -> None:
        # Its own single connection: the request path never waits on this read, and an
        # idle API (no commit for a minute) keeps no thread and no connection for it.
        engine = sa.create_engine(self._engine.url, poolclass=sa.pool.StaticPool)
        relays = t.outbox_relay
        query = sa.select(relays.c.wake_address).where(
            relays.c.wake_address.is_not(None), relays.c.alive_until > sa.bindparam("now")
        )
        try:
            while time.monotonic() - self._last_notify < REFRESHER_IDLE_SECONDS:
                try:
                    with engine.connect() as conn:
                        found = conn.scalars(query, {"now": datetime.now(UTC).replace(tzinfo=None)}).all()
                    known = set(self._addresses)
                    self._addresses = [parse_address(a) for a in found if a]
                    # Relays this list did not have yet may have missed recent wake-ups
                    # (all of them, right after an idle spell): wake them now.
                    missed = self._addresses if self._resend else [a for a in self._addresses if a not in known]
                    self._resend = False
                    for address in missed:
                        with contextlib.suppress(OSError):
                            self._udp().sendto(b"w", address)
                except Exception:  # an older schema or a database hiccup: keep the last list, look again later
                    log.debug("could not read the relays' wake addresses", exc_info=True)
                time.sleep(ADDRESS_REFRESH_SECONDS)
        finally:
            engine.dispose()

    def close(self) -> None:
        sock, self._socket = self._socket, None
        if sock is not None:
            sock.close()


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self, fire: Callable[[frozenset[str]], None]) -> None:
        self._fire = fire

    def datagram_received(self, data: bytes, addr: object) -> None:
        self._fire(kinds_of(data))


class WakeReceiver:
    """The observer side: wakes every consumer's event on an in-process signal or a UDP datagram."""

    def __init__(self, signal: OutboxSignal | None, host: str = "127.0.0.1", port: int = 0) -> None:
        self._signal = signal  # this process's commits (None: datagrams only)
        self._host, self._port = host, port
        self._events: list[tuple[asyncio.Event, frozenset[str]]] = []
        self._transport: asyncio.DatagramTransport | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self.address: str | None = None

    def event(self, kinds: frozenset[str] = WAKE_KINDS) -> asyncio.Event:
        """A new event for one consumer of these kinds of rows; set on every wake-up that names one
        of them, cleared by the consumer."""
        event = asyncio.Event()
        self._events.append((event, kinds))
        return event

    def _fire(self, kinds: frozenset[str] = WAKE_KINDS) -> None:
        for event, wanted in self._events:
            if wanted & kinds:
                event.set()

    async def start(self, *, listen: bool = True) -> str | None:
        """Subscribe in-process; with ``listen``, also take datagrams (returns the address to advertise)."""
        loop = asyncio.get_running_loop()

        def from_any_thread(kinds: frozenset[str]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting any more
                loop.call_soon_threadsafe(self._fire, kinds)

        if self._signal is not None:
            self._unsubscribe = self._signal.subscribe(from_any_thread)
        if listen:
            transport, _ = await loop.create_datagram_endpoint(
                lambda: _Datagrams(self._fire), local_addr=(self._host, self._port)
            )
            self._transport = transport
            host, port = transport.get_extra_info("sockname")[:2]
            self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return self.address

    def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._transport is not None:
            self._transport.close()
            self._transport = None
