"""The activity header naming a step: what Temporal's default converter writes, read back either way.

The plugin writes and reads its header itself (no converter dispatch). What it writes must stay
what the default payload converter writes for the same dict, so that a worker still running an
earlier plugin (which reads through its converter) reads it; what it reads must include a header
an earlier plugin wrote through a data converter of the user's own.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import temporalio.converter
from task_status_interceptors._context import StepBinding
from task_status_interceptors._interceptor import binding_header, header_binding
from temporalio.api.common.v1 import Payload
from temporalio.testing import ActivityEnvironment

BINDINGS = [
    StepBinding("tsk_1", "01_fetch"),
    StepBinding("tsk_2", operation_code="SEARCH.WEB", client_step_key='q:ünïcode "quoted"', display_name="Søk"),
    StepBinding("tsk_3", operation_code="X", parent_execution_id="exe_9"),
]


@pytest.mark.parametrize("binding", BINDINGS, ids=["known", "dynamic", "child"])
def test_the_header_is_what_the_default_converter_writes(binding: StepBinding) -> None:
    default = temporalio.converter.PayloadConverter.default.to_payload(binding.to_json())
    assert binding_header(binding).SerializeToString(deterministic=True) == default.SerializeToString(
        deterministic=True
    )


@pytest.mark.parametrize("binding", BINDINGS, ids=["known", "dynamic", "child"])
def test_a_header_reads_back_as_its_binding(binding: StepBinding) -> None:
    assert header_binding(binding_header(binding)) == binding


class _Reversed(temporalio.converter.EncodingPayloadConverter):
    """A user's converter of its own: JSON with its text reversed, under an encoding of its own."""

    @property
    def encoding(self) -> str:
        return "json/reversed"

    def to_payload(self, value: Any) -> Payload | None:
        return Payload(metadata={"encoding": b"json/reversed"}, data=json.dumps(value).encode()[::-1])

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        return json.loads(payload.data[::-1])


def test_a_header_written_through_another_converter_is_read_through_the_activitys() -> None:
    binding = BINDINGS[1]
    converter = temporalio.converter.CompositePayloadConverter(_Reversed())
    env = ActivityEnvironment()
    env.payload_converter = converter
    header = converter.to_payload(binding.to_json())
    assert env.run(header_binding, header) == binding
    with pytest.raises(json.JSONDecodeError):
        header_binding(Payload(metadata={"encoding": b"json/plain"}, data=header.data))  # not JSON as it stands
