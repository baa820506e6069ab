"""The group committer's rule, with the group's work played by a thread the test holds: the next
group starts once the one before it is being written (never while it is still decided), takes
everything queued meanwhile, and no more than ``max_in_flight`` groups run at once."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Any

from status.app.group_commit import GroupCommitter

WAIT = 10.0  # seconds a step of the played group may take before the test fails


class PlayedGroups:
    """``run_group`` for the committer: each group waits to be let decide, says it is written,
    then waits to be let commit."""

    def __init__(self, fail_first: bool = False) -> None:
        self.batches: list[list[Any]] = []
        self.started = [threading.Event() for _ in range(4)]
        self.decide = [threading.Event() for _ in range(4)]
        self.signalled = [threading.Event() for _ in range(4)]
        self.commit = [threading.Event() for _ in range(4)]
        self.fail_first = fail_first

    def __call__(self, items: Sequence[Any], writing: Callable[[], None]) -> list[Any]:
        n = len(self.batches)
        self.batches.append([cmd for _, cmd in items])
        self.started[n].set()
        assert self.decide[n].wait(WAIT)
        if n == 0 and self.fail_first:
            raise ConnectionError("the database went away")
        writing()
        self.signalled[n].set()
        assert self.commit[n].wait(WAIT)
        return [{"accepted": True, "item": cmd} for _, cmd in items]


async def _waited(event: threading.Event) -> None:
    assert await asyncio.to_thread(event.wait, WAIT)


async def _second_queued(groups: PlayedGroups, in_flight: int) -> tuple[asyncio.Task[Any], asyncio.Task[Any]]:
    """e1 in a group being decided, then e2 submitted: both callers' tasks."""
    committer = GroupCommitter(groups, max_group=64, max_in_flight=in_flight)
    first = asyncio.create_task(committer.submit("caller", "e1"))  # type: ignore[arg-type]
    await _waited(groups.started[0])
    second = asyncio.create_task(committer.submit("caller", "e2"))  # type: ignore[arg-type]
    await asyncio.sleep(0)  # submitted while the first group is still being decided
    return first, second


def _let_through(groups: PlayedGroups, n: int) -> None:
    groups.decide[n].set()
    groups.commit[n].set()


def test_the_next_group_starts_when_the_one_before_is_written_and_takes_all_that_queued() -> None:
    groups = PlayedGroups()

    async def main() -> list[Any]:
        committer = GroupCommitter(groups, max_group=64, max_in_flight=2)
        first = asyncio.create_task(committer.submit("caller", "e1"))  # type: ignore[arg-type]
        await _waited(groups.started[0])
        queued = [asyncio.create_task(committer.submit("caller", e)) for e in ("e2", "e3")]  # type: ignore[arg-type]
        await asyncio.sleep(0)  # both submitted while the first group is still being decided
        groups.decide[0].set()
        await _waited(groups.started[1])  # started while the first is still waiting to commit
        assert not groups.commit[0].is_set() and groups.batches == [["e1"], ["e2", "e3"]]
        _let_through(groups, 1)
        done = await asyncio.gather(*queued)
        assert not first.done()  # the later group answered first: each caller waits for its own
        groups.commit[0].set()
        return [await first, *done]

    results = asyncio.run(main())
    assert [r["item"] for r in results] == ["e1", "e2", "e3"]


def test_with_one_in_flight_the_next_group_waits_for_the_commit() -> None:
    groups = PlayedGroups()

    async def main() -> None:
        first, second = await _second_queued(groups, in_flight=1)
        groups.decide[0].set()
        await _waited(groups.signalled[0])  # its "written" reached the loop before this await returned
        assert len(groups.batches) == 1
        groups.commit[0].set()
        await first
        await _waited(groups.started[1])
        _let_through(groups, 1)
        assert (await second)["item"] == "e2"

    asyncio.run(main())


def test_a_group_that_fails_before_it_is_written_lets_the_next_one_start() -> None:
    groups = PlayedGroups(fail_first=True)

    async def main() -> tuple[BaseException | None, Any]:
        first, second = await _second_queued(groups, in_flight=2)
        groups.decide[0].set()
        failed = await asyncio.gather(first, return_exceptions=True)
        await _waited(groups.started[1])
        _let_through(groups, 1)
        return failed[0], await second

    failure, answered = asyncio.run(main())
    assert isinstance(failure, ConnectionError) and answered["item"] == "e2"
    assert groups.batches == [["e1"], ["e2"]]
