"""Consistent backups of the status database and point-in-time recovery from them.

    python deploy/backup/pitr.py primary  --dir DIR [--port 3320] [--user tso --password tso]
    python deploy/backup/pitr.py backup   --socket SOCKET --target BACKUP_DIR
    python deploy/backup/pitr.py position --socket SOCKET
    python deploy/backup/pitr.py restore  --backup BACKUP_DIR --binlogs BINLOG_DIR --until POINT --datadir NEW_DIR
    python deploy/backup/pitr.py stop     --dir DIR

``backup`` copies a running server with Debian's ``mariadb-backup`` (InnoDB pages copied hot, the
redo log followed meanwhile, a moment's ``BACKUP STAGE`` lock at the end), prepares the copy at
once (a backup that cannot be prepared is found now, not on the day it is needed) and records
the binary-log position it is consistent at. ``position`` prints the server's GTID position: a
recovery point. ``restore`` copies a backup into an empty data directory, replays the binary log
from the backup's position up to and including ``--until`` (a GTID position, or a time
``YYYY-MM-DD HH:MM:SS`` in the server's time zone: the first event at or after it is not
replayed) on a server only it can reach, and stops that server: the directory is then ready for
the service's own server. What to run next (the versions' fence, new history epochs) is in
docs/operations.md, "Backups and point-in-time recovery".

``primary`` starts a single primary with the binary log on (``primary.cnf`` beside this file),
detached and recorded in DIR like deploy/galera/cluster.py's nodes: for trying a drill by hand
and for the suite's.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pymysql

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from detached import Detached  # noqa: E402 (deploy/detached.py, beside this folder)
from localdb import grant_service_account, initialise  # noqa: E402

UP_TIMEOUT = 60.0
GTID_POSITION = re.compile(r"^\d+-\d+-\d+(,\d+-\d+-\d+)*$")


@dataclass(frozen=True)
class Primary:
    """A MariaDB primary with its binary log, in ``dir``: data in ``dir/data``, log in ``dir/binlog``."""

    dir: Path
    port: int = 3320
    user: str = "tso"
    password: str = "tso"

    @property
    def datadir(self) -> Path:
        return self.dir / "data"

    @property
    def binlog_dir(self) -> Path:
        return self.dir / "binlog"

    @property
    def socket(self) -> Path:
        return self.dir / "mysqld.sock"

    def url(self, database: str, driver: str = "pymysql") -> str:
        return f"mysql+{driver}://{self.user}:{self.password}@127.0.0.1:{self.port}/{database}?charset=utf8mb4"

    def start(self) -> None:
        """Start the server (initialising the directory the first time) and wait until it answers."""
        self.dir.mkdir(parents=True, exist_ok=True)
        fresh = not self.datadir.exists() and initialise(self.datadir)
        for path in (self.dir, self.binlog_dir):
            path.mkdir(parents=True, exist_ok=True)
            shutil.chown(path, "mysql", "mysql")
        procs = Detached(self.dir)
        if procs.pid("mariadbd") is None:
            config = self.dir / "primary.cnf"
            config.write_text(
                (HERE / "primary.cnf")
                .read_text()
                .format(datadir=self.datadir, socket=self.socket, port=self.port, binlog_dir=self.binlog_dir)
            )
            procs.spawn("mariadbd", ["mariadbd", f"--defaults-file={config}", "--user=mysql"])
        _wait_answering(self.socket, procs, "mariadbd", self.datadir)
        if fresh:
            grant_service_account(self.socket, self.user, self.password)

    def stop(self) -> None:
        Detached(self.dir).stop("mariadbd", signal.SIGTERM, wait=60)


@dataclass(frozen=True)
class Backup:
    """A prepared backup: the copy in ``dir/base`` and the binary-log position it is consistent at."""

    dir: Path
    binlog_file: str
    binlog_position: int
    gtid: str

    @classmethod
    def read(cls, target: Path) -> Backup:
        facts = json.loads((target / "backup.json").read_text())
        return cls(target, facts["binlogFile"], facts["binlogPosition"], facts["gtid"])


def position(socket: Path) -> str:
    """The server's GTID position now: every transaction committed so far, as a recovery point."""
    conn = pymysql.connect(unix_socket=str(socket), user="root", autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
            row = cur.fetchone()
    finally:
        conn.close()
    return str(row[0]) if row else ""


def backup(socket: Path, target: Path) -> Backup:
    """A consistent backup of the running server into ``target`` (which must not exist), prepared."""
    base = target / "base"
    target.mkdir(parents=True)
    _run(["mariadb-backup", "--backup", f"--socket={socket}", "--user=root", f"--target-dir={base}"])
    # Prepared now: the redo log copied meanwhile is applied, so the copy is one consistent moment,
    # and a copy that cannot be prepared fails today instead of on the day of a restore.
    _run(["mariadb-backup", "--prepare", f"--target-dir={base}"])
    # "<file>\t<position>\t<GTID position>": the binary log's position at the backup's moment.
    fields = (base / "xtrabackup_binlog_info").read_text().split()
    if len(fields) < 3:
        raise RuntimeError(f"the backup recorded no GTID position ({fields}); is the binary log on?")
    facts = {"binlogFile": fields[0], "binlogPosition": int(fields[1]), "gtid": fields[2], "takenAt": time.time()}
    (target / "backup.json").write_text(json.dumps(facts, indent=2) + "\n")
    return Backup(target, fields[0], int(fields[1]), fields[2])


def restore(backup_dir: Path, binlog_dir: Path, until: str, datadir: Path) -> None:
    """The backup copied into ``datadir`` (empty or absent), rolled forward to ``until``."""
    taken = Backup.read(backup_dir)
    if datadir.exists() and any(datadir.iterdir()):
        raise RuntimeError(f"{datadir} is not empty: a restore never writes over data")
    datadir.mkdir(parents=True, exist_ok=True)
    _run(["mariadb-backup", "--copy-back", f"--target-dir={taken.dir / 'base'}", f"--datadir={datadir}"])
    _chown_tree(datadir)
    logs = _logs_from(binlog_dir, taken.binlog_file)
    # A server nobody else can reach (no network, its own socket), without a binary log of its
    # own: the replayed transactions are the old history's, the restored server starts a new one.
    socket = datadir / "restore.sock"
    procs = Detached(datadir)
    procs.spawn(
        "restore",
        [
            "mariadbd",
            "--no-defaults",
            f"--datadir={datadir}",
            f"--socket={socket}",
            f"--pid-file={datadir / 'restore-server.pid'}",
            f"--log-error={datadir / 'restore-error.log'}",
            "--skip-networking",
            "--skip-log-bin",
            "--user=mysql",
        ],
    )
    try:
        _wait_answering(socket, procs, "restore", datadir)
        stop = ["--stop-position=" + until] if GTID_POSITION.match(until) else ["--stop-datetime=" + until]
        # From the backup's exact file and offset (the first file's); GTIDs in the log are kept.
        replay = subprocess.Popen(
            ["mariadb-binlog", f"--start-position={taken.binlog_position}", *stop, *map(str, logs)],
            stdout=subprocess.PIPE,
        )
        applied = subprocess.run(
            ["mariadb", f"--socket={socket}", "--user=root", "--binary-mode"],
            stdin=replay.stdout,
            capture_output=True,
        )
        assert replay.stdout is not None
        replay.stdout.close()
        if replay.wait() != 0 or applied.returncode != 0:
            raise RuntimeError(f"replaying the binary log failed: {applied.stderr.decode()[-2000:]}")
    finally:
        procs.stop("restore", signal.SIGTERM, wait=120)
    for leftover in ("restore.log", "restore.pid"):
        (datadir / leftover).unlink(missing_ok=True)


def _logs_from(binlog_dir: Path, first: str) -> list[Path]:
    """The binary-log files from ``first`` on, in order (the index file lists them)."""
    index = binlog_dir / (first.rsplit(".", 1)[0] + ".index")
    names = [Path(line.strip()).name for line in index.read_text().splitlines() if line.strip()]
    if first not in names:
        raise RuntimeError(f"{first} (where the backup starts) is no longer in {binlog_dir}: it expired")
    return [binlog_dir / name for name in names[names.index(first) :]]


def _chown_tree(root: Path) -> None:
    shutil.chown(root, "mysql", "mysql")
    for path in root.rglob("*"):
        shutil.chown(path, "mysql", "mysql")


def _wait_answering(socket: Path, procs: Detached, name: str, datadir: Path) -> None:
    deadline = time.monotonic() + UP_TIMEOUT
    while True:
        try:
            pymysql.connect(unix_socket=str(socket), user="root", connect_timeout=1).close()
            return
        except pymysql.err.MySQLError:
            if procs.pid(name) is None:
                raise RuntimeError(f"the server exited; see {datadir} (error.log)") from None
            if time.monotonic() > deadline:
                raise TimeoutError(f"the server did not answer within {UP_TIMEOUT:.0f} s") from None
            time.sleep(0.2)


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} failed ({done.returncode}): {done.stderr.decode()[-2000:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    primary = commands.add_parser("primary", help="start a primary with its binary log in DIR")
    primary.add_argument("--dir", type=Path, required=True)
    primary.add_argument("--port", type=int, default=3320)
    primary.add_argument("--user", default="tso")
    primary.add_argument("--password", default="tso")
    stop = commands.add_parser("stop", help="stop the primary started in DIR")
    stop.add_argument("--dir", type=Path, required=True)
    take = commands.add_parser("backup", help="take a consistent, prepared backup of a running server")
    take.add_argument("--socket", type=Path, required=True)
    take.add_argument("--target", type=Path, required=True)
    point = commands.add_parser("position", help="print the server's GTID position (a recovery point)")
    point.add_argument("--socket", type=Path, required=True)
    back = commands.add_parser("restore", help="restore a backup into an empty data directory, to a point in time")
    back.add_argument("--backup", type=Path, required=True)
    back.add_argument("--binlogs", type=Path, required=True, help="the directory of the server's binary log")
    back.add_argument("--until", required=True, help="a GTID position (inclusive), or 'YYYY-MM-DD HH:MM:SS'")
    back.add_argument("--datadir", type=Path, required=True)
    args = parser.parse_args()
    if args.command == "primary":
        server = Primary(args.dir, args.port, args.user, args.password)
        server.start()
        print(server.url("task_observer"))
    elif args.command == "stop":
        Primary(args.dir).stop()
    elif args.command == "backup":
        print(json.dumps(backup(args.socket, args.target).__dict__, default=str))
    elif args.command == "position":
        print(position(args.socket))
    else:
        restore(args.backup, args.binlogs, args.until, args.datadir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
