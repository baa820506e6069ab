"""Would MariaDB's Spider engine route this service's writes to shards? Measured, not assumed.

    .venv/bin/python bench/shard_engine.py [--seconds 5] [--threads 16] [--json FILE]

Three MariaDB servers as shards and a fourth as Spider's head (``mariadb-plugin-spider``, Debian's
package; ``scripts/services install spider``), each started here with a data directory of its
own. The head holds a task table, an event log and an outbox partitioned by bucket over the three
shards (``PARTITION BY LIST``, each partition a shard's server), the way Spider routes. Then what
the service's write path needs from an engine, each asked of the head and of a shard directly:

1. a change (the task's row locked, its version raised, an event and an outbox row written) commits
   on its shard as one transaction — and a rolled-back one leaves nothing there;
2. ``SELECT … FOR UPDATE SKIP LOCKED``, the relay's claim: a second claimer skips the rows the
   first holds (on a shard: it gets the next row at once), or waits, or is refused;
3. throughput of that change from ``--threads`` threads for ``--seconds``: through the head against
   the same on one shard directly (what routing in the service does: it connects to the bucket's
   shard), and the CPU the head spends per change.

What is decided from it is in docs/architecture.md, "Shards: the engine".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "deploy"))
from detached import Detached  # type: ignore[import-not-found]  # noqa: E402
from localdb import LocalServer  # type: ignore[import-not-found]  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from common import commits_at_once, free_port_block  # type: ignore[import-not-found]  # noqa: E402

SHARDS = 3
BUCKETS = 12  # bucket b lives on shard b % SHARDS
USER, PASSWORD = "spider", "spider"
LOCK_WAIT_SECONDS = 2
# Debian's mariadb-plugin-spider, unpacked into the cache (scripts/services install spider)
SPIDER_DIR = Path(os.environ.get("TASK_OBSERVER_CACHE_DIR", REPO / ".cache")) / "spider" / "usr/lib/mysql/plugin"
SPIDER_PLUGIN = SPIDER_DIR / "ha_spider.so"

TABLES = {
    "task": "task_id VARCHAR(64) NOT NULL, bucket INT NOT NULL, version BIGINT NOT NULL, PRIMARY KEY (task_id, bucket)",
    "event_log": "event_id VARCHAR(64) NOT NULL, bucket INT NOT NULL, task_id VARCHAR(64) NOT NULL,"
    " task_version BIGINT NOT NULL, body VARCHAR(600) NOT NULL, PRIMARY KEY (event_id, bucket)",
    "outbox": "outbox_id BIGINT NOT NULL, bucket INT NOT NULL, status VARCHAR(16) NOT NULL,"
    " payload VARCHAR(2000) NOT NULL, PRIMARY KEY (outbox_id, bucket), KEY pending (status, outbox_id)",
}


@dataclass(frozen=True)
class Server(LocalServer):
    def start(self, *options: str) -> None:
        super().start("--innodb-flush-log-at-trx-commit=2", f"--innodb-lock-wait-timeout={LOCK_WAIT_SECONDS}", *options)

    def tcp(self, **kwargs: Any) -> pymysql.Connection[Any]:
        return pymysql.connect(host="127.0.0.1", port=self.port, user=USER, password=PASSWORD, **kwargs)


@contextlib.contextmanager
def servers() -> Iterator[tuple[list[Server], Server]]:
    """Three shards with the tables, and the head with Spider's tables over them."""
    workdir = Path(tempfile.mkdtemp(prefix="shards-"))
    os.chmod(workdir, 0o755)
    base = free_port_block(SHARDS + 1)
    shards = [Server(f"shard{n}", workdir, base + n) for n in range(SHARDS)]
    head = Server("head", workdir, base + SHARDS)
    started: list[Server] = []
    try:
        for shard in shards:
            shard.start()
            started.append(shard)
        head.start(f"--plugin-dir={SPIDER_DIR}")
        started.append(head)
        for server in (*shards, head):
            server.wait()
        for shard in shards:
            shard.run(
                "CREATE DATABASE probe",
                f"CREATE USER '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'",
                f"GRANT ALL PRIVILEGES ON probe.* TO '{USER}'@'127.0.0.1'",
                *(f"CREATE TABLE probe.{name} ({columns}) ENGINE=InnoDB" for name, columns in TABLES.items()),
            )
        head.run(
            "INSTALL SONAME 'ha_spider'",
            "CREATE DATABASE probe",
            f"CREATE USER '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'",
            f"GRANT ALL PRIVILEGES ON probe.* TO '{USER}'@'127.0.0.1'",
            *(
                f"CREATE SERVER s{n} FOREIGN DATA WRAPPER mysql OPTIONS (HOST '127.0.0.1', DATABASE 'probe',"
                f" USER '{USER}', PASSWORD '{PASSWORD}', PORT {shard.port})"
                for n, shard in enumerate(shards)
            ),
            *(_spider_table(name, columns) for name, columns in TABLES.items()),
        )
        yield shards, head
    finally:
        for server in reversed(started):
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _spider_table(name: str, columns: str) -> str:
    partitions = ", ".join(
        f"PARTITION p{n} VALUES IN ({', '.join(str(b) for b in range(n, BUCKETS, SHARDS))}) COMMENT = 'srv \"s{n}\"'"
        for n in range(SHARDS)
    )
    return (
        f'CREATE TABLE probe.{name} ({columns}) ENGINE=SPIDER COMMENT=\'wrapper "mysql", table "{name}"\''
        f" PARTITION BY LIST (bucket) ({partitions})"
    )


# ------------------------------------------------------------------ the questions
def _change(cur: Any, task_id: str, bucket: int, body: str) -> None:
    """One change as the write path makes it: the task locked, its version raised, the event and
    the outbox row written, committed."""
    cur.execute("SELECT version FROM task WHERE task_id = %s AND bucket = %s FOR UPDATE", (task_id, bucket))
    (version,) = cur.fetchone()
    cur.execute("UPDATE task SET version = %s WHERE task_id = %s AND bucket = %s", (version + 1, task_id, bucket))
    cur.execute(
        "INSERT INTO event_log (event_id, bucket, task_id, task_version, body) VALUES (%s, %s, %s, %s, %s)",
        (secrets.token_hex(12), bucket, task_id, version + 1, body),
    )
    cur.execute(
        "INSERT INTO outbox (outbox_id, bucket, status, payload) VALUES (%s, %s, 'PENDING', %s)",
        (int.from_bytes(os.urandom(7), "big"), bucket, body),
    )


def _count(shard: Server, table: str, task_id: str) -> int:
    conn = shard.root(database="probe")
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM {table} WHERE task_id = %s", (task_id,))
            return int(cur.fetchone()[0])
    finally:
        conn.close()


def atomicity(shards: list[Server], head: Server) -> dict[str, bool]:
    """A change through the head committed, and one rolled back: on the bucket's shard, all or nothing."""
    bucket = 4
    shard = shards[bucket % SHARDS]
    committed, rolled_back = f"t-commit-{secrets.token_hex(3)}", f"t-rollback-{secrets.token_hex(3)}"
    conn = head.tcp(database="probe", autocommit=True)
    with conn.cursor() as cur:
        for task_id in (committed, rolled_back):
            cur.execute("INSERT INTO task (task_id, bucket, version) VALUES (%s, %s, 0)", (task_id, bucket))
        conn.autocommit(False)
        _change(cur, committed, bucket, "x")
        conn.commit()
        _change(cur, rolled_back, bucket, "x")
        conn.rollback()
    conn.close()
    return {
        "commit_on_its_shard": _count(shard, "event_log", committed) == 1,
        "rollback_leaves_nothing": _count(shard, "event_log", rolled_back) == 0,
        "elsewhere_nothing": all(_count(s, "event_log", committed) == 0 for s in shards if s is not shard),
    }


def skip_locked(server: Server) -> str:
    """Two claimers of pending outbox rows, the relay's way: what the second gets while the first
    holds the oldest row — "skipped" (the next row, at once), "waited" or "refused: …"."""
    bucket = 1
    setup = server.tcp(database="probe", autocommit=True)
    with setup.cursor() as cur:
        cur.execute("DELETE FROM outbox WHERE bucket = %s", (bucket,))
        for outbox_id in (1, 2, 3):
            cur.execute(
                "INSERT INTO outbox (outbox_id, bucket, status, payload) VALUES (%s, %s, 'PENDING', 'x')",
                (outbox_id, bucket),
            )
    setup.close()
    claim = (
        "SELECT outbox_id FROM outbox WHERE bucket = %s AND status = 'PENDING'"
        " ORDER BY outbox_id LIMIT 1 FOR UPDATE SKIP LOCKED"
    )
    first = server.tcp(database="probe", autocommit=False)
    second = server.tcp(database="probe", autocommit=False, read_timeout=LOCK_WAIT_SECONDS * 3)
    try:
        with first.cursor() as a, second.cursor() as b:
            a.execute(claim, (bucket,))
            held = a.fetchone()
            started = time.monotonic()
            try:
                b.execute(claim, (bucket,))
                got = b.fetchone()
            except pymysql.err.MySQLError as exc:
                return f"refused: {exc.args[0]} {str(exc.args[-1])[:120]}"
            waited = time.monotonic() - started
            if got is not None and held is not None and got[0] != held[0] and waited < LOCK_WAIT_SECONDS / 2:
                return "skipped"
            return (
                f"waited {waited:.1f} s and got {got[0] if got else None} (the first holds {held[0] if held else None})"
            )
    finally:
        first.rollback()
        second.rollback()
        first.close()
        second.close()


def throughput(server: Server, threads: int, seconds: float, buckets: list[int]) -> float:
    """Changes/s from ``threads`` threads, each on a task of its own in one of ``buckets``."""
    prefix = secrets.token_hex(3)
    tasks = [(f"t-{prefix}-{n}", buckets[n % len(buckets)]) for n in range(threads)]
    setup = server.tcp(database="probe", autocommit=True)
    with setup.cursor() as cur:
        for task_id, bucket in tasks:
            cur.execute("INSERT INTO task (task_id, bucket, version) VALUES (%s, %s, 0)", (task_id, bucket))
    setup.close()
    body = "y" * 500

    def change(cur: Any, n: int, _done: int) -> None:
        _change(cur, *tasks[n], body)
        cur.connection.commit()

    return float(commits_at_once(lambda n: server.tcp(database="probe", autocommit=False), threads, seconds, change))


def move_stall(shards: list[Server], head: Server, rows: int) -> dict[str, float]:
    """Spider's own way to move a bucket: the head's partitions redefined (``REORGANIZE PARTITION``,
    bucket 3 from shard 0 to a table of its own on shard 1), ``rows`` rows in it. How long that
    takes, and the longest a change of another bucket on another shard waits meanwhile, against
    its longest before."""
    moving, other = 3, 1
    shards[1].run("CREATE TABLE probe.task_b3 LIKE probe.task")
    conn = head.tcp(database="probe", autocommit=True)
    with conn.cursor() as cur:
        for start in range(0, rows, 500):
            values = [(f"m-{n}", moving) for n in range(start, min(rows, start + 500))]
            cur.executemany("INSERT INTO task (task_id, bucket, version) VALUES (%s, %s, 0)", values)
        cur.execute("INSERT INTO task (task_id, bucket, version) VALUES ('w-other', %s, 0)", (other,))
    stalls: list[float] = []
    moving_now = threading.Event()
    done = threading.Event()
    before: list[float] = []

    def writer() -> None:
        writes = head.tcp(database="probe", autocommit=False)
        with writes.cursor() as cur:
            while not done.is_set():
                started = time.monotonic()
                _change(cur, "w-other", other, "z")
                writes.commit()
                (stalls if moving_now.is_set() else before).append(time.monotonic() - started)
        writes.close()

    thread = threading.Thread(target=writer)
    thread.start()
    time.sleep(1.0)  # the writer's pace before the move
    partitions = [
        "PARTITION p0 VALUES IN (0, 6, 9) COMMENT = 'srv \"s0\"'",
        'PARTITION p3 VALUES IN (3) COMMENT = \'srv "s1", table "task_b3"\'',
    ]
    moving_now.set()
    started = time.monotonic()
    with conn.cursor() as cur:
        cur.execute(f"ALTER TABLE task REORGANIZE PARTITION p0 INTO ({', '.join(partitions)})")
        took = time.monotonic() - started
        cur.execute("SELECT COUNT(*) FROM task WHERE bucket = %s", (moving,))
        visible = int(cur.fetchone()[0])
    time.sleep(0.5)
    done.set()
    thread.join()
    conn.close()
    return {
        "rows": rows,
        "move_s": took,
        "other_bucket_longest_wait_s": max(stalls, default=0.0),
        "other_bucket_longest_before_s": max(before, default=0.0),
        "moved_rows_on_target": _rows(shards[1], "task_b3"),
        "rows_seen_through_the_head_after": visible,
    }


def _rows(shard: Server, table: str) -> int:
    conn = shard.root(database="probe")
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM {table}")
            return int(cur.fetchone()[0])
    finally:
        conn.close()


def _cpu_seconds(server: Server) -> float:
    pid = Detached(server.dir).pid(server.name)
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(seconds: float, threads: int, rows: int) -> dict[str, Any]:
    with servers() as (shards, head):
        result: dict[str, Any] = {"atomicity": atomicity(shards, head)}
        result["skip_locked_shard"] = skip_locked(shards[1])
        result["skip_locked_head"] = skip_locked(head)
        one_shard = [b for b in range(BUCKETS) if b % SHARDS == 0]
        result["direct_changes_per_s"] = throughput(shards[0], threads, seconds, one_shard)
        before = _cpu_seconds(head)
        result["head_changes_per_s"] = throughput(head, threads, seconds, one_shard)
        result["head_cpu_ms_per_change"] = (
            (_cpu_seconds(head) - before) * 1000 / max(1.0, result["head_changes_per_s"] * seconds)
        )
        result["head_all_shards_changes_per_s"] = throughput(head, threads, seconds, list(range(BUCKETS)))
        result["move"] = move_stall(shards, head, rows)
    return result


def report(result: dict[str, Any], threads: int) -> None:
    atomic = result["atomicity"]
    print(
        "a change through the head:  committed on its shard only"
        f" {'yes' if atomic['commit_on_its_shard'] and atomic['elsewhere_nothing'] else 'NO'},"
        f" rolled back leaves nothing {'yes' if atomic['rollback_leaves_nothing'] else 'NO'}"
    )
    print(f"SKIP LOCKED on a shard:     {result['skip_locked_shard']}")
    print(f"SKIP LOCKED through Spider: {result['skip_locked_head']}")
    direct, head = result["direct_changes_per_s"], result["head_changes_per_s"]
    print(
        f"changes/s, {threads} threads: one shard directly {direct:.0f};"
        f" through the head to that shard {head:.0f} ({head / direct:.2f}x),"
        f" the head's CPU {result['head_cpu_ms_per_change']:.2f} ms per change;"
        f" through the head to all three {result['head_all_shards_changes_per_s']:.0f}"
    )


def _report_move(move: dict[str, float]) -> None:
    print(
        f"a bucket moved by the head's DDL ({move['rows']:.0f} rows): {move['move_s']:.2f} s,"
        f" {move['moved_rows_on_target']:.0f} rows on the target, {move['rows_seen_through_the_head_after']:.0f}"
        " of the bucket seen through the head after it; meanwhile a change of another bucket on"
        f" another shard waited up to {move['other_bucket_longest_wait_s']:.2f} s"
        f" (before: {move['other_bucket_longest_before_s'] * 1000:.0f} ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--rows", type=int, default=20_000, help="rows in the bucket moved by the head's DDL")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    if shutil.which("mariadbd") is None or not _spider_installed():
        sys.exit("needs MariaDB and its Spider plugin: scripts/services install spider")
    result = measure(args.seconds, args.threads, args.rows)
    report(result, args.threads)
    _report_move(result["move"])
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))


def _spider_installed() -> bool:
    return SPIDER_PLUGIN.exists()


if __name__ == "__main__":
    main()
