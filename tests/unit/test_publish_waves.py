"""A relay's batch goes to Centrifugo in waves run in parallel: every channel's order kept."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from status.infra.centrifugo import Broadcast, Command, Publication, _channels, _chunks, _waves

CHANNELS = st.sampled_from([f"task_user:t/u{i}" for i in range(5)] + ["task_detail:t/a", "task_detail:t/b"])
COMMANDS = st.lists(
    st.one_of(
        st.builds(lambda c: Publication(c, {}), CHANNELS),
        st.builds(lambda cs: Broadcast(tuple(sorted(set(cs))), {}), st.lists(CHANNELS, min_size=1, max_size=4)),
    ),
    max_size=40,
)


@given(COMMANDS)
def test_each_channel_keeps_its_order_and_no_wave_names_a_channel_twice(commands: list[Command]) -> None:
    waves = _waves(commands)
    assert sorted(i for wave in waves for i, _ in wave) == list(range(len(commands)))  # each once
    wave_of = {i: w for w, wave in enumerate(waves) for i, _ in wave}
    for wave in waves:
        named = [channel for _, command in wave for channel in _channels(command)]
        assert len(named) == len(set(named))
    for channel in {c for command in commands for c in _channels(command)}:
        mine = [i for i, command in enumerate(commands) if channel in _channels(command)]
        assert [wave_of[i] for i in mine] == sorted({wave_of[i] for i in mine})  # strictly later, in order


def test_commands_on_channels_of_their_own_go_together_and_large_waves_split() -> None:
    distinct = [Publication(f"task_user:t/u{i}", {}, size_hint=100_000) for i in range(6)]
    assert [[i for i, _ in wave] for wave in _waves(distinct)] == [list(range(6))]
    # ~256 KiB a request: two of 100 kB each.
    assert _chunks(_waves(distinct)[0]) == [[0, 1], [2, 3], [4, 5]]
    repeated = [
        Publication("task_detail:t/a", {}),
        Publication("task_user:t/u1", {}),
        Publication("task_detail:t/a", {}),
    ]
    assert [[i for i, _ in wave] for wave in _waves(repeated)] == [[0, 1], [2]]


@given(COMMANDS, st.data())
def test_a_command_refused_for_now_holds_its_channels_later_commands(
    commands: list[Command], data: st.DataObject
) -> None:
    """Centrifugo refuses some commands for now (its broker failing over): nothing sent after one of
    them names any of its channels, so no subscriber sees a later message before an earlier one."""
    import asyncio

    from status.infra.centrifugo import HELD, OK, CentrifugoApi, PublishResult

    refused_for_now = data.draw(st.sets(st.sampled_from(range(len(commands))) if commands else st.nothing()))
    sent: list[int] = []
    api = CentrifugoApi.__new__(CentrifugoApi)  # no client: the chunks are answered here

    async def answer(chunk: Sequence[Command]) -> list[PublishResult]:
        indexes = [next(i for i, c in enumerate(commands) if c is command) for command in chunk]
        sent.extend(indexes)
        return [PublishResult(ok=False, error="centrifugo error 100") if i in refused_for_now else OK for i in indexes]

    api._publish_chunk = answer  # type: ignore[method-assign,assignment]
    results = asyncio.run(api.publish_batch(commands))
    held = [i for i, result in enumerate(results) if result is HELD]
    assert sorted(sent + held) == list(range(len(commands)))  # each command sent or held, once
    for position, i in enumerate(sent):
        if i in refused_for_now:
            later = set(sent[position + 1 :])
            assert not any(set(_channels(commands[j])) & set(_channels(commands[i])) for j in later if j > i)
    for i in held:  # held only behind an earlier command of one of its channels that did not go
        assert any(
            set(_channels(commands[j])) & set(_channels(commands[i])) and (j in refused_for_now or j in held)
            for j in range(i)
        )
