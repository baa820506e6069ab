"""What the status service's refusals mean to the reporter: given up for good, or only late."""

from __future__ import annotations

from typing import Any

# Rejections that resending can never fix: the event is dropped (and logged).
FINAL_REJECTIONS = frozenset(
    {
        "EVENT_ID_CONFLICT",
        "STALE_EXECUTION",
        "STALE_ATTEMPT",
        "SOURCE_SEQ_REGRESSION",
        "INVALID_TRANSITION",
        "TERMINAL_STATE",
        "SCHEMA_REJECTED",
        "UNKNOWN_BUSINESS_STATUS",
        "VALIDATION_FAILED",
        "EVENT_TYPE_NOT_ALLOWED",
        "OPERATION_MISMATCH",
        "PRODUCER_MISMATCH",
        "TOKEN_REVOKED",
        "UNKNOWN_TASK",
        "UNKNOWN_STEP",
        "PAYLOAD_TOO_LARGE",
    }
)


# Refusals that only say the status has already moved past this report: the task or step ended
# (its run closed, Temporal's verdict ended it, the workflow ended the task), or a newer attempt
# or execution took over. Routine after a cancel, a terminate, a timeout or an abandoned attempt:
# absorbed with a debug line, not kept as undeliverable and not logged as a problem.
SUPERSEDED_REJECTIONS = frozenset({"TERMINAL_STATE", "STALE_ATTEMPT", "STALE_EXECUTION", "TOKEN_REVOKED"})


def code_of(answer: Any) -> str | None:
    """The error code of a binding's refusal (an HTTP response, or a batch item's body)."""
    try:
        body = answer.json() if hasattr(answer, "json") else answer
        return str(body["error"]["code"])
    except Exception:
        return None
