"""A tiny TCP load balancer for failover tests: new connections go to the first live upstream."""

from __future__ import annotations

import asyncio
import contextlib


class FailoverProxy:
    def __init__(self, upstreams: list[int]) -> None:
        self.upstreams = upstreams
        self.server: asyncio.Server | None = None
        self.port = 0
        self.routed: list[int] = []
        self._pipes: set[asyncio.Task[None]] = set()

    async def start(self) -> FailoverProxy:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for port in self.upstreams:
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                continue
            self.routed.append(port)
            for src, dst in ((reader, up_writer), (up_reader, writer)):
                task = asyncio.create_task(self._pipe(src, dst))
                self._pipes.add(task)
                task.add_done_callback(self._pipes.discard)
            return
        writer.close()

    @staticmethod
    async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                dst.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self._pipes):
            task.cancel()
