"""Archive files: rows leave the database only after a verified copy of them is on disk.

One batch of rows is one data file and one manifest (design D8.16: rows are counted and
checksummed before they are purged):

    <dir>/<table>/<YYYY-MM-DD>/<table>-<first row's date>-<key digest>.jsonl.gz
    <dir>/<table>/<YYYY-MM-DD>/<table>-<first row's date>-<key digest>.manifest.json

The data file holds one JSON object per row (columns by name, instants as ISO 8601 UTC); the
manifest counts the rows and carries the SHA-256 of the uncompressed lines and of the file, the
first and last keys and the span of dates.  Both are written to a temporary name, flushed to
disk and renamed, the manifest last: a manifest names a complete file, and a file without a
manifest is an interrupted write (``verify`` reports it; the rows are still in the database).

The name depends only on the batch's first and last keys and its size, so a purge interrupted
between writing and deleting writes the same names again the next time (the batch starts at the
same row and holds the same rows), and no later batch can overwrite a file whose rows were
deleted on its word.  Rows are keyed, so a row that two concurrent observers archived in
different batches restores once.  The directory may be a mounted bucket or a backup volume.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

FORMAT = "task-observer.archive/v1"
DATA_SUFFIX = ".jsonl.gz"
MANIFEST_SUFFIX = ".manifest.json"


class ArchiveError(RuntimeError):
    """A batch could not be archived or did not read back as written: nothing may be deleted."""


@dataclass(frozen=True)
class Archived:
    manifest: Path
    rows: int


@dataclass(frozen=True)
class Verdict:
    path: Path
    ok: bool
    rows: int
    problem: str | None = None


def encode_value(value: Any) -> Any:
    if isinstance(value, datetime):
        moment = value if value.tzinfo is None else value.astimezone(UTC).replace(tzinfo=None)
        return moment.isoformat(timespec="milliseconds") + "Z"
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def encode_rows(rows: Iterable[Mapping[str, Any]]) -> bytes:
    """One JSON line per row, keys sorted: the same rows always give the same bytes."""
    lines = [
        json.dumps({k: encode_value(v) for k, v in row.items()}, sort_keys=True, ensure_ascii=False, default=str)
        for row in rows
    ]
    return ("\n".join(lines) + "\n").encode("utf-8") if lines else b""


class ArchiveWriter:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def write(
        self,
        table: str,
        rows: Sequence[Mapping[str, Any]],
        key: Sequence[str],
        dated_by: str,
        now: datetime,
    ) -> Archived:
        """Write ``rows`` as one archive file with its manifest, then read both back and check them
        against the rows; raises ``ArchiveError`` unless the copy on disk is exactly these rows."""
        if not rows:
            raise ArchiveError("nothing to archive")
        first, last = rows[0], rows[-1]
        first_key = [encode_value(first[k]) for k in key]
        last_key = [encode_value(last[k]) for k in key]
        day = first[dated_by]
        batch_id = hashlib.sha256(json.dumps([first_key, last_key, len(rows)]).encode()).hexdigest()[:16]
        stem = f"{table}-{_compact(day)}-{batch_id}"
        folder = self.directory / table / _day(day)
        folder.mkdir(parents=True, exist_ok=True)
        lines = encode_rows(rows)
        data = gzip.compress(lines, compresslevel=6, mtime=0)
        data_path = folder / (stem + DATA_SUFFIX)
        manifest_path = folder / (stem + MANIFEST_SUFFIX)
        manifest = {
            "format": FORMAT,
            "table": table,
            "file": data_path.name,
            "rows": len(rows),
            "sha256": hashlib.sha256(lines).hexdigest(),
            "fileSha256": hashlib.sha256(data).hexdigest(),
            "key": list(key),
            "firstKey": first_key,
            "lastKey": last_key,
            "datedBy": dated_by,
            "from": encode_value(min(r[dated_by] for r in rows)),
            "to": encode_value(max(r[dated_by] for r in rows)),
            "archivedAt": encode_value(now),
        }
        _write_atomically(data_path, data)
        _write_atomically(manifest_path, json.dumps(manifest, indent=2, sort_keys=True).encode())
        verdict = verify_manifest(manifest_path)  # its row count is len(rows): the manifest says so
        if not verdict.ok:
            raise ArchiveError(f"{manifest_path.name}: {verdict.problem}")
        return Archived(manifest_path, len(rows))


def verify_manifest(manifest_path: Path) -> Verdict:
    """Read a manifest's data file back: present, decompresses, the manifest's row count and both checksums."""
    try:
        manifest = json.loads(manifest_path.read_bytes())
        data_path = manifest_path.with_name(str(manifest["file"]))
        expected_rows = int(manifest["rows"])
        if manifest.get("format") != FORMAT:
            return Verdict(manifest_path, False, 0, f"unknown format {manifest.get('format')!r}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return Verdict(manifest_path, False, 0, f"unreadable manifest: {exc}")
    try:
        data = data_path.read_bytes()
    except OSError:
        return Verdict(manifest_path, False, 0, f"data file {data_path.name} is missing")
    if hashlib.sha256(data).hexdigest() != manifest.get("fileSha256"):
        return Verdict(manifest_path, False, 0, "the data file's checksum does not match")
    try:
        lines = gzip.decompress(data)
    except (OSError, EOFError) as exc:
        return Verdict(manifest_path, False, 0, f"the data file does not decompress: {exc}")
    if hashlib.sha256(lines).hexdigest() != manifest.get("sha256"):
        return Verdict(manifest_path, False, 0, "the rows' checksum does not match")
    rows = lines.count(b"\n")
    if rows != expected_rows:
        return Verdict(manifest_path, False, rows, f"{rows} rows, the manifest says {expected_rows}")
    try:
        for line in lines.splitlines():
            json.loads(line)
    except ValueError as exc:
        return Verdict(manifest_path, False, rows, f"a row is not JSON: {exc}")
    return Verdict(manifest_path, True, rows)


def verify_directory(directory: Path) -> list[Verdict]:
    """Every manifest under ``directory`` checked, and every data file that no manifest names
    (an interrupted write) reported."""
    verdicts = [verify_manifest(p) for p in sorted(directory.rglob("*" + MANIFEST_SUFFIX))]
    named = {v.path.with_name(v.path.name.removesuffix(MANIFEST_SUFFIX) + DATA_SUFFIX) for v in verdicts}
    for data_path in sorted(directory.rglob("*" + DATA_SUFFIX)):
        if data_path not in named:
            problem = "no manifest: an interrupted write (its rows were not purged)"
            verdicts.append(Verdict(data_path, False, 0, problem))
    return verdicts


def read_rows(manifest_path: Path) -> list[dict[str, Any]]:
    """The rows of one archive file (for restores and tests)."""
    manifest = json.loads(manifest_path.read_bytes())
    lines = gzip.decompress(manifest_path.with_name(manifest["file"]).read_bytes())
    return [json.loads(line) for line in lines.splitlines()]


def archived_rows(
    directory: Path, table: str, since: datetime | None = None, until: datetime | None = None
) -> Iterator[dict[str, Any]]:
    """The archived rows of ``table`` dated in [since, until), oldest file first, each file checked
    against its manifest before a row of it is read (a file that fails is an ArchiveError: an
    export or a restore never hands on rows it cannot vouch for).  Files whose manifest's span
    lies outside the range are not opened."""
    for manifest_path in sorted((directory / table).rglob("*" + MANIFEST_SUFFIX)):
        where = manifest_path.relative_to(directory)
        try:
            manifest = json.loads(manifest_path.read_bytes())
            dated_by = str(manifest["datedBy"])
            first, last = (
                _as_datetime(str(manifest["from"]).removesuffix("Z")),
                _as_datetime(str(manifest["to"]).removesuffix("Z")),
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:  # not JSON, not an object, no dates
            raise ArchiveError(f"{where}: unreadable manifest ({type(exc).__name__}: {exc})") from exc
        if (until is not None and first >= until) or (since is not None and last < since):
            continue
        verdict = verify_manifest(manifest_path)
        if not verdict.ok:
            raise ArchiveError(f"{where}: {verdict.problem}")
        for row in read_rows(manifest_path):
            try:
                moment = _as_datetime(str(row[dated_by]).removesuffix("Z"))
            except (ValueError, KeyError, TypeError) as exc:
                raise ArchiveError(f"{where}: a row has no {dated_by} date ({type(exc).__name__}: {exc})") from exc
            if (since is None or moment >= since) and (until is None or moment < until):
                yield row


def find_event(directory: Path, event_id: str, tenant_id: str | None = None) -> list[dict[str, Any]]:
    """The archived event-log rows of ``event_id`` (one per tenant that used the id)."""
    return [
        row
        for row in archived_rows(directory, "task_event_log")
        if row.get("event_id") == event_id and tenant_id in (None, row.get("tenant_id"))
    ]


def _write_atomically(path: Path, data: bytes) -> None:
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix="." + path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself survives a crash
    finally:
        os.close(directory)


def _as_datetime(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def _day(value: Any) -> str:
    return _as_datetime(value).strftime("%Y-%m-%d")


def _compact(value: Any) -> str:
    moment = _as_datetime(value)
    return moment.strftime("%Y%m%dT%H%M%S") + f"{moment.microsecond // 1000:03d}"
