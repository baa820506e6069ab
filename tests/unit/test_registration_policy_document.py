"""A dynamic registration policy travels typed from the request to the domain; what is stored and
fingerprinted is still the document the client sent, key for key, in its order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from status.api.models import DynamicPolicyIn
from status.domain.definitions import DynamicRegistrationPolicy

_PATTERNS = st.lists(st.sampled_from(["DOCUMENT.*", "PAGE.*", "PAGE.OCR", "*", "A"]), max_size=5)


@given(
    parents=_PATTERNS,
    children=_PATTERNS,
    steps=st.integers(0, 10_000),
    depth=st.integers(1, 16),
    parallel=st.integers(1, 1000),
    rate=st.integers(1, 10_000),
)
def test_the_document_is_the_one_the_request_gave(
    parents: list[str], children: list[str], steps: int, depth: int, parallel: int, rate: int
) -> None:
    given_policy = DynamicPolicyIn.model_validate(
        {
            "allowedParentOperations": parents,
            "allowedChildOperations": children,
            "maxDynamicSteps": steps,
            "maxDepth": depth,
            "maxParallelExecutions": parallel,
            "registrationsPerMinute": rate,
        }
    )
    policy = given_policy.policy()
    # What earlier versions stored and fingerprinted (a retried request must still match it).
    assert policy.to_json() == given_policy.model_dump(by_alias=True)
    assert DynamicRegistrationPolicy.from_json(policy.to_json()) == policy  # read back from storage


def test_defaults_are_the_requests_defaults() -> None:
    assert DynamicPolicyIn.model_validate({}).policy() == DynamicRegistrationPolicy()
    assert DynamicRegistrationPolicy.from_json(None) == DynamicRegistrationPolicy()
