"""The one table mapping domain errors to HTTP, and the error body shape.

Every rejection is ``{"error": {"code", "message", "retryable"}}`` with a
stable code (design D6.1); stack traces and SQL never reach a response.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from starlette.requests import Request

from status.api import metrics
from status.api.responses import JSONResponse
from status.domain import errors as e
from status.infra.uow import is_retryable

log = logging.getLogger("status.api")

HTTP_STATUS: dict[type[e.DomainError], int] = {
    e.Unauthenticated: 401,
    e.Forbidden: 403,
    e.NotFound: 404,
    e.Conflict: 409,
    e.TooLarge: 413,
    e.Invalid: 422,
    e.LimitExceeded: 429,
    e.Unavailable: 503,
}


def status_for(error: e.DomainError) -> int:
    for cls in type(error).__mro__:
        if cls in HTTP_STATUS:
            return HTTP_STATUS[cls]
    return 422


def error_body(code: str, message: str, retryable: bool = False) -> dict[str, object]:
    return {"error": {"code": code, "message": message, "retryable": retryable}}


def error_response(error: e.DomainError) -> JSONResponse:
    metrics.REFUSALS.labels(code=error.code.value).inc()
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(error, e.Unauthenticated) else None
    return JSONResponse(
        error_body(error.code.value, error.message, error.retryable), status_code=status_for(error), headers=headers
    )


async def domain_error_handler(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, e.DomainError)
    return error_response(exc)


def unexpected_error(exc: BaseException) -> e.DomainError | None:
    """What an exception that is not a domain error means for the caller: ``Unavailable`` (503,
    retry with the same request) when retrying can help — the database's connection was lost, a
    deadlock, a lock wait or a timeout — and None otherwise: a fault of ours that the same request
    will meet again, so it is answered as a non-retryable INTERNAL error."""
    if isinstance(exc, sa.exc.DBAPIError) and is_retryable(exc):
        return e.Unavailable("the database is busy or was unreachable; retry with the same request")
    if isinstance(exc, sa.exc.OperationalError | sa.exc.TimeoutError | TimeoutError | ConnectionError):
        return e.Unavailable("a backing service is unreachable; retry with the same request")
    return None


async def unexpected_error_handler(request: Request, exc: Exception) -> JSONResponse:
    # Logged with the trace for operators; the caller gets a stable, empty-of-internals body.
    transient = unexpected_error(exc)
    if transient is not None:
        log.warning("transient failure on %s %s: %s", request.method, request.url.path, type(exc).__name__)
        return error_response(transient)
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return JSONResponse(error_body("INTERNAL", "internal error (reported to operators)", False), status_code=500)


def binding_results(outcomes: Sequence[Any]) -> list[dict[str, Any]]:
    """A batch of bindings' answers (REST executions:bind and gRPC BindExecutions alike): each the
    execution it bound, or its rejection, with the HTTP status the same binding would have had
    alone (``status``); an unexpected failure is retryable only when retrying can help."""
    results: list[dict[str, Any]] = []
    for outcome in outcomes:
        if isinstance(outcome, e.DomainError):
            results.append(
                {**error_body(outcome.code.value, outcome.message, outcome.retryable), "status": status_for(outcome)}
            )
        elif isinstance(outcome, BaseException):
            transient = unexpected_error(outcome)
            if transient is not None:
                results.append(
                    {**error_body(transient.code.value, transient.message, True), "status": status_for(transient)}
                )
            else:
                log.error("a binding of a batch failed: %s", type(outcome).__name__)
                results.append({**error_body("INTERNAL", "internal error (reported to operators)"), "status": 500})
        else:
            results.append({**outcome.to_json(), "status": 201 if outcome.created else 200})
    return results
