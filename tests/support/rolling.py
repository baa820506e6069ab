"""A rolling restart of every process behind nginx, under load.

Two status API replicas (``task-observer serve``), two Centrifugo nodes on one Redis engine and
two observers (``observer --mode loops``) run behind the nginx configuration that ships in
deploy/nginx. Producers report progress through nginx, each report retried with its eventId until
acknowledged (as the plugin does); a user's client follows the summary channel through nginx and,
when a reconnect could not recover from history, loads snapshots through nginx (design P30). Meanwhile
each process is restarted in turn — SIGTERM, wait for it to exit, start it again, wait until it
is ready — API replicas first, then Centrifugo nodes, then observers.

Used by ``tests/e2e/test_load_balancer.py`` (what must hold: nothing lost, nothing duplicated,
nothing shown backwards, every client converges) and ``bench/faults.py --fault rolling-restart``
(the same run, longer, with its figures).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from status.infra import tables as t
from tests.support.balancer import Nginx
from tests.support.processes import CentrifugoNode, free_port, wait_until
from tests.support.realtime import recording_client


@dataclass
class Process:
    """One ``task-observer`` process that can be stopped with SIGTERM and started again."""

    command: list[str]
    env: dict[str, str]
    log: Path
    port: int | None = None
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = [*self.command, *(["--port", str(self.port)] if self.port else [])]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(args, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        if self.port:
            wait_until(self.ready, 60, f"{self.command[1]} on {self.port}")

    def ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.command} exited with {self.proc.returncode}; see {self.log}")
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> float:
        """kill -9: no draining, whatever it was doing is cut off (design P27)."""
        if self.proc is None or self.proc.poll() is not None:
            return 0.0
        began = time.monotonic()
        self.proc.kill()
        self.proc.wait(10)
        return time.monotonic() - began

    def stop(self, timeout: float = 60) -> float:
        """SIGTERM and wait: how long it took to exit (a replica drains first)."""
        if self.proc is None or self.proc.poll() is not None:
            return 0.0
        began = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        return time.monotonic() - began


@dataclass
class Tally:
    acked: list[str] = field(default_factory=list)
    acked_at: list[float] = field(default_factory=list)  # time.monotonic() of each acknowledgement
    retried: int = 0  # attempts that got no acknowledgement (connection refused, 502/503): sent again
    answers: dict[int, int] = field(default_factory=dict)  # status code -> count of non-200 answers


def report_progress(base: str, executions: list[dict[str, Any]], stop: threading.Event, tally: Tally) -> None:
    """Progress for ``executions`` in turn until ``stop``; each report retried with its eventId until
    acknowledged (as the plugin's outbox does). Runs in a thread of its own."""
    with httpx.Client(base_url=base, timeout=10) as client:
        _produce(client, executions, stop, tally)


def _produce(client: httpx.Client, executions: list[dict[str, Any]], stop: threading.Event, tally: Tally) -> None:
    seq = dict.fromkeys(range(len(executions)), 1)
    for turn in itertools.count():
        if stop.is_set():
            return
        i = turn % len(executions)
        seq[i] += 1
        body = {
            "eventId": f"rolling-{executions[i]['executionId']}-{seq[i]}",
            "eventType": "STEP_PROGRESS",
            "sourceSeq": seq[i],
            "occurredAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "progress": {"current": seq[i] % 1000, "total": 1000},
        }
        headers = {"Authorization": f"Bearer {executions[i]['executionToken']}"}
        while True:  # at least once, like the plugin's outbox
            try:
                response = client.post("/internal/v1/task-events", json=body, headers=headers)
                if response.status_code == 200:
                    tally.acked.append(str(body["eventId"]))
                    tally.acked_at.append(time.monotonic())
                    break
                tally.answers[response.status_code] = tally.answers.get(response.status_code, 0) + 1
                if response.status_code < 500 and response.status_code != 429:
                    break  # refused for good: not expected here, and counted
            except httpx.HTTPError:
                tally.answers[0] = tally.answers.get(0, 0) + 1
            tally.retried += 1
            time.sleep(0.1)
        time.sleep(0.01)


async def rolling_restart(  # noqa: C901
    *,
    cli: str,
    env: dict[str, str],
    workdir: Path,
    database_url: str,
    tenant: str,
    coordinator_token: str,
    user_token: str,
    nodes: tuple[CentrifugoNode, CentrifugoNode],
    tasks: int = 6,
    producers: int = 2,
    settle_seconds: float = 2.0,
    kill_apis: bool = False,
) -> dict[str, Any]:
    """Run the scenario; returns what was measured (see the module's docstring)."""
    node_a, node_b = nodes
    api_ports = [free_port(), free_port()]
    lb = Nginx(workdir / "nginx", api_ports, [node_a.port, node_b.port])
    lb.check()
    env = {
        **env,
        "TASK_OBSERVER_CENTRIFUGO_API_URL": node_a.api_url,
        "TASK_OBSERVER_CENTRIFUGO_PUBLIC_URL": lb.ws_url,
        "TASK_OBSERVER_READINESS_INTERVAL_MS": "0",
        "TASK_OBSERVER_INTERNAL_RATE_PER_SECOND": "0",
    }
    replicas = [Process([cli, "serve"], env, workdir / f"api-{p}.log", port=p) for p in api_ports]
    observers = [Process([cli, "observer", "--mode", "loops"], env, workdir / f"observer-{i}.log") for i in range(2)]
    for process in (*replicas, *observers):
        process.start()
    lb.start()
    phases: list[tuple[str, float]] = []
    stop = threading.Event()
    tally = Tally()
    threads: list[threading.Thread] = []
    client = None
    http = httpx.Client(base_url=lb.url, timeout=10, headers={"Authorization": f"Bearer {coordinator_token}"})
    user = httpx.Client(base_url=lb.url, timeout=10, headers={"Authorization": f"Bearer {user_token}"})
    try:
        executions = []
        for n in range(tasks):
            created = http.post(
                "/internal/v1/workflows",
                json={
                    "clientWorkflowKey": f"wf-rolling-{uuid.uuid4().hex}",
                    "ownerId": "user-1",
                    "title": f"rolling {n}",
                    "initialTasks": [
                        {
                            "clientTaskKey": "t",
                            "title": "t",
                            "knownSteps": [{"stepId": "s", "operationCode": "DOCUMENT.PARSE"}],
                        }
                    ],
                },
            )
            assert created.status_code == 201, created.text
            task_id = created.json()["tasks"][0]["taskId"]
            ctx = http.post(
                f"/internal/v1/tasks/{task_id}/steps/s:activate",
                json={
                    "attempt": 1,
                    "producerId": "rolling",
                    "startedEvent": {"eventId": f"rolling-start-{task_id}", "occurredAt": _now()},
                },
            )
            assert ctx.status_code in (200, 201), ctx.text
            executions.append({**ctx.json(), "taskId": task_id})
        task_ids = [e["taskId"] for e in executions]

        session = user.get("/api/realtime/session").json()
        assert session["endpoints"]["websocket"] == lb.ws_url  # clients come in through the balancer
        client, recorder = recording_client(lb.ws_url, session["token"])
        await client.connect()
        await recorder.next_subscribed(30)
        seen: dict[str, list[int]] = {}
        snapshots: dict[str, int] = {}
        unrecovered = resubscribes = 0

        def snapshot() -> dict[str, int]:
            answer = user.post("/api/tasks/status:batchGet", json={"taskIds": task_ids})
            return {s["taskId"]: int(s["taskVersion"]) for s in answer.json().get("tasks", [])}

        async def watch() -> None:
            while True:
                _, _, data = await recorder.publications.get()
                if data.get("kind") == "task.summary" and data.get("taskId") in task_ids:
                    seen.setdefault(data["taskId"], []).append(int(data["taskVersion"]))

        async def resubscribed() -> None:
            nonlocal unrecovered, resubscribes
            while True:
                context = await recorder.subscribed.get()
                resubscribes += int(context.was_recovering)
                if context.was_recovering and not context.recovered:
                    unrecovered += 1
                    with contextlib.suppress(httpx.HTTPError, ValueError):
                        for task_id, version in (await asyncio.to_thread(snapshot)).items():
                            snapshots[task_id] = max(version, snapshots.get(task_id, 0))

        watcher, recoverer = asyncio.create_task(watch()), asyncio.create_task(resubscribed())
        threads = [
            threading.Thread(target=report_progress, args=(lb.url, executions[i::producers], stop, tally), daemon=True)
            for i in range(producers)
        ]
        for thread in threads:
            thread.start()
        await asyncio.sleep(settle_seconds)

        async def restart(name: str, stop_it: Any, start_it: Any) -> None:
            began = time.monotonic()
            await asyncio.to_thread(stop_it)
            await asyncio.to_thread(start_it)
            phases.append((name, time.monotonic() - began))
            await asyncio.sleep(settle_seconds)

        for i, replica in enumerate(replicas):
            # kill_apis: each replica killed with -9 under load (design P27) instead of drained.
            await restart(f"api-{i + 1}", replica.kill if kill_apis else replica.stop, replica.start)
        for name, node in (("centrifugo-a", node_a), ("centrifugo-b", node_b)):
            await restart(name, node.stop, node.start)
        for i, observer in enumerate(observers):
            await restart(f"observer-{i + 1}", observer.stop, observer.start)
        stop.set()
        for thread in threads:
            await asyncio.to_thread(thread.join, 30)
        load_ended = time.monotonic()

        engine = sa.create_engine(database_url, poolclass=sa.pool.NullPool)

        def database_versions() -> dict[str, int]:
            with engine.connect() as conn:
                rows = conn.execute(sa.select(t.task.c.id, t.task.c.version).where(t.task.c.id.in_(task_ids)))
                return {r.id: int(r.version) for r in rows}

        converged = None
        while time.monotonic() - load_ended < 60:
            versions = database_versions()
            shown = {k: max([*seen.get(k, [0]), snapshots.get(k, 0)]) for k in versions}
            if shown == versions:
                converged = time.monotonic() - load_ended
                break
            await asyncio.sleep(0.1)
        with engine.connect() as conn:
            logged = set(
                conn.scalars(
                    sa.select(t.task_event_log.c.event_id).where(
                        t.task_event_log.c.tenant_id == tenant, t.task_event_log.c.task_id.in_(task_ids)
                    )
                )
            )
        engine.dispose()
        watcher.cancel()
        recoverer.cancel()
        return {
            "acked": len(set(tally.acked)),
            "lost": len(set(tally.acked) - logged),
            "acked_twice": len(tally.acked) - len(set(tally.acked)),
            "retried": tally.retried,
            "answers": dict(sorted(tally.answers.items())),
            "backwards": sum(1 for v in seen.values() for a, b in itertools.pairwise(v) if b < a),
            "resubscribes": resubscribes,  # the client's node went away: it reconnected through nginx
            "unrecovered_resubscribes": unrecovered,
            "converged_s": converged,
            "phases": phases,
            "published_seen": sum(len(v) for v in seen.values()),
        }
    finally:
        stop.set()
        http.close()
        user.close()
        if client is not None:
            with contextlib.suppress(Exception):
                await client.disconnect()
        lb.stop()
        for process in (*replicas, *observers):
            process.stop(timeout=15)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
