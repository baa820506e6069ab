"""Structured logs (SPEC §12): JSON lines with correlation fields, never tokens or payloads."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any

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
    }
)


def _whitelist(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> Mapping[str, Any]:
    keep = {"event", "level", "timestamp", "logger"} | CORRELATION_FIELDS
    return {k: v for k, v in event_dict.items() if k in keep}


def configure(level: int = logging.INFO) -> None:
    """JSON logs on stdout for ``serve`` and ``observer``."""
    logging.basicConfig(level=level, stream=sys.stdout, format="%(message)s")
    structlog.configure(
        processors=[
            structlog.stdlib.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _whitelist,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(),
        cache_logger_on_first_use=True,
    )


def get(name: str) -> Any:
    return structlog.get_logger(name)
