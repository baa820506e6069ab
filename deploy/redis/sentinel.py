"""Redis behind Sentinel on one machine, for Centrifugo's Redis engine in the HA runs and tests.

    python deploy/redis/sentinel.py up   --dir DIR [--base-port 6390]
    python deploy/redis/sentinel.py kill --dir DIR              # kill -9 of the current primary
    python deploy/redis/sentinel.py down --dir DIR

A primary (base+1) and its replica (base+2), watched by three sentinels (base+11..13) under the
name ``task-observer`` (``sentinel.conf``). Centrifugo is given the sentinels' addresses and the
name (engine.redis.sentinel_address / sentinel_master_name) and follows the primary across a
failover. Processes are detached and recorded in DIR.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from detached import Detached  # noqa: E402 (deploy/detached.py, beside this folder)

MASTER_NAME = "task-observer"
SENTINELS = (1, 2, 3)


def redis_cli(port: int, *args: str, timeout: float = 2.0) -> str:
    done = subprocess.run(
        ["redis-cli", "-p", str(port), *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    return done.stdout.strip()


@dataclass(frozen=True)
class SentinelRedis:
    dir: Path
    base_port: int = 6390

    @property
    def sentinel_addresses(self) -> list[str]:
        return [f"127.0.0.1:{self.base_port + 10 + n}" for n in SENTINELS]

    def redis_port(self, n: int) -> int:
        return self.base_port + n

    # ------------------------------------------------------------ processes
    @property
    def _procs(self) -> Detached:
        return Detached(self.dir)

    def start_redis(self, n: int, replica_of: int | None = None) -> None:
        if self._procs.pid(f"redis{n}") is not None:
            return
        command = [
            shutil.which("redis-server") or "/usr/bin/redis-server",
            "--bind", "127.0.0.1", "--port", str(self.redis_port(n)),
            "--save", "", "--appendonly", "no", "--dir", str(self.dir),
        ]  # fmt: skip
        if replica_of is not None:
            command += ["--replicaof", "127.0.0.1", str(replica_of)]
        self._procs.spawn(f"redis{n}", command)
        self._wait(lambda: redis_cli(self.redis_port(n), "ping") == "PONG", f"redis{n}")

    def start_sentinel(self, n: int) -> None:
        if self._procs.pid(f"sentinel{n}") is not None:
            return
        config = self.dir / f"sentinel{n}.conf"
        if not config.exists():  # a sentinel keeps what it learned in its file: not overwritten
            config.write_text(
                (HERE / "sentinel.conf")
                .read_text()
                .format(
                    port=self.base_port + 10 + n,
                    dir=self.dir,
                    primary_port=self.redis_port(1),
                    reconfig_script=HERE / "new-epochs.sh",
                )
            )
        server = shutil.which("redis-sentinel") or shutil.which("redis-server") or "/usr/bin/redis-server"
        self._procs.spawn(f"sentinel{n}", [server, str(config), "--sentinel"])

    def _wait(self, ready: object, what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not ready():  # type: ignore[operator]
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not ready within {timeout:.0f} s; see {self.dir}")
            time.sleep(0.1)

    # ------------------------------------------------------------ what the sentinels say
    def primary_port(self) -> int | None:
        """The primary's port as the sentinels name it now."""
        for address in self.sentinel_addresses:
            answer = redis_cli(int(address.rsplit(":", 1)[1]), "SENTINEL", "get-master-addr-by-name", MASTER_NAME)
            lines = answer.split()
            if len(lines) == 2 and lines[1].isdigit():
                return int(lines[1])
        return None

    def _settled(self) -> bool:
        """Every sentinel knows the others and the replica: a failover can be agreed on."""
        for address in self.sentinel_addresses:
            info = redis_cli(int(address.rsplit(":", 1)[1]), "SENTINEL", "master", MASTER_NAME)
            fields = info.split("\n")
            values = dict(zip(fields[::2], fields[1::2], strict=False))
            if values.get("num-other-sentinels") != str(len(SENTINELS) - 1) or values.get("num-slaves") != "1":
                return False
        return True

    def events(self) -> dict[str, int]:
        """What the sentinels' logs say happened: every sentinel logs each failover's
        ``+switch-master``, so the most any one logged is the number of failovers; a reconfig
        script that failed or hung is retried by Sentinel and resets the streams again."""
        counts = {"failovers": 0, "script_errors": 0}
        for n in SENTINELS:
            log = self.dir / f"sentinel{n}.log"
            text = log.read_text(errors="replace") if log.exists() else ""
            counts["failovers"] = max(counts["failovers"], text.count("+switch-master"))
            counts["script_errors"] += text.count("-script-error") + text.count("-script-timeout")
        return counts

    # ------------------------------------------------------------ the whole set
    def up(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.start_redis(1)
        self.start_redis(2, replica_of=self.redis_port(1))
        for n in SENTINELS:
            self.start_sentinel(n)
        self._wait(self._settled, "the sentinels", timeout=60)

    def kill_primary(self) -> int:
        """kill -9 of the current primary; returns its number (1 or 2)."""
        port = self.primary_port()
        n = 1 if port == self.redis_port(1) else 2
        self._procs.stop(f"redis{n}", signal.SIGKILL)
        return n

    def _agreed_primary(self) -> int | None:
        """The primary every sentinel names, or None while they differ (or one does not answer)."""
        named = set()
        for address in self.sentinel_addresses:
            answer = redis_cli(int(address.rsplit(":", 1)[1]), "SENTINEL", "get-master-addr-by-name", MASTER_NAME)
            lines = answer.split()
            named.add(int(lines[1]) if len(lines) == 2 and lines[1].isdigit() else None)
        return named.pop() if len(named) == 1 else None

    def restart_redis(self, n: int) -> None:
        """A killed primary back, as a replica of whoever the sentinels promoted. Only once every
        sentinel names the new primary: a sentinel slow to answer (or still naming the old one)
        would otherwise have it start as a primary of its own, empty, which a Centrifugo node
        asking that sentinel could write to until the sentinels convert it."""
        agreed: list[int | None] = [None]

        def promoted() -> bool:
            agreed[0] = self._agreed_primary()
            return agreed[0] not in (None, self.redis_port(n))

        self._wait(promoted, "the sentinels' new primary")
        self.start_redis(n, replica_of=agreed[0])

    def down(self) -> None:
        for n in SENTINELS:
            self._procs.stop(f"sentinel{n}", signal.SIGTERM)
        for n in (1, 2):
            self._procs.stop(f"redis{n}", signal.SIGTERM)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["up", "down", "kill", "status"])
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--base-port", type=int, default=6390)
    args = parser.parse_args()
    redis = SentinelRedis(args.dir.resolve(), args.base_port)
    if args.command == "up":
        redis.up()
        print(f"Redis primary on :{redis.primary_port()}; sentinels {','.join(redis.sentinel_addresses)}")
    elif args.command == "down":
        redis.down()
    elif args.command == "kill":
        print(f"killed redis{redis.kill_primary()}")
    else:
        print(f"primary :{redis.primary_port()}")


if __name__ == "__main__":
    main()
