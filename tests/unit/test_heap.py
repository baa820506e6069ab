"""A server's heap is settled once it listens: what it built is frozen out of the collector's full
passes (status.heap), so those passes walk only what serving made, and its young generation grows."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
from starlette.applications import Starlette

from status import heap
from status.api.serving import DrainingServer


@pytest.fixture
def thawed() -> Iterator[None]:
    """Each test starts and ends with nothing frozen (the suite's own objects stay collectable) and
    the collector's thresholds as they were."""
    thresholds = gc.get_threshold()
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_settling_freezes_what_is_alive_and_collects_what_is_not(thawed: None) -> None:
    class Cycle:
        def __init__(self) -> None:
            self.me = self

    kept = Cycle()
    Cycle()  # garbage with a cycle: collected first, never frozen
    frozen = heap.settle()
    # Frozen objects that nothing holds any more are still freed (another thread of the suite may
    # drop some meanwhile): the count only shrinks from what was frozen.
    assert frozen > 0 and 0 < gc.get_freeze_count() <= frozen
    assert not any(type(o) is Cycle and o is not kept for o in gc.get_objects(generation=2))
    gc.unfreeze()
    assert any(o is kept for o in gc.get_objects())  # back under the collector: it was frozen


def test_settling_grows_the_young_generation_only(thawed: None) -> None:
    gc.set_threshold(700, 11, 12)
    heap.settle()
    assert gc.get_threshold() == (heap.YOUNG, 11, 12)


def test_the_api_server_settles_its_heap_once_it_listens(thawed: None) -> None:
    config = uvicorn.Config(Starlette(), host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = DrainingServer(config, drain=lambda: None, drain_seconds=0)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    assert gc.get_freeze_count() == 0
    thread.start()
    try:
        # Settled right after the server marks itself started: wait for either to be seen.
        deadline = time.monotonic() + 10
        while not (server.started and gc.get_freeze_count() > 0) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.started and gc.get_freeze_count() > 0
    finally:
        server.should_exit = True
        thread.join(10)
