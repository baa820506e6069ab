"""What the relay makes of Centrifugo's answers: a row refused for now (its broker failing over, the
node overloaded) stays due as it is and the relay backs off as a whole — no back-off of the row's
own, which would let its channel's later rows overtake it. The refusal counts towards the row's
attempts only when Centrifugo took other commands of the pass: an outage of its broker, however
long, kills no row."""

from __future__ import annotations

import time
from datetime import datetime

import sqlalchemy as sa

from observer.relay import OutboxRelay, PassResult, _plan
from status.infra.centrifugo import OK, PublishResult
from status.infra.outbox_rows import StoredMessage
from status.infra.outbox_store import ClaimedRow


def _row(row_id: int, channel: str, attempts: int = 0) -> ClaimedRow:
    message = StoredMessage("USER_SUMMARY", (channel,), '{"kind": "task.summary"}')
    return ClaimedRow(
        row_id, f"key-{row_id}", "TASK", f"tsk_{row_id}", 1, channel, False, (message,), attempts, datetime.utcnow()
    )


def _judged(
    rows: list[ClaimedRow], answers: list[PublishResult], relay: OutboxRelay
) -> tuple[list[int], list[int], list[int], PassResult]:
    plans = [_plan(row, set()) for row in rows]
    outcomes = relay._outcomes(plans, answers, {})
    result = PassResult()
    marks, _ = relay._mark(rows, rows, outcomes, set(), result)
    return list(marks.published), list(marks.counted), [row_id for row_id, _, _ in marks.dead], result


def test_a_row_refused_for_now_is_held_counted_and_the_relay_backs_off() -> None:
    relay = OutboxRelay(sa.create_engine("sqlite://"), None, "relay-test")  # type: ignore[arg-type]
    rows = [_row(1, "task_user:t/a"), _row(2, "task_user:t/b"), _row(3, "task_user:t/c")]
    refused = PublishResult(ok=False, error="centrifugo error 100")
    published, counted, dead, result = _judged(rows, [OK, refused, OK], relay)
    assert (published, counted, dead, result.held) == ([1, 3], [2], [], 1)
    assert relay._unreachable_until > time.monotonic()  # the next pass waits, then takes row 2 first


def test_a_row_refused_for_good_goes_dead_and_one_refused_too_often_too() -> None:
    relay = OutboxRelay(sa.create_engine("sqlite://"), None, "relay-test")  # type: ignore[arg-type]
    rows = [_row(1, "task_user:t/a"), _row(2, "task_user:t/b", attempts=20), _row(3, "task_user:t/c")]
    answers = [
        PublishResult(ok=False, permanent=True, error="centrifugo error 102"),
        PublishResult(ok=False, error="centrifugo error 100"),
    ]
    published, counted, dead, result = _judged(rows, [*answers, OK], relay)
    assert (published, counted, dead, result.dead) == ([3], [], [1, 2], 2)


def test_rows_refused_with_everything_else_wait_uncounted_however_often() -> None:
    relay = OutboxRelay(sa.create_engine("sqlite://"), None, "relay-test")  # type: ignore[arg-type]
    rows = [_row(1, "task_user:t/a", attempts=500), _row(2, "task_user:t/b", attempts=20)]
    refused = PublishResult(ok=False, error="centrifugo error 100")
    published, counted, dead, result = _judged(rows, [refused, refused], relay)
    assert (published, counted, dead, result.held) == ([], [], [], 2)
    assert relay._unreachable_until > time.monotonic()
