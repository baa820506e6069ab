"""JSON Schema validation of ``data.value`` with the ``jsonschema`` library."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError


@lru_cache(maxsize=512)
def _compiled(document_json: str) -> Draft202012Validator:
    document = json.loads(document_json)
    Draft202012Validator.check_schema(document)
    return Draft202012Validator(document)


class JsonSchemaValidator:
    """Implements ``status.domain.definitions.SchemaValidator``; compiled validators are cached."""

    def errors(self, schema_id: str, document: Mapping[str, Any], value: Any) -> list[str]:
        try:
            validator = _compiled(json.dumps(document, sort_keys=True))
        except SchemaError as exc:
            return [f"the registered schema {schema_id} is invalid: {exc.message}"]
        problems = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
        return [f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}" for e in problems[:5]]


def check_schema_document(document: Mapping[str, Any]) -> None:
    """Raise ``SchemaError`` when a definition carries an invalid JSON Schema."""
    Draft202012Validator.check_schema(dict(document))
