"""deploy/redis/new-epochs.sh, the sentinels' reconfig script, on a real Redis of its own: after a
failover the leader removes every Centrifugo history stream in one atomic script (a stream a
publication re-creates meanwhile cannot be removed a second time), and nothing else."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import REPO_ROOT, free_port, missing_service, needs_service, wait_until

SCRIPT = REPO_ROOT / "deploy" / "redis" / "new-epochs.sh"


@pytest.fixture
def redis_port(tmp_path: Path) -> Iterator[int]:
    needs_service("redis-server", "scripts/services up redis")
    server = shutil.which("redis-server")
    if server is None:
        missing_service("redis-server", "scripts/services up redis")
    port = free_port()
    proc = subprocess.Popen(
        [str(server), "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_until(lambda: _cli(port, "PING") == "PONG", 10, "redis-server")
    yield port
    proc.terminate()
    proc.wait(10)


def _cli(port: int, *args: str, stdin: str | None = None) -> str:
    return subprocess.run(
        ["redis-cli", "-p", str(port), *args], input=stdin, capture_output=True, text=True, timeout=60
    ).stdout.strip()


def _reset(port: int, role: str) -> subprocess.CompletedProcess[str]:
    args = ["task-observer", role, "start", "10.0.0.1", "6379", "127.0.0.1", str(port)]
    return subprocess.run(["sh", str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_the_leader_removes_every_history_stream_in_one_step_and_nothing_else(redis_port: int) -> None:
    streams = 5000
    commands = "".join(f"XADD centrifugo.stream.{{task_user:t/u{i}}} * d x\r\n" for i in range(streams))
    commands += "HSET centrifugo.list.meta.{x} e epoch1\r\nSET app.own.key keep\r\nXADD other.stream * d x\r\n"
    _cli(redis_port, "--pipe", stdin=commands)
    assert int(_cli(redis_port, "DBSIZE")) == streams + 3
    assert _reset(redis_port, "observer").returncode == 0  # not the leader: nothing
    assert int(_cli(redis_port, "DBSIZE")) == streams + 3
    done = _reset(redis_port, "leader")
    assert done.returncode == 0, done.stderr
    assert f"{streams + 1} history keys removed" in done.stderr
    assert sorted(_cli(redis_port, "KEYS", "*").split()) == ["app.own.key", "other.stream"]
    # One EVAL did it all: the whole reset ran as one atomic command.
    evals = [line for line in _cli(redis_port, "INFO", "commandstats").splitlines() if "cmdstat_eval:" in line]
    assert evals and evals[0].startswith("cmdstat_eval:calls=1,"), evals
