"""Centrifugo's history on a Redis that comes back behind what clients saw.

Redis replicates asynchronously: when Sentinel promotes a replica, the publications the old
primary acknowledged last may be missing from it, under the same stream epoch. That state is
made here on one real Redis, exactly: the dataset is saved after the first publication, two
more are published (the client receives them), and Redis restarts from the saved file — the
stream is at offset 1 again, epoch unchanged, as on a replica that was two publications
behind. A real Centrifugo node serves a real client through all of it.

The first test pins the hazard (Centrifugo reuses the lost offsets and the client, already
past them, skips the new publications without being told); the second shows what the
sentinels' reconfig script (deploy/redis/new-epochs.sh) does about it: the streams start new
epochs, so the client is told its state is insufficient and resubscribes with
``recovered=false`` — the signal on which UIs load a snapshot from the database."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.processes import REPO_ROOT, CentrifugoNode, free_port, wait_until
from tests.support.realtime import Recorder, connection_token, recording_client

pytestmark = [pytest.mark.centrifugo, pytest.mark.redis]

CHANNEL = "task_user:t1/u1"
NEW_EPOCHS = REPO_ROOT / "deploy" / "redis" / "new-epochs.sh"


def _cli(port: int, *args: str) -> str:
    return subprocess.run(
        ["redis-cli", "-p", str(port), *args], capture_output=True, text=True, timeout=10, check=True
    ).stdout.strip()


class SavedRedis:
    """A redis-server of this test's own whose restart loads the last SAVE."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        server = shutil.which("redis-server")
        if server is None:
            pytest.skip("redis-server is not installed (scripts/services install redis)")
        self.process = subprocess.Popen(
            [server, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.workdir), "--save", ""],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(lambda: self._answers(), 10, "redis-server")

    def _answers(self) -> bool:
        try:
            return _cli(self.port, "ping") == "PONG"
        except subprocess.CalledProcessError:
            return False

    def restart_from_saved(self) -> None:
        """Gone without saving, back with the dataset of the last SAVE (what a lagging replica had)."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)
        self.start()
        # Back for Centrifugo once its node listens again: a publication before that would
        # reach nobody (a gap of another kind, found at the next one).
        wait_until(lambda: _cli(self.port, "PUBSUB", "CHANNELS", f"*{CHANNEL}") != "", 20, "Centrifugo's PUB/SUB")

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)


@contextlib.contextmanager
def centrifugo_on_own_redis(tmp_path: Path) -> Iterator[tuple[SavedRedis, CentrifugoNode]]:
    redis = SavedRedis(tmp_path)
    redis.start()
    node = CentrifugoNode(tmp_path, redis_address=f"redis://127.0.0.1:{redis.port}")
    try:
        node.start()
        yield redis, node
    finally:
        node.stop()
        redis.stop()


def _publish(node: CentrifugoNode, n: int) -> int:
    """A publication of ``{"n": n}``; returns the offset Centrifugo gave it (retried while the
    node reconnects to the restarted Redis)."""
    deadline = time.monotonic() + 20
    while True:
        reply = httpx.post(
            f"{node.api_url}/publish",
            json={"channel": CHANNEL, "data": {"n": n}},
            headers={"X-API-Key": node.api_key},
            timeout=5,
        ).json()
        if "result" in reply:
            return int(reply["result"]["offset"])
        if time.monotonic() > deadline:
            raise AssertionError(f"publish refused: {reply}")
        time.sleep(0.1)


@contextlib.asynccontextmanager
async def rolled_back(tmp_path: Path, *, new_epochs: bool) -> AsyncIterator[tuple[CentrifugoNode, Recorder]]:
    """A client that saw publications 1-3, and Redis back at offset 1 under the same epoch;
    the sentinels' reconfig script run on it, or not."""
    with centrifugo_on_own_redis(tmp_path) as (redis, node):
        client, recorder = recording_client(node.ws_url, connection_token(node.token_secret, "u1", [CHANNEL]))
        await client.connect()
        await recorder.next_subscribed(10)
        try:
            for n in (1, 2, 3):
                await asyncio.to_thread(_publish, node, n)
                _, offset, data = await recorder.next_publication(10)
                assert (data["n"], offset) == (n, n)
                if n == 1:
                    await asyncio.to_thread(_cli, redis.port, "SAVE")
            await asyncio.to_thread(redis.restart_from_saved)
            assert await asyncio.to_thread(_cli, redis.port, "HGET", f"centrifugo.stream.meta.{CHANNEL}", "s") == "1"
            if new_epochs:
                port = str(redis.port)
                await asyncio.to_thread(
                    subprocess.run,
                    [str(NEW_EPOCHS), "task-observer", "leader", "start", "127.0.0.1", port, "127.0.0.1", port],
                    check=True,
                    timeout=30,
                )
            yield node, recorder
        finally:
            await client.disconnect()


def _resubscriptions(recorder: Recorder) -> list[tuple[bool, bool]]:
    found = []
    while not recorder.subscribed.empty():
        context = recorder.subscribed.get_nowait()
        found.append((context.was_recovering, context.recovered))
    return found


@pytest.mark.timeout(120)
async def test_a_stream_behind_what_the_client_saw_makes_it_skip_new_publications_silently(tmp_path: Path) -> None:
    async with rolled_back(tmp_path, new_epochs=False) as (node, recorder):
        for n in (4, 5, 6):
            await asyncio.to_thread(_publish, node, n)
        _, offset, data = await recorder.next_publication(20)
        # 4 and 5 took the offsets 2 and 3 again; the client, at 3, dropped them as stale
        # PUB/SUB deliveries. Nothing told it anything was missing.
        assert (data["n"], offset) == (6, 4)
        assert all(recovered for _, recovered in _resubscriptions(recorder))


@pytest.mark.timeout(120)
async def test_new_epochs_after_a_failover_tell_the_client_to_load_a_snapshot(tmp_path: Path) -> None:
    async with rolled_back(tmp_path, new_epochs=True) as (node, recorder):
        await asyncio.to_thread(_publish, node, 4)
        # The stream started again under a new epoch: the client is told its state is
        # insufficient and resubscribes without recovering — the UI loads a snapshot then.
        context = await recorder.next_subscribed(20)
        assert (context.was_recovering, context.recovered) == (True, False)
        await asyncio.to_thread(_publish, node, 5)
        _, offset, data = await recorder.next_publication(20)
        assert (data["n"], offset) == (5, 2)  # and what comes next arrives, on the new stream
