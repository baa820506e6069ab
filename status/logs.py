"""Structured logs (design D12): JSON lines with correlation fields, never tokens or payloads."""

from __future__ import annotations

import logging
import re
import sys
import zlib
from collections.abc import Mapping, MutableMapping
from typing import Any, TextIO

import structlog

# The only fields event logs may carry; anything else (tokens, data, results) is dropped.
CORRELATION_FIELDS = frozenset(
    {
        "traceId",
        "eventId",
        "taskId",
        "stepId",
        "operationCode",
        "attempt",
        "executionId",
        "sourceSeq",
        "taskVersion",
        "outboxId",
        "channel",
        "code",
        "eventType",
        "producerId",
        "status",
        "path",
        "method",
        # design D12's remaining correlation fields, and what retention says about a table.
        "taskType",
        "dataSchema",
        "errorCode",
        "projection",
        "lifecycleStatus",
        "table",
        "reason",
        "transport",
    }
)


def _whitelist(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> Mapping[str, Any]:
    keep = {"event", "level", "timestamp", "logger"} | CORRELATION_FIELDS
    return {k: v for k, v in event_dict.items() if k in keep}


def configure(level: int = logging.INFO, stream: TextIO | None = None) -> None:
    """JSON logs on stdout for ``serve`` and ``observer`` (``stream``: elsewhere, as ``dev``'s log file)."""
    out = stream or sys.stdout
    logging.basicConfig(level=level, stream=out, format="%(message)s", force=stream is not None)
    # HTTP clients log one INFO line per request; a problem is worth a line, a request is not.
    for chatty in ("httpx", "httpcore", "aiohttp.access"):
        logging.getLogger(chatty).setLevel(max(level, logging.WARNING))
    structlog.configure(
        processors=[
            structlog.stdlib.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _whitelist,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=True,
    )


def sampled(key: str | None, rate: float) -> bool:
    """Whether the change keyed ``key`` (its eventId) is logged at ``rate`` (0..1): the same answer
    in every process, so the API's "event accepted" and the relay's "published" lines of one event
    are kept or dropped together."""
    if rate >= 1.0:
        return True
    if rate <= 0.0 or not key:
        return False
    return zlib.crc32(key.encode("utf-8", "surrogatepass")) < rate * 2**32


def get(name: str) -> Any:
    return structlog.get_logger(name)


class ProblemLog:
    """One line when a problem starts and one when it clears, not one per failed pass or request."""

    def __init__(self, logger: Any) -> None:
        self._log = logger
        self._failures: dict[str, int] = {}

    def failed(self, key: str, message: str, **fields: Any) -> None:
        if key not in self._failures:
            self._failures[key] = 0
            self._log.warning(message, **fields)
        self._failures[key] += 1

    def cleared(self, key: str, message: str) -> None:
        failures = self._failures.pop(key, None)
        if failures is not None:
            self._log.info(message, status=f"after {failures} failed attempts")

    def active(self, key: str) -> bool:
        return key in self._failures


# Browsers' EventSource cannot send headers, so the SSE endpoint takes its token as
# ``?access_token=``: an access log line must never carry it.
_SECRET_QUERY = re.compile(r"((?:access_token|token)=)[^&\s\"]+", re.IGNORECASE)


def redact_query(text: str) -> str:
    return _SECRET_QUERY.sub(r"\1[redacted]", text)


class RedactQuery(logging.Filter):
    """Redacts tokens in the request lines of an access log (uvicorn's ``uvicorn.access``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact_query(a) if isinstance(a, str) else a for a in record.args)
        record.msg = redact_query(str(record.msg))
        return True
