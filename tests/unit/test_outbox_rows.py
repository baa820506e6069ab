"""The outbox row's format and what the relay makes of a row, without a database or Centrifugo."""

from __future__ import annotations

import base64
import json
from datetime import datetime

import orjson

from observer.relay import OutboxRelay, _plan, _worst
from status.domain.messages import Aggregate, Message
from status.infra.centrifugo import Broadcast, Publication, PublishResult, _reply_result
from status.infra.outbox_rows import PACKED, OutboxRecord, StoredMessage, compressed, pack, partition_of, unpack
from status.infra.outbox_store import ClaimedRow

NOW = datetime(2026, 12, 3, 9, 0, 0)
HOME = "task_user:t/owner"


def _message(version: int, channels: tuple[str, ...], projection: str = "USER_SUMMARY", **flags: bool) -> Message:
    payload = {"taskId": "tsk_1", "taskVersion": str(version), "projection": projection}
    return Message(
        Aggregate("TASK", "tsk_1", version, HOME), channels, projection, payload, flags.get("must", False), "e", NOW
    )


def _claimed(row_id: int, row: OutboxRecord, must: bool | None = None) -> ClaimedRow:
    return ClaimedRow(
        row_id,
        row.publish_key,
        row.aggregate_type,
        row.aggregate_id,
        row.aggregate_version,
        row.channel,
        row.must_deliver if must is None else must,
        unpack(row.projection, row.channel, None, row.payload_zstd),
        1,
        NOW,
    )


def test_a_changes_messages_are_one_row_each_projection_once_with_its_channels() -> None:
    viewers = ("task_user:t/owner", "task_user:t/u2", "task_shared:t/project.p1")
    first = [_message(7, viewers), _message(7, ("task_detail:t/tsk_1",), "TASK_DETAIL")]
    second = [_message(8, viewers, must=True), _message(8, viewers, "USER_NOTIFICATION")]
    rows = pack([*first, *second])
    assert [r.aggregate_version for r in rows] == [7, 8]
    assert {r.projection for r in rows} == {PACKED} and [r.must_deliver for r in rows] == [False, True]
    assert {r.channel for r in rows} == {HOME} and {r.partition_no for r in rows} == {partition_of(HOME)}
    assert rows[0].publish_key != rows[1].publish_key
    messages = unpack(PACKED, HOME, None, rows[0].payload_zstd)
    assert [(m.projection, m.channels) for m in messages] == [
        ("USER_SUMMARY", viewers),
        ("TASK_DETAIL", ("task_detail:t/tsk_1",)),
    ]
    assert orjson.loads(messages[1].data) == first[1].payload


def test_a_row_is_stored_compressed_and_read_back_as_written() -> None:
    # A 40-step detail: the row stores a fraction of its JSON, and its values come back as they
    # were, text past ASCII included; what only the standard encoder takes (an integer past 64
    # bits, which the service accepts in a report's data) still makes a readable row.
    steps = [{"stepId": f"s{i:02d}", "lifecycleStatus": "SUCCEEDED", "label": "Étape ✓"} for i in range(40)]
    detail = Message(
        Aggregate("TASK", "tsk_1", 3, HOME), ("task_detail:t/tsk_1",), "TASK_DETAIL", {"steps": steps}, False, "e", NOW
    )
    (row,) = pack([detail])
    assert len(row.payload_zstd) * 5 < len(orjson.dumps({"steps": steps}))
    (message,) = unpack(PACKED, HOME, None, row.payload_zstd)
    assert orjson.loads(message.data) == {"steps": steps}
    odd = {"count": 2**70}
    (message,) = unpack(
        PACKED, HOME, None, compressed({"messages": [{"projection": "P", "channels": [], "data": odd}]})
    )
    assert json.loads(message.data) == {"count": float(2**70)}  # read as orjson reads it


def test_rows_of_the_earlier_formats_read_as_they_were_written() -> None:
    assert unpack("TASK_DETAIL", "task_detail:t/x", '{"a":1}', None) == (
        StoredMessage("TASK_DETAIL", ("task_detail:t/x",), '{"a":1}'),
    )
    fanout = unpack("USER_FANOUT", "fanout:b:0", '{"channels":["task_user:t/a","task_user:t/b"],"data":{"x":1}}', None)
    assert fanout == (StoredMessage("USER_BROADCAST", ("task_user:t/a", "task_user:t/b"), '{"x":1}'),)
    uncompressed = '{"messages":[{"projection":"USER_SUMMARY","channels":["task_user:t/a"],"data":{"x":1}}]}'
    assert unpack(PACKED, HOME, uncompressed, None) == (StoredMessage("USER_SUMMARY", ("task_user:t/a",), '{"x":1}'),)


def test_a_row_that_cannot_be_read_has_no_messages() -> None:
    # The relay marks such a row DEAD instead of failing its batch.
    assert unpack(PACKED, HOME, "not json", None) == () and unpack(PACKED, HOME, '{"other":1}', None) == ()
    assert unpack(PACKED, HOME, None, None) == ()
    assert unpack(PACKED, HOME, None, "not base64!") == ()
    assert unpack(PACKED, HOME, None, base64.b64encode(b"not a zstd frame").decode()) == ()


def test_a_row_is_a_versioned_publish_per_detail_channel_and_one_broadcast_to_the_rest() -> None:
    viewers = ("task_user:t/owner", "task_shared:t/project.p1")
    (row,) = pack([_message(5, viewers), _message(5, ("task_detail:t/tsk_1",), "TASK_DETAIL")])
    plan = _plan(_claimed(1, row), frozenset())
    broadcast, detail = plan.commands
    assert isinstance(broadcast, Broadcast) and broadcast.channels == viewers
    assert isinstance(detail, Publication) and detail.channel == "task_detail:t/tsk_1"
    assert (detail.version, detail.delta) == (5, True)
    # Centrifugo's keys act per channel, and two messages may share one: a key per message.
    assert broadcast.idempotency_key == row.publish_key and detail.idempotency_key == f"{row.publish_key}.1"


def test_an_unsubscribe_order_is_taken_out_of_the_publications() -> None:
    order = Message(
        Aggregate("TASK", "tsk_1", 9, HOME),
        ("task_detail:t/tsk_1",),
        "UNSUBSCRIBE",
        {"users": ["t:u2"]},
        True,
        "e",
        NOW,
    )
    (row,) = pack([order, _message(9, (HOME,))])
    plan = _plan(_claimed(1, row), frozenset())
    assert plan.unsubscribes == [("task_detail:t/tsk_1", ["t:u2"])]
    assert [type(c) for c in plan.commands] == [Publication]


def test_coalescing_drops_only_what_a_later_version_covers_on_the_same_channel() -> None:
    detail = ("task_detail:t/tsk_1",)
    rows = [
        _claimed(1, pack([_message(1, (HOME, "task_user:t/gone"))])[0]),
        _claimed(2, pack([_message(2, (HOME,)), _message(2, detail, "TASK_DETAIL")])[0]),
        _claimed(3, pack([_message(3, (HOME,))])[0], must=True),
    ]
    skipped = OutboxRelay.superseded(rows)
    # row 1's other channel had no later version; a must-deliver row is never skipped
    assert skipped == {(1, 0, HOME), (2, 0, HOME)}
    assert [c.channels for c in _plan(rows[0], skipped).commands if isinstance(c, Broadcast)] == []
    assert [c.channel for c in OutboxRelay.publications(rows, skipped) if isinstance(c, Publication)] == [
        "task_user:t/gone",
        "task_detail:t/tsk_1",
        HOME,
    ]


def test_a_rows_outcome_is_its_worst_command() -> None:
    ok, temporary = PublishResult(ok=True), PublishResult(ok=False, error="centrifugo error 108")
    permanent = PublishResult(ok=False, permanent=True, error="centrifugo error 102")
    held = PublishResult(ok=False, unreachable=True)
    assert _worst([ok, ok]).ok
    assert _worst([ok, permanent, temporary]) == temporary  # worth sending again
    assert _worst([permanent, held]) == held


def test_a_broadcast_reply_fails_when_one_of_its_channels_failed() -> None:
    fine = {"broadcast": {"responses": [{"result": {}}, {"result": {}}]}}
    assert _reply_result(fine).ok
    mixed = {"broadcast": {"responses": [{"result": {}}, {"error": {"code": 102}}, {"error": {"code": 108}}]}}
    assert _reply_result(mixed) == PublishResult(ok=False, permanent=False, error="centrifugo error 108")
    assert _reply_result({"error": {"code": 102}}).permanent and not _reply_result("x").ok
