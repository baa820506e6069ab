"""Identifiers (design D4): globally unique, sortable, with a bucket hint on taskIds.

A taskId is ``tsk_<hashVersion>_<bucket, 3 hex>_<ULID>``: the bucket is a routing hint
computed by the frozen rule named by ``hashVersion`` (``status.app.routing``, design D14.2),
never an authorization. Ids minted before the rule was frozen read ``tsk_<bucket>_<ULID>``
and decode as version ``v0``.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from typing import NamedTuple

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
BUCKET_COUNT = 4096
LEGACY_HASH_VERSION = "v0"  # ids without a version: minted by the unfrozen rule before v1

TASK_ID_RE = re.compile(r"^tsk_(?:(?P<version>v[1-9][0-9]?)_)?(?P<bucket>[0-9a-f]{3})_[0-9A-HJKMNP-TV-Z]{26}$")


class BucketHint(NamedTuple):
    hash_version: str
    bucket: int


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


def new_task_id(hash_version: str, bucket: int, now_ms: int) -> str:
    """A taskId carrying its bucket and the version of the rule that computed it."""
    if not 0 <= bucket < BUCKET_COUNT:
        raise ValueError(f"bucket {bucket} outside 0..{BUCKET_COUNT - 1}")
    return f"tsk_{hash_version}_{bucket:03x}_{ulid(now_ms)}"


def decode_bucket_hint(task_id: str) -> BucketHint | None:
    """The rule version and bucket encoded in a taskId, or None when it is not one of ours."""
    match = TASK_ID_RE.match(task_id)
    if match is None:
        return None
    return BucketHint(match["version"] or LEGACY_HASH_VERSION, int(match["bucket"], 16))


def bucket_hint(task_id: str) -> int | None:
    """The bucket encoded in a taskId, or None when it is not one of ours."""
    hint = decode_bucket_hint(task_id)
    return None if hint is None else hint.bucket


# The first characters of a taskId that hold its bucket whichever rule minted it (``tsk_v1_abc_``,
# ``tsk_v10_abc``, ``tsk_abc_`` and three of the ULID's): rows counted grouped by them are counted
# by bucket without a row each.
BUCKET_PREFIX_LENGTH = 11
_PREFIX_RE = re.compile(r"^tsk_(?:v[1-9][0-9]?_)?(?P<bucket>[0-9a-f]{3})_?")


def prefix_bucket(prefix: str) -> int | None:
    """The bucket a taskId's first ``BUCKET_PREFIX_LENGTH`` characters carry; None when not ours."""
    match = _PREFIX_RE.match(prefix)
    return None if match is None else int(match["bucket"], 16)


def new_workflow_id(bucket: int, now_ms: int) -> str:
    """A workflowId carrying the bucket of its owner, where its tasks are too (``wf_<3 hex>_<ULID>``);
    ids minted before (``wf_<ULID>``) carry none."""
    if not 0 <= bucket < BUCKET_COUNT:
        raise ValueError(f"bucket {bucket} outside 0..{BUCKET_COUNT - 1}")
    return f"wf_{bucket:03x}_{ulid(now_ms)}"


_WORKFLOW_ID_RE = re.compile(r"^wf_(?P<bucket>[0-9a-f]{3})_[0-9A-HJKMNP-TV-Z]{26}$")


def workflow_bucket(workflow_id: str) -> int | None:
    """The bucket a workflowId carries; None for one minted before they did, or not ours."""
    match = _WORKFLOW_ID_RE.match(workflow_id)
    return None if match is None else int(match["bucket"], 16)


def new_execution_id(now_ms: int) -> str:
    return f"exe_{ulid(now_ms)}"


def new_execution_handle(bucket: int) -> str:
    """An opaque handle with 256 random bits after its task's bucket (``exh_<3 hex>_<43>``), so a
    compact event or heartbeat is routed to its bucket's shard without a lookup (design D14.2);
    only the handle's hash is stored, and the bucket, like a taskId's, is a hint, never an
    authorization."""
    if not 0 <= bucket < BUCKET_COUNT:
        raise ValueError(f"bucket {bucket} outside 0..{BUCKET_COUNT - 1}")
    return f"exh_{bucket:03x}_" + base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()


_HEX = frozenset("0123456789abcdef")


def handle_bucket(handle: str) -> int | None:
    """The bucket a handle carries; None for a handle minted before handles carried one
    (``exh_<43>``: four characters shorter, so never read as one that does) or not ours. Read
    for every heartbeat of a batch: by position, not by a pattern."""
    if len(handle) != 51 or not handle.startswith("exh_") or handle[7] != "_" or not _HEX.issuperset(handle[4:7]):
        return None
    return int(handle[4:7], 16)


def handle_hash(handle: str) -> str:
    return hashlib.sha256(handle.encode()).hexdigest()


def temporal_activity_key(namespace: str, workflow_id: str, run_id: str, activity_id: str) -> str:
    """One Temporal activity (of one run), as a step attempt remembers it: its attempts are Temporal's."""
    key = "\x1f".join((namespace, workflow_id, run_id, activity_id))
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


STEP_ID_LIMIT = 128  # what a step id column holds (Key's length)


def dynamic_step_id(client_step_key: str) -> str:
    """The step id a dynamic step registers as: ``dyn_<key>``, or, for a key so long that the prefix
    would overflow a step id, ``dyn_`` and a digest of it (the same key, the same step, always)."""
    readable = f"dyn_{client_step_key}"
    if len(readable) <= STEP_ID_LIMIT:
        return readable
    return "dyn_" + hashlib.sha256(client_step_key.encode("utf-8")).hexdigest()
