"""Which definition an operation reports under: the most specific enabled one, chosen once per
(code, task type, version) by a tenant's ``Definitions``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from status.app.definitions import Definitions
from status.domain.definitions import ANY, OperationDefinition, find_operation
from status.domain.errors import ErrorCode, Invalid

DEFINITIONS = (
    OperationDefinition("*", 1, "anything"),
    OperationDefinition("FILE.*", 1, "a file operation"),
    OperationDefinition("FILE.PREPARE", 1, "prepare a file"),
    OperationDefinition("FILE.PREPARE", 2, "prepare a file, v2"),
    OperationDefinition("FILE.PREPARE", 3, "prepare a file, disabled", enabled=False),
    OperationDefinition("FILE.CHECK", 1, "check an invoice file", task_type_pattern="INVOICE*"),
    OperationDefinition("FILE.SEND", 1, "send a file, the tenant's own", tenant_id="acme"),
    OperationDefinition("FILE.SEND", 4, "send a file, the default"),
    OperationDefinition("MAIL.SEND", 1, "send a mail", enabled=False),
)


@pytest.mark.parametrize(
    ("code", "task_type", "version", "chosen"),
    [
        ("FILE.PREPARE", None, None, "prepare a file, v2"),  # exact beats the namespace; newest wins
        ("FILE.PREPARE", None, 1, "prepare a file"),
        ("FILE.CHECK", "INVOICE_2026", None, "check an invoice file"),  # its task type matches
        ("FILE.CHECK", "REPORT", None, "a file operation"),  # it does not
        ("FILE.ARCHIVE", None, None, "a file operation"),  # a namespace beats "*"
        ("FILE.SEND", None, None, "send a file, the tenant's own"),  # a tenant's own beats a newer default
        ("MAIL.SEND", None, None, "anything"),  # a disabled definition is not there
        ("OTHER", None, None, "anything"),
    ],
)
def test_the_most_specific_enabled_definition_is_chosen(
    code: str, task_type: str | None, version: int | None, chosen: str
) -> None:
    assert Definitions(DEFINITIONS, {}).operation(code, task_type, version).display_name == chosen


def test_an_operation_nobody_defined_is_refused_every_time() -> None:
    definitions = Definitions(tuple(d for d in DEFINITIONS if d.operation_code != ANY), {})
    for _ in range(2):  # the second answer comes from what the first chose
        with pytest.raises(Invalid) as refused:
            definitions.operation("OTHER", None)
        assert refused.value.code is ErrorCode.OPERATION_MISMATCH
    with pytest.raises(Invalid):
        definitions.operation("FILE.PREPARE", None, 9)  # no such version


@given(
    asked=st.lists(
        st.tuples(
            st.sampled_from(["FILE.PREPARE", "FILE.CHECK", "FILE.SEND", "FILE.X", "MAIL.SEND", "OTHER"]),
            st.sampled_from([None, "INVOICE", "REPORT"]),
            st.sampled_from([None, 1, 2, 4]),
        ),
        max_size=30,
    ),
    defined=st.sets(st.sampled_from(range(len(DEFINITIONS)))),
)
def test_a_remembered_choice_is_find_operations(
    asked: list[tuple[str, str | None, int | None]], defined: set[int]
) -> None:
    operations = tuple(DEFINITIONS[i] for i in sorted(defined))
    definitions = Definitions(operations, {})
    for code, task_type, version in asked:
        candidates = [d for d in operations if version is None or d.version == version]
        expected = find_operation(candidates, code, task_type)
        if expected is None:
            with pytest.raises(Invalid):
                definitions.operation(code, task_type, version)
        else:
            assert definitions.operation(code, task_type, version) is expected
