"""The error hierarchy with the stable codes of design D6.1.

Every rejection the service can return is a :class:`DomainError` whose
``code`` is part of the public contract.  Adapters map the error *class* to a
transport status (HTTP: one table in ``status.api.errors``).
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    UNAUTHENTICATED = "UNAUTHENTICATED"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    PRODUCER_MISMATCH = "PRODUCER_MISMATCH"
    OPERATION_MISMATCH = "OPERATION_MISMATCH"
    EVENT_TYPE_NOT_ALLOWED = "EVENT_TYPE_NOT_ALLOWED"
    TOKEN_EXPIRED = "TOKEN_EXPIRED"
    TOKEN_REVOKED = "TOKEN_REVOKED"
    UNKNOWN_TASK = "UNKNOWN_TASK"
    UNKNOWN_STEP = "UNKNOWN_STEP"
    UNKNOWN_WORKFLOW = "UNKNOWN_WORKFLOW"
    NOT_FOUND = "NOT_FOUND"
    EVENT_ID_CONFLICT = "EVENT_ID_CONFLICT"
    IDEMPOTENCY_CONFLICT = "IDEMPOTENCY_CONFLICT"
    EXTERNAL_REF_CONFLICT = "EXTERNAL_REF_CONFLICT"
    STALE_EXECUTION = "STALE_EXECUTION"
    STALE_ATTEMPT = "STALE_ATTEMPT"
    SOURCE_SEQ_REGRESSION = "SOURCE_SEQ_REGRESSION"
    INVALID_TRANSITION = "INVALID_TRANSITION"
    TERMINAL_STATE = "TERMINAL_STATE"
    VERSION_PRECONDITION_FAILED = "VERSION_PRECONDITION_FAILED"
    DEFINITION_FROZEN = "DEFINITION_FROZEN"
    SCHEMA_REJECTED = "SCHEMA_REJECTED"
    UNKNOWN_BUSINESS_STATUS = "UNKNOWN_BUSINESS_STATUS"
    VALIDATION_FAILED = "VALIDATION_FAILED"
    # occurredAt is older than the maximum accepted event age: its dedup entry may be gone, so
    # accepting it could apply a retry twice (design D8.16). Not retryable.
    EVENT_TOO_OLD = "EVENT_TOO_OLD"
    # occurredAt is later than the service's clock by more than the tolerated skew: the dedup
    # retention argument assumes no event is from the future (status.domain.retention). Not retryable.
    EVENT_IN_FUTURE = "EVENT_IN_FUTURE"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    DYNAMIC_STEP_NOT_ALLOWED = "DYNAMIC_STEP_NOT_ALLOWED"
    DETAIL_SUBSCRIPTION_LIMIT = "DETAIL_SUBSCRIPTION_LIMIT"
    DYNAMIC_STEP_LIMIT = "DYNAMIC_STEP_LIMIT"
    RATE_LIMITED = "RATE_LIMITED"
    UNAVAILABLE = "UNAVAILABLE"


class DomainError(Exception):
    """A rejected command. ``code`` is stable; ``message`` is safe to show to the caller."""

    default_code: ErrorCode = ErrorCode.VALIDATION_FAILED
    retryable: bool = False

    def __init__(self, message: str, code: ErrorCode | None = None, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        self.code = code or self.default_code
        self.message = message
        if retryable is not None:
            self.retryable = retryable

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code}: {self.message})"


class Unauthenticated(DomainError):
    default_code = ErrorCode.UNAUTHENTICATED


class Forbidden(DomainError):
    """Authenticated, but this credential may not do this (403)."""

    default_code = ErrorCode.PERMISSION_DENIED


class NotFound(DomainError):
    default_code = ErrorCode.NOT_FOUND


class Conflict(DomainError):
    """The request contradicts committed state (409)."""

    default_code = ErrorCode.INVALID_TRANSITION


class Invalid(DomainError):
    """The request is well-formed JSON but breaks a contract (422)."""

    default_code = ErrorCode.VALIDATION_FAILED


class TooLarge(DomainError):
    default_code = ErrorCode.PAYLOAD_TOO_LARGE


class LimitExceeded(DomainError):
    """A quota or rate limit (429)."""

    default_code = ErrorCode.RATE_LIMITED
    retryable = True


class Unavailable(DomainError):
    """A transient failure (lock timeout, deadlock after retries, DB down) (503)."""

    default_code = ErrorCode.UNAVAILABLE
    retryable = True


# The HTTP adapter and tests use this to keep codes and classes consistent.
CODE_CLASS: dict[ErrorCode, type[DomainError]] = {
    ErrorCode.UNAUTHENTICATED: Unauthenticated,
    ErrorCode.PERMISSION_DENIED: Forbidden,
    ErrorCode.PRODUCER_MISMATCH: Forbidden,
    ErrorCode.OPERATION_MISMATCH: Forbidden,
    ErrorCode.EVENT_TYPE_NOT_ALLOWED: Forbidden,
    ErrorCode.TOKEN_EXPIRED: Forbidden,
    ErrorCode.TOKEN_REVOKED: Forbidden,
    ErrorCode.UNKNOWN_TASK: NotFound,
    ErrorCode.UNKNOWN_STEP: NotFound,
    ErrorCode.UNKNOWN_WORKFLOW: NotFound,
    ErrorCode.NOT_FOUND: NotFound,
    ErrorCode.EVENT_ID_CONFLICT: Conflict,
    ErrorCode.IDEMPOTENCY_CONFLICT: Conflict,
    ErrorCode.EXTERNAL_REF_CONFLICT: Conflict,
    ErrorCode.STALE_EXECUTION: Conflict,
    ErrorCode.STALE_ATTEMPT: Conflict,
    ErrorCode.SOURCE_SEQ_REGRESSION: Conflict,
    ErrorCode.INVALID_TRANSITION: Conflict,
    ErrorCode.TERMINAL_STATE: Conflict,
    ErrorCode.VERSION_PRECONDITION_FAILED: Conflict,
    ErrorCode.DEFINITION_FROZEN: Conflict,
    # Not a rate: the client must release a detail subscription (LRU) first (design D9).
    ErrorCode.DETAIL_SUBSCRIPTION_LIMIT: Conflict,
    # A policy refusal: retrying the same registration can never succeed.
    ErrorCode.DYNAMIC_STEP_NOT_ALLOWED: Forbidden,
    ErrorCode.SCHEMA_REJECTED: Invalid,
    ErrorCode.UNKNOWN_BUSINESS_STATUS: Invalid,
    ErrorCode.VALIDATION_FAILED: Invalid,
    ErrorCode.EVENT_TOO_OLD: Invalid,
    ErrorCode.EVENT_IN_FUTURE: Invalid,
    ErrorCode.PAYLOAD_TOO_LARGE: TooLarge,
    ErrorCode.DYNAMIC_STEP_LIMIT: LimitExceeded,
    ErrorCode.RATE_LIMITED: LimitExceeded,
    ErrorCode.UNAVAILABLE: Unavailable,
}


def error(code: ErrorCode, message: str) -> DomainError:
    """Build the right error class for a code (so a code can't land on the wrong status)."""
    return CODE_CLASS[code](message, code)
