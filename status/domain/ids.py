"""Identifiers (SPEC §4): globally unique, sortable, with a bucket hint on taskIds."""

from __future__ import annotations

import base64
import hashlib
import os
import re

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
BUCKET_COUNT = 4096
HASH_RULE_VERSION = "v1"  # part of the protocol: never change without a new version (seed §15.3.3)

TASK_ID_RE = re.compile(r"^tsk_[0-9a-f]{3}_[0-9A-HJKMNP-TV-Z]{26}$")
# Tenants, users, projects and other principals end up inside channel names
# (``task_user:{tenant}/{user}``): no ``/`` or ``:`` (our separators), no ``#``/``$``
# (Centrifugo's user-limited and private channel marks), no spaces, controls or
# non-ASCII look-alikes, no ``,`` (Centrifugo's user separator). E-mail addresses and
# identity-provider subjects such as ``auth0|5f...`` fit.
PRINCIPAL_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@+=|-]{0,63}$"
PRINCIPAL_ID_RE = re.compile(PRINCIPAL_ID_PATTERN)


def is_principal_id(value: object) -> bool:
    return isinstance(value, str) and PRINCIPAL_ID_RE.match(value) is not None


def ulid(now_ms: int, randomness: bytes | None = None) -> str:
    """A ULID (48-bit millisecond time + 80 random bits), Crockford base32."""
    rand = randomness if randomness is not None else os.urandom(10)
    value = (now_ms << 80) | int.from_bytes(rand, "big")
    chars = []
    for _ in range(26):
        chars.append(CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def bucket_of(tenant_id: str, owner_id: str) -> int:
    """stableHash(v1, tenantId, ownerId) mod 4096 — a routing hint, never an authorization."""
    digest = hashlib.sha256(f"{HASH_RULE_VERSION}\x00{tenant_id}\x00{owner_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % BUCKET_COUNT


def new_task_id(tenant_id: str, owner_id: str, now_ms: int) -> str:
    return f"tsk_{bucket_of(tenant_id, owner_id):03x}_{ulid(now_ms)}"


def bucket_hint(task_id: str) -> int | None:
    """The bucket encoded in a taskId, or None when it is not one of ours."""
    if not TASK_ID_RE.match(task_id):
        return None
    return int(task_id[4:7], 16)


def new_workflow_id(now_ms: int) -> str:
    return f"wf_{ulid(now_ms)}"


def new_execution_id(now_ms: int) -> str:
    return f"exe_{ulid(now_ms)}"


def new_execution_handle() -> str:
    """An opaque handle with 256 random bits; only its hash is stored."""
    return "exh_" + base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()


def handle_hash(handle: str) -> str:
    return hashlib.sha256(handle.encode()).hexdigest()
