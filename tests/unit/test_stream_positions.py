"""Native SSE event ids carry the stream's position in each followed channel; a bad one is none."""

from __future__ import annotations

import base64
import json

import pytest

from status.api.stream_positions import decode, encode, recovery_request

MINE = ["task_user:acme/alice", "task_shared:acme/project.p1"]


def test_an_id_names_every_followed_channel_and_round_trips() -> None:
    positions = {MINE[0]: ("epochA", 7), MINE[1]: ("epochB", 0)}
    assert decode(encode(positions), MINE) == positions
    assert recovery_request(positions)[MINE[0]] == {"recover": True, "epoch": "epochA", "offset": 7}


def _raw(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "event_id",
    [
        None,
        "",
        "%%%",
        "bm90IGpzb24",  # "not json"
        _raw([1, 2]),
        _raw({MINE[0]: "epoch:7"}),
        _raw({MINE[0]: ["epoch", "7"]}),
        _raw({MINE[0]: ["epoch", True]}),
        _raw({MINE[0]: ["epoch", -1]}),
        _raw({MINE[0]: [7, 7]}),
        "A" * 9000,
    ],
)
def test_an_id_that_does_not_decode_is_no_position(event_id: str | None) -> None:
    assert decode(event_id, MINE) == {}


def test_an_id_cannot_name_a_channel_the_login_does_not_follow() -> None:
    forged = encode({"task_user:acme/bob": ("e", 3), MINE[0]: ("e", 1)})
    assert decode(forged, MINE) == {MINE[0]: ("e", 1)}
