"""JSON Schema validation of ``data.value`` with the ``jsonschema`` library.

Schemas are registered by tenant admins, so they are untrusted input to the
service:

* **no fetches.** jsonschema resolves a ``$ref`` it does not know by
  downloading it; a tenant could make the API call internal URLs, or stall
  validation on a slow one while a task row is locked.  Validators get a
  registry that never retrieves anything, and registration refuses any
  reference that is not local to the document (``#...``);
* **bounded cost.** Documents, patterns and nesting are size-limited at
  registration, and patterns with a quantified group that is quantified again
  (``(a+)+``, the classic catastrophic-backtracking shape) are refused:
  Python's ``re`` has no timeout.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from referencing import Registry
from referencing.exceptions import NoSuchResource, Unresolvable

MAX_SCHEMA_BYTES = 32 * 1024
MAX_SCHEMA_DEPTH = 32
MAX_PATTERN_LENGTH = 256
_REFERENCE_KEYWORDS = ("$ref", "$dynamicRef")
_PATTERN_KEYWORDS = ("pattern", "patternProperties")
# A group containing a quantifier, itself followed by a quantifier: (x+)+, (x*)*, (x+){2,}, (?:a|b+)* ...
_NESTED_QUANTIFIER = re.compile(r"\((?:[^()\\]|\\.)*[+*}](?:[^()\\]|\\.)*\)(?:[+*]|\{\d*,)")


def _refuse(uri: str) -> Any:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # attrs field; mypy misreads the alias


# Knows nothing and retrieves nothing: only references inside the document resolve.
_NO_RETRIEVAL: Registry[Any] = Registry(retrieve=_refuse)  # type: ignore[call-arg]  # as above


@lru_cache(maxsize=512)
def _compiled(document_json: str) -> Draft202012Validator:
    document = json.loads(document_json)
    Draft202012Validator.check_schema(document)
    return Draft202012Validator(document, registry=_NO_RETRIEVAL)


class JsonSchemaValidator:
    """Implements ``status.domain.definitions.SchemaValidator``; compiled validators and results are cached.

    Results are remembered (bounded) per schema document and value, so that the event
    path can validate data *before* it takes the task's row lock and the decision under
    the lock finds the answer instead of validating again (see ``EventCommands``).
    """

    def __init__(self, remembered: int = 4096) -> None:
        self._results: dict[tuple[str, str], list[str]] = {}
        self._remembered = remembered
        self._lock = threading.Lock()

    def document_problem(self, document: Mapping[str, Any]) -> str | None:
        try:
            check_schema_document(document)
        except SchemaError as exc:
            return str(exc.message)
        return None

    def errors(self, schema_id: str, document: Mapping[str, Any], value: Any) -> list[str]:
        document_json = json.dumps(document, sort_keys=True)
        key = (document_json, json.dumps(value, sort_keys=True, default=str))
        found = self._results.get(key)
        if found is not None:
            return found
        result = self._validate(schema_id, document_json, value)
        with self._lock:
            if len(self._results) >= self._remembered:
                self._results.clear()
            self._results[key] = result
        return result

    @staticmethod
    def _validate(schema_id: str, document_json: str, value: Any) -> list[str]:
        try:
            validator = _compiled(document_json)
        except SchemaError as exc:
            return [f"the registered schema {schema_id} is invalid: {exc.message}"]
        try:
            problems = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
        except Unresolvable as exc:  # a schema stored before references were checked at registration
            return [f"the registered schema {schema_id} refers to {exc.ref!r}, which is not available"]
        return [f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}" for e in problems[:5]]


def check_schema_document(document: Mapping[str, Any]) -> None:
    """Raise ``SchemaError`` when a definition carries an invalid, remote-referencing or too costly JSON Schema."""
    if len(json.dumps(document)) > MAX_SCHEMA_BYTES:
        raise SchemaError(f"the schema is larger than {MAX_SCHEMA_BYTES} bytes")
    for depth, key, value in _walk(document):
        if depth > MAX_SCHEMA_DEPTH:
            raise SchemaError(f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
        if key in _REFERENCE_KEYWORDS and isinstance(value, str) and not value.startswith("#"):
            raise SchemaError(f"{key} {value!r} is not local to the schema; remote references are not allowed")
        if key in _PATTERN_KEYWORDS:
            for pattern in value if isinstance(value, Mapping) else [value]:
                _check_pattern(pattern)
    Draft202012Validator.check_schema(dict(document))


def _check_pattern(pattern: Any) -> None:
    if not isinstance(pattern, str):
        return  # check_schema reports the type
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise SchemaError(f"a pattern is longer than {MAX_PATTERN_LENGTH} characters")
    if _NESTED_QUANTIFIER.search(pattern):
        raise SchemaError(f"the pattern {pattern!r} repeats a repeated group (catastrophic backtracking)")


def _walk(node: Any, depth: int = 0) -> Iterator[tuple[int, str | None, Any]]:
    """(depth, key, value) of every member of a JSON document."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            yield depth, key, value
            yield from _walk(value, depth + 1)
    elif isinstance(node, list):
        for item in node:
            yield depth, None, item
            yield from _walk(item, depth + 1)
