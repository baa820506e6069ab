"""The outbox relay running continuously on its own thread and event loop (browser tests, benchmarks)."""

from __future__ import annotations

import asyncio
import secrets
import threading

import sqlalchemy as sa

from observer.relay import OutboxRelay, RelayConfig
from status.infra.centrifugo import CentrifugoApi


class RelayPump:
    """The outbox relay on its own event loop, passing continuously like the observer does."""

    def __init__(self, engine: sa.Engine, api_url: str, api_key: str, idle_sleep: float = 0.02) -> None:
        self.engine, self.api_url, self.api_key = engine, api_url, api_key
        self.idle_sleep = idle_sleep
        self.stopping = threading.Event()
        # Held for every pass; pause() takes it so that nothing is published until resume().
        self.passing = threading.Lock()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        publisher = CentrifugoApi(self.api_url, self.api_key)
        config = RelayConfig(batch_size=500)
        relay = OutboxRelay(self.engine, publisher, f"browser-relay-{secrets.token_hex(3)}", config)
        try:
            while not self.stopping.is_set():
                if not self.passing.acquire(timeout=0.05):
                    continue
                try:
                    result = await relay.run_once()
                finally:
                    self.passing.release()
                if result.claimed == 0:
                    await asyncio.sleep(self.idle_sleep)
        finally:
            relay.release_partitions()
            await publisher.aclose()

    def pause(self) -> None:
        self.passing.acquire()

    def resume(self) -> None:
        self.passing.release()

    def __enter__(self) -> RelayPump:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopping.set()
        self.thread.join(15)
