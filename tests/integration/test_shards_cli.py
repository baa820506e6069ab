"""A sharded install from its settings and the command line: ``migrate`` gives every shard the
schema, ``shards init`` installs the map, the composition root routes by it, ``shards move`` moves
a bucket live and ``shards release`` clears the shard it left; refusals exit 1 with the reason."""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from status.app.routing import bucket_of
from status.bootstrap import Components
from status.domain.auth import Role, ServicePrincipal
from status.infra import tables as t
from status.settings import Settings
from task_observer.cli import main
from tests.conftest import MYSQL_SERVER_URL, _mysql_server_engine
from tests.support.processes import FAST_LANE, CentrifugoNode
from tests.support.relay_pump import RelayPump
from tests.support.shards import Projectors, create, where

pytestmark = pytest.mark.skipif(FAST_LANE, reason="shards are MariaDB databases")


@pytest.fixture
def urls() -> Iterator[dict[str, str]]:
    server = _mysql_server_engine()
    names = {shard: f"tso_cli_{shard}_{secrets.token_hex(3)}" for shard in ("main", "east", "west")}
    with server.begin() as conn:
        for name in names.values():
            conn.execute(sa.text(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
    yield {shard: f"{MYSQL_SERVER_URL}/{name}?charset=utf8mb4" for shard, name in names.items()}
    with server.begin() as conn:
        for name in names.values():
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name}"))
    server.dispose()


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_sharded_install_from_settings_and_the_command_line(
    urls: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    centrifugo: CentrifugoNode,
) -> None:
    monkeypatch.setenv("TASK_OBSERVER_ENV", "test")
    monkeypatch.setenv("TASK_OBSERVER_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TASK_OBSERVER_DATABASE_URL", urls["main"])
    monkeypatch.setenv("TASK_OBSERVER_SHARD_NAME", "main")
    monkeypatch.setenv("TASK_OBSERVER_SHARDS", f"east={urls['east']} west={urls['west']}")
    assert _run(capsys, "migrate")[0] == 0
    code, out, _ = _run(capsys, "shards", "init")
    assert code == 0 and json.loads(out)["buckets"] == {"main": 1366, "east": 1365, "west": 1365}
    code, _, err = _run(capsys, "shards", "init")
    assert code == 1 and "installed already" in err

    parts = Components(Settings.from_env())
    service = parts.service
    service.install_default_definitions()
    coordinator = ServicePrincipal("coordinator-1", f"t-{uuid.uuid4().hex[:6]}", "s", frozenset({Role.COORDINATOR}))
    assert parts.shards is not None
    owner = next(
        f"u{n}"
        for n in range(1000)
        if parts.shards.map.route(bucket_of(coordinator.tenant_id, f"u{n}")).shard == "east"
    )
    task_id = create(service, coordinator, owner)
    engines = parts.shard_engines
    assert where(engines, t.task, t.task.c.id, task_id) == ["east"]

    bucket = bucket_of(coordinator.tenant_id, owner)
    relays = [RelayPump(engine, centrifugo.api_url, centrifugo.api_key) for engine in engines.values()]
    with Projectors(engines), relays[0], relays[1], relays[2]:  # each shard's observer: the move waits for them
        code, out, _ = _run(capsys, "shards", "move", hex(bucket), "west", "--release-after", "-1")
    assert code == 0, out
    moved = json.loads(out)
    assert (moved["from"], moved["to"], moved["tasks"], moved["tasksReleased"]) == ("east", "west", 1, None)
    assert where(engines, t.task, t.task.c.id, task_id) == ["east", "west"]  # kept, as asked
    code, out, _ = _run(capsys, "shards", "show", str(bucket))
    assert json.loads(out) == {"bucket": bucket, "shard": "west", "epoch": 2, "state": "ACTIVE", "target": None}
    code, _, err = _run(capsys, "shards", "release", str(bucket), "west")
    assert code == 1 and "still holds" in err
    code, out, _ = _run(capsys, "shards", "release", str(bucket), "east")
    assert code == 0 and json.loads(out)["tasksDeleted"] == 1
    assert where(engines, t.task, t.task.c.id, task_id) == ["west"]
    snapshot = service.snapshot(task_id)  # the process's map is re-read when a shard refuses or says so
    assert snapshot is not None and snapshot["taskId"] == task_id
    # Moved back, the shard it left is released by the move itself once its wait is over.
    relays = [RelayPump(engine, centrifugo.api_url, centrifugo.api_key) for engine in engines.values()]
    with Projectors(engines), relays[0], relays[1], relays[2]:
        code, out, _ = _run(capsys, "shards", "move", str(bucket), "east", "--release-after", "0")
    assert code == 0 and json.loads(out)["tasksReleased"] == 1, out
    assert where(engines, t.task, t.task.c.id, task_id) == ["east"]
    code, _, err = _run(capsys, "shards", "abort", str(bucket))
    assert code == 1 and "not moving" in err
    # A restored shard is fenced on its own (--shard names it): its versions jump.
    with engines["east"].connect() as conn:
        before = conn.scalar(sa.select(t.task.c.version).where(t.task.c.id == task_id))
    code, out, _ = _run(capsys, "restore-fence", "--shard", "east", "--jump", "5")
    assert code == 0 and json.loads(out)["task"] >= 1, out
    with engines["east"].connect() as conn:
        assert conn.scalar(sa.select(t.task.c.version).where(t.task.c.id == task_id)) == before + 5
    code, _, err = _run(capsys, "restore-fence", "--shard", "north")
    assert code == 2 and "not a configured shard" in err
    with pytest.raises(SystemExit) as usage:
        main(["shards", "show", "4096"])  # no such bucket
    assert usage.value.code == 2
