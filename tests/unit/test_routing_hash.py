"""The routing rule is frozen like a wire protocol (design D14.2): these vectors pin every part of it.

Each vector was produced by this implementation once and is written down here, not recomputed:
another language's implementation of ``v1`` must reproduce the same numbers. If any part of the
rule changes (algorithm, seed, encoding, separator, field order, bucket count), these fail.
"""

from __future__ import annotations

import pytest

from status.app import routing
from status.domain import ids

# (tenantId, ownerId, routing key bytes, XXH64 as unsigned 64-bit, bucket)
VECTORS = [
    # Two example inputs, v1␟t-01␟u-88 and v1␟t-01␟u-99, with the values XXH64 gives.
    ("t-01", "u-88", b"v1\x1ft-01\x1fu-88", 0xCCA84E59E17D5D07, 3335),
    ("t-01", "u-99", b"v1\x1ft-01\x1fu-99", 0xDC74AE5BD58F8AA2, 2722),
    # UTF-8 bytes, not code points; an identity-provider subject; the fields swapped are another key.
    ("t-01", "ü", b"v1\x1ft-01\x1f\xc3\xbc", 0x201DF4F913491187, 391),
    ("tenant-a", "auth0|5f3e", b"v1\x1ftenant-a\x1fauth0|5f3e", 0x17907D9CFC83EE1F, 3615),
    ("u-88", "t-01", b"v1\x1fu-88\x1ft-01", 0x565F11742042E474, 1140),
    ("demo", "alice", b"v1\x1fdemo\x1falice", 0x9E345D7A2BEEAE6B, 3691),
]


@pytest.mark.parametrize(("tenant", "owner", "key", "hash64", "bucket"), VECTORS)
def test_the_v1_rule_gives_the_pinned_hash_and_bucket(
    tenant: str, owner: str, key: bytes, hash64: int, bucket: int
) -> None:
    assert routing.routing_key(tenant, owner) == key
    assert routing.routing_hash(tenant, owner) == hash64
    assert routing.bucket_of(tenant, owner) == bucket == hash64 % 4096


def test_a_new_task_id_carries_the_rule_version_and_its_bucket() -> None:
    task_id = routing.new_task_id("t-01", "u-88", 1_700_000_000_000)
    assert task_id.startswith("tsk_v1_d07_")  # 3335 = 0xd07
    assert ids.decode_bucket_hint(task_id) == ("v1", 3335)
    later = routing.new_task_id("t-01", "u-88", 1_700_000_000_001)
    assert ids.bucket_hint(later) == ids.bucket_hint(task_id) and later != task_id


def test_ids_minted_before_the_rule_was_frozen_still_resolve() -> None:
    legacy = f"tsk_0a3_{ids.ulid(1_700_000_000_000)}"  # the shape of ids minted before v1
    assert ids.decode_bucket_hint(legacy) == ("v0", 0x0A3)
    assert ids.bucket_hint("task-8a4d") is None
    assert ids.bucket_hint("tsk_v1_fff_short") is None


def test_ulids_sort_by_time() -> None:
    assert ids.ulid(1, b"\x00" * 10) < ids.ulid(2, b"\x00" * 10)


@pytest.mark.parametrize(
    "task_id",
    [
        ids.new_task_id("v1", 0, 1_700_000_000_000),
        ids.new_task_id("v1", 0xABC, 1_700_000_000_000),
        ids.new_task_id("v12", 0xFFF, 1_700_000_000_000),  # a later rule's two-digit version
        "tsk_07f_01HZX3Q4J5K6M7N8P9Q0R1S2T3",  # minted before the rule carried its version
    ],
)
def test_a_task_ids_first_characters_name_its_bucket(task_id: str) -> None:
    """What a count grouped by the ids' first characters is grouped by: the bucket, for every shape."""
    assert ids.prefix_bucket(task_id[: ids.BUCKET_PREFIX_LENGTH]) == ids.bucket_hint(task_id) is not None


def test_an_id_that_is_not_a_task_id_names_no_bucket() -> None:
    assert ids.prefix_bucket("wf_abc_01HZX") is None and ids.prefix_bucket("") is None
