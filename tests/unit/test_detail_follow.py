"""When a task's detail channel may be followed, and when a grant must publish its current
detail (status.domain.watching)."""

from __future__ import annotations

from datetime import datetime, timedelta

from status.domain.watching import FOLLOW_MARGIN, NEVER_FOLLOWED, catch_up_needed, followed, followed_until

NOW = datetime(2026, 12, 7, 9, 0, 0)


def test_a_grant_is_followed_until_its_expiry_and_the_margin_then_not() -> None:
    until = followed_until(NOW + timedelta(minutes=5))
    assert until == NOW + timedelta(minutes=5) + FOLLOW_MARGIN
    assert followed(until, NOW + timedelta(minutes=5) + FOLLOW_MARGIN - timedelta(milliseconds=1))
    assert not followed(until, until)


def test_a_row_that_says_nothing_is_followed_and_a_never_followed_one_is_not() -> None:
    assert followed(None, NOW)
    assert not followed(NEVER_FOLLOWED, NOW)


def test_a_grant_catches_up_only_where_changes_may_have_gone_unpublished_to_someone() -> None:
    assert not catch_up_needed(NEVER_FOLLOWED, NOW)  # nobody holds a position in the channel
    assert not catch_up_needed(NOW + timedelta(seconds=1), NOW)  # followed throughout: all published
    assert catch_up_needed(NOW, NOW)  # lapsed: changes since went unpublished
    assert catch_up_needed(NOW - timedelta(days=1), NOW)
    assert catch_up_needed(None, NOW)  # a row from before: its first grant publishes it once
