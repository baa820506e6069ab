"""The plugin reports a returned activity TIMED_OUT only when Temporal has certainly timed it out."""

from __future__ import annotations

import pytest
from task_status_interceptors._deadlines import MARGIN_SECONDS, Beats, past_temporal_deadline


@pytest.mark.parametrize(
    ("now", "beats", "heartbeat", "start_to_close", "expected"),
    [
        # The case: one beat at once (sent at once), a 3 s sleep, a 2 s heartbeat timeout.
        (3.0, Beats(0.0, 1, 0.0), 2.0, None, True),
        (2.0 + MARGIN_SECONDS, Beats(0.0, 1, 0.0), 2.0, None, False),  # at the margin: not certain
        (1.9, Beats(0.0, 1, 0.0), 2.0, None, False),
        # A later beat may be held back by the SDK's throttle (0.8 x the timeout) before it is sent.
        (3.5, Beats(0.0, 2, 1.0), 2.0, None, False),
        (5.2, Beats(0.0, 2, 1.0), 2.0, None, True),
        # No beat at all: the server's heartbeat timer runs from the attempt's start.
        (2.6, Beats(0.0), 2.0, None, True),
        # Start-to-close, from the worker's start (after the server's).
        (10.6, Beats(0.0, 5, 10.5), None, 10.0, True),
        (10.4, Beats(0.0, 5, 10.3), None, 10.0, False),
        (100.0, Beats(0.0), None, None, False),  # no timeout Temporal could have applied
    ],
)
def test_only_a_deadline_certainly_passed_counts(
    now: float, beats: Beats, heartbeat: float | None, start_to_close: float | None, expected: bool
) -> None:
    assert past_temporal_deadline(now, beats, heartbeat_timeout=heartbeat, start_to_close=start_to_close) is expected


def test_a_failed_activitys_stored_words_promise_nothing() -> None:
    """The message is stored with the attempt and shown after the task ended too: whether Temporal
    retries is the ``retryable`` flag (and the next attempt), never the text."""
    from types import SimpleNamespace

    from task_status_interceptors._interceptor import classify
    from temporalio.common import RetryPolicy
    from temporalio.exceptions import ApplicationError

    info = SimpleNamespace(retry_policy=RetryPolicy(maximum_attempts=3), attempt=1)
    category, code, message, retryable = classify(ApplicationError("ocr busy", type="OCR_BUSY"), info)  # type: ignore[arg-type]
    assert (code, retryable, message) == ("OCR_BUSY", True, "The step failed.")
    last = SimpleNamespace(retry_policy=RetryPolicy(maximum_attempts=3), attempt=3)
    assert classify(ApplicationError("ocr busy", type="OCR_BUSY"), last)[2:] == ("The step failed.", False)  # type: ignore[arg-type]
