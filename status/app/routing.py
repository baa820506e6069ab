"""The frozen routing rule (design D14.2): which of 4096 virtual buckets a task belongs to.

Every language and every release must compute the same bucket for the same routing key,
so the rule is fixed like a wire protocol and named by ``HASH_VERSION``:

* key: ``tenantId`` and ``ownerId`` (the routing subject of design D14.2);
* bytes: ``"v1" 0x1F tenantId 0x1F ownerId`` encoded as UTF-8;
* hash: XXH64 with seed 0, taken as an unsigned 64-bit integer (the value whose canonical
  big-endian 8-byte digest XXH64 defines — ``xxh64_hexdigest`` prints it);
* bucket: that integer modulo 4096.

Changing any part (algorithm, encoding, field order, separator, seed, count) means a new
``HASH_VERSION``; the ids already minted keep theirs (``ids.decode_bucket_hint``). The test
vectors in ``tests/unit/test_routing_hash.py`` pin the rule for other implementations.
"""

from __future__ import annotations

import xxhash

from status.domain import ids

HASH_VERSION = "v1"
SEPARATOR = "\x1f"
SEED = 0


def routing_key(tenant_id: str, owner_id: str) -> bytes:
    return SEPARATOR.join((HASH_VERSION, tenant_id, owner_id)).encode("utf-8")


def routing_hash(tenant_id: str, owner_id: str) -> int:
    """The unsigned 64-bit XXH64 of the routing key."""
    return int(xxhash.xxh64_intdigest(routing_key(tenant_id, owner_id), seed=SEED))


def bucket_of(tenant_id: str, owner_id: str) -> int:
    """The virtual bucket of a task: a routing hint, never an authorization."""
    return routing_hash(tenant_id, owner_id) % ids.BUCKET_COUNT


def new_task_id(tenant_id: str, owner_id: str, now_ms: int) -> str:
    return ids.new_task_id(HASH_VERSION, bucket_of(tenant_id, owner_id), now_ms)
