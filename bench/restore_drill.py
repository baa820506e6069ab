"""The restore drill: a backup taken under load, restored to a point in time into a fresh server.

    .venv/bin/python bench/restore_drill.py [--seconds 2] [--json FILE]

Its own MariaDB primary with the binary log on (``deploy/backup/pitr.py primary``), the status
API and observer processes on it, a Centrifugo node (memory engine) and a WebSocket client
following the user's summary channel; HTTP producers report progress for a set of tasks, every
report retried with its eventId until acknowledged. Then, as docs/operations.md "Backups and
point-in-time recovery" says an operator does it:

1. a backup (``pitr.py backup``: ``mariadb-backup``, prepared at once) while the load goes on, and
   the retention pass archiving the event log meanwhile;
2. more load; the load paused, the recovery point read (the GTID position); more load after it,
   which the client sees — the client is now ahead of the point;
3. the disaster: API, observer and server stopped; ``pitr.py restore`` to the point into an
   empty directory, a server started on it, ``task-observer restore-fence``, Centrifugo's
   history dropped (the memory engine's node restarted: new epochs), API and observer started
   on the restored database, more load.

Printed: events acknowledged before and after the point; of those before, missing from the
restored database (target 0); of those after, present in it (target 0); tasks whose restored
version is not above every version the client saw (target 0); publications after the restore
that reuse a version the client had with other content (target 0); the outbox left unpublished
(target 0); whether the client shows every task at its restored database version, and how long
after the API started; the archive's manifests verified; how long the backup, the restore and the
replay took.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
from common import (  # type: ignore[import-not-found]
    REPO,
    centrifugo_node,
    running_executions_http,
    stack_env,
)

from status.domain.auth import Role, UserPrincipal
from status.infra import migrate
from status.infra import tables as t
from status.infra.tokens import RealtimeTokens, ServiceTokens, UserTokens
from tests.support.processes import free_port, wait_until
from tests.support.realtime import recording_client

sys.path.insert(0, str(REPO / "deploy" / "backup"))
import pitr  # type: ignore[import-not-found]

TENANT = "drill"
USER = "viewer"
CLI = str(REPO / ".venv" / "bin" / "task-observer")
TASKS = 8


class Service:
    """The status API and the observer (relay, retention) on one database."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        self.procs = [
            subprocess.Popen([CLI, "serve", "--port", str(self.port)], env=self.env, **quiet),  # type: ignore[call-overload]
            subprocess.Popen([CLI, "observer", "--mode", "loops"], env=self.env, **quiet),  # type: ignore[call-overload]
        ]
        wait_until(self._ready, 60, "status API")

    def _ready(self) -> bool:
        try:
            return httpx.get(f"{self.base}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def cli(self, *args: str) -> str:
        done = subprocess.run([CLI, *args], env=self.env, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"task-observer {' '.join(args)}: {done.stderr[-2000:]}")
        return done.stdout

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(15)


class Producer:
    """Progress for every execution in turn, each report retried with its eventId until acknowledged
    (as the plugin's outbox does); sequences go on across pauses."""

    def __init__(self, executions: list[dict[str, Any]]) -> None:
        self.executions = executions
        self.seq = {e["executionId"]: 1 for e in executions}
        self.acked: list[str] = []

    def run_for(self, base: str, seconds: float, stop: threading.Event | None = None) -> list[str]:
        """Produce for ``seconds`` (or until ``stop``); the eventIds acknowledged meanwhile (every one
        committed on return)."""
        start = len(self.acked)
        deadline = time.monotonic() + seconds
        with httpx.Client(base_url=base, timeout=10) as client:
            turn = 0
            while time.monotonic() < deadline and not (stop is not None and stop.is_set()):
                execution = self.executions[turn % len(self.executions)]
                turn += 1
                key = execution["executionId"]
                self.seq[key] += 1
                body = {
                    "eventId": f"drill-{key}-{self.seq[key]}",
                    "eventType": "STEP_PROGRESS",
                    "sourceSeq": self.seq[key],
                    "occurredAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "progress": {"current": self.seq[key] % 1000, "total": 1000},
                }
                headers = {"Authorization": f"Bearer {execution['executionToken']}"}
                while True:
                    with contextlib.suppress(httpx.HTTPError):
                        response = client.post("/internal/v1/task-events", json=body, headers=headers)
                        if response.status_code == 200:
                            self.acked.append(str(body["eventId"]))
                            break
                        if response.status_code < 500 and response.status_code != 429:
                            raise RuntimeError(f"report refused: {response.status_code} {response.text[:300]}")
                    time.sleep(0.05)
        return self.acked[start:]


class Follower:
    """What the client shows: per task the highest version it took, from publications and from the
    snapshots it loads when history cannot fill a gap (design P30); and every (task, version) it
    received with what it said, so a version reused for another state is caught."""

    def __init__(self, recorder: Any, task_ids: list[str]) -> None:
        self.recorder = recorder
        self.task_ids = task_ids
        self.shown: dict[str, int] = {}
        self.contents: dict[tuple[str, int], Any] = {}
        self.reused: list[tuple[str, int]] = []

    def take(self, task_id: str, version: int, state: dict[str, Any]) -> None:
        said = content(state)
        earlier = self.contents.get((task_id, version))
        if earlier is not None and earlier != said:
            self.reused.append((task_id, version))
        self.contents[(task_id, version)] = said
        self.shown[task_id] = max(version, self.shown.get(task_id, 0))

    async def watch(self) -> None:
        while True:
            _, _, data = await self.recorder.publications.get()
            if data.get("kind") == "task.summary":
                self.take(data["taskId"], int(data["taskVersion"]), data)

    async def resubscribed(self, base: Any, user_token: str) -> None:
        """History could not fill the gap (a new epoch): the client loads its snapshots, from
        whichever service answers (``base()``: the restored one once it runs)."""
        while True:
            context = await self.recorder.subscribed.get()
            if context.was_recovering and not context.recovered:
                for _ in range(100):  # until the restored service answers
                    with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                        async with httpx.AsyncClient(timeout=10) as http:
                            response = await http.post(
                                f"{base()}/api/tasks/status:batchGet",
                                json={"taskIds": self.task_ids},
                                headers={"Authorization": f"Bearer {user_token}"},
                            )
                        if response.status_code == 200:
                            for snap in response.json()["tasks"]:
                                self.take(snap["taskId"], int(snap["taskVersion"]), snap)
                            break
                    await asyncio.sleep(0.2)


def database_facts(url: str, event_ids: list[str]) -> tuple[dict[str, int], set[str], int]:
    """(task versions, which of ``event_ids`` the dedup results hold, outbox rows not published)."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            versions = {
                row.id: int(row.version)
                for row in conn.execute(sa.select(t.task.c.id, t.task.c.version).where(t.task.c.tenant_id == TENANT))
            }
            found: set[str] = set()
            for start in range(0, len(event_ids), 500):
                chunk = event_ids[start : start + 500]
                found |= set(
                    conn.scalars(
                        sa.select(t.task_event_dedup.c.event_id).where(t.task_event_dedup.c.event_id.in_(chunk))
                    )
                )
            pending = conn.scalar(
                sa.select(sa.func.count()).select_from(t.task_outbox).where(t.task_outbox.c.status != "PUBLISHED")
            )
    finally:
        engine.dispose()
    return versions, found, int(pending or 0)


async def run(seconds: float) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="restore-drill-"))
    os.chmod(work, 0o755)
    primary = pitr.Primary(work / "primary", port=free_port())
    primary.start()
    url = primary.url("task_observer")
    migrate.upgrade(url)
    result: dict[str, Any] = {}
    with centrifugo_node() as node:
        env = {
            **os.environ,
            **stack_env(url, node, work / "data"),
            "TASK_OBSERVER_ARCHIVE_DIR": str(work / "archive"),
            # The event log past a second is archived, so the drill's retention passes write batches.
            "TASK_OBSERVER_EVENT_RETENTION_SECONDS": "1",
            "TASK_OBSERVER_INTERNAL_RATE_PER_SECOND": "0",
        }
        service = Service(env)
        service.start()
        restored: pitr.Primary | None = None
        client = None
        try:
            token = ServiceTokens(env["TASK_OBSERVER_SERVICE_TOKEN_SECRET"]).issue(
                "drill", TENANT, "s", [Role.COORDINATOR, Role.WORKER]
            )
            executions = running_executions_http(service.base, token, TASKS, USER, "drill")
            producer = Producer(executions)

            conn_token, _ = RealtimeTokens(node.token_secret, 3600).connection(
                UserPrincipal(TENANT, USER), [f"task_user:{TENANT}/{USER}"]
            )
            client, recorder = recording_client(node.ws_url, conn_token)
            await client.connect()
            await recorder.next_subscribed(30)
            follower = Follower(recorder, [e["taskId"] for e in executions])
            user_token = UserTokens(env["TASK_OBSERVER_USER_TOKEN_SECRET"]).issue(TENANT, USER)
            watchers = [
                asyncio.create_task(follower.watch()),
                asyncio.create_task(follower.resubscribed(lambda: service.base, user_token)),
            ]
            shown = follower.shown

            # 1. A backup while the load goes on; the retention pass archives meanwhile.
            await asyncio.to_thread(producer.run_for, service.base, seconds)
            service.cli("retention")
            stop = threading.Event()
            load = asyncio.create_task(asyncio.to_thread(producer.run_for, service.base, 600, stop))
            started = time.monotonic()
            backup = await asyncio.to_thread(pitr.backup, primary.socket, work / "backup")
            result["backup_s"] = time.monotonic() - started
            stop.set()
            await load
            # 2. More load, then the point; more load after it, which the client sees.
            await asyncio.to_thread(producer.run_for, service.base, seconds)
            point = pitr.position(primary.socket)
            before = list(producer.acked)
            after = await asyncio.to_thread(producer.run_for, service.base, seconds)
            service.cli("retention")
            old_versions, _, _ = database_facts(url, [])
            await wait_for(lambda: all(shown.get(k, 0) >= v for k, v in old_versions.items()), 20)
            seen_before = dict(shown)

            # 3. The disaster and the restore.
            service.stop()
            primary.stop()
            started = time.monotonic()
            await asyncio.to_thread(pitr.restore, backup.dir, primary.binlog_dir, point, work / "restored" / "data")
            result["restore_s"] = time.monotonic() - started
            restored = pitr.Primary(work / "restored", port=free_port())
            restored.start()
            restored_url = restored.url("task_observer")
            service = Service({**env, "TASK_OBSERVER_DATABASE_URL": restored_url})
            fence = json.loads(service.cli("restore-fence"))
            await asyncio.to_thread(node.restart)  # the memory engine's history is gone: new epochs
            restored_at = time.monotonic()
            service.start()
            fenced, _, _ = database_facts(restored_url, [])
            later = await asyncio.to_thread(producer.run_for, service.base, seconds)
            service.cli("retention")
            versions, found, _ = database_facts(restored_url, before + after + later)
            converged = await wait_for(lambda: all(shown.get(k) == v for k, v in versions.items()), 30)
            converged_s = time.monotonic() - restored_at if converged else None
            # The relay drains what was left unpublished when the point was taken.
            await wait_for(lambda: database_facts(restored_url, [])[2] == 0, 10)
            _, _, pending = database_facts(restored_url, [])
            verify = subprocess.run(
                [CLI, "archive", "verify", "--dir", str(work / "archive")],
                env=service.env,
                capture_output=True,
                text=True,
            )
            manifests = len(list((work / "archive").rglob("*.manifest.json")))
            result |= {
                "acked_before": len(before),
                "acked_after": len(after),
                "acked_restored": len(later),
                "lost": sorted(set(before) - found),
                "resurrected": sorted(set(after) & found),
                "later_lost": sorted(set(later) - found),
                "not_fenced": sorted(k for k, v in fenced.items() if v <= seen_before.get(k, 0)),
                "fence": fence,
                "reused": follower.reused,
                "outbox_pending": pending,
                "converged_s": converged_s,
                "behind": {k: (shown.get(k), v) for k, v in versions.items() if shown.get(k) != v},
                "archive_ok": verify.returncode == 0,
                "archive_manifests": manifests,
                "archive_report": verify.stdout[-1000:] + verify.stderr[-1000:],
                "point": point,
                "backup_gtid": backup.gtid,
            }
            for task in watchers:
                task.cancel()
        finally:
            if client is not None:
                with contextlib.suppress(Exception):
                    await client.disconnect()
            service.stop()
            for server in (primary, restored):
                if server is not None:
                    server.stop()
    shutil.rmtree(work, ignore_errors=True)
    return result


def content(state: dict[str, Any]) -> tuple[Any, Any]:
    """What a version of a task says that a drill's change moves: its lifecycle and its progress."""
    return state.get("lifecycleStatus"), (state.get("progress") or {}).get("percent")


async def wait_for(condition: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        await asyncio.sleep(0.05)
    return bool(condition())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="each load phase's length")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    result = asyncio.run(run(args.seconds))
    print(
        f"acknowledged: {result['acked_before']} before the point, {result['acked_after']} after it,"
        f" {result['acked_restored']} after the restore"
    )
    print(
        f"lost (before the point, not restored): {len(result['lost'])} (target 0);"
        f" resurrected (after the point, restored): {len(result['resurrected'])} (target 0);"
        f" lost after the restore: {len(result['later_lost'])} (target 0)"
    )
    print(
        f"versions: fence {result['fence']}; tasks not above what the client saw: {len(result['not_fenced'])}"
        f" (target 0); versions reused with other content: {len(result['reused'])} (target 0)"
    )
    converged = "never" if result["converged_s"] is None else f"{result['converged_s']:.1f} s after the restore"
    print(
        f"client shows every task at its restored version: {converged}; outbox unpublished: {result['outbox_pending']}"
    )
    print(f"archive: {result['archive_manifests']} manifests, verified: {result['archive_ok']}")
    print(f"backup {result['backup_s']:.1f} s (under load), restore and replay {result['restore_s']:.1f} s")
    if args.json is not None:
        args.json.write_text(json.dumps([result], indent=2))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
