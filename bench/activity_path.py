"""The plugin's activity path in one process: what the service's Python costs per activity.

    .venv/bin/python bench/activity_path.py [--database mariadb|sqlite] [--activities 600]
        [--group 10] [--steps 10] [--rounds 3] [--shards N] [--apart] [--profile FILE]

An activity as the plugin reports it — its binding with its STEP_STARTED, then one STEP_PROGRESS
and its STEP_COMPLETED (by handle) together, as a short activity's reach the service — run
through ``StatusService`` as the API's group committer runs it (``--group`` activities per
transaction; ``--apart``: the progress and the endings in groups of their own), on a scratch
MariaDB database (the production setup; the driver is the one the URL names) or SQLite. No HTTP,
no other process: the figure is the application's and the database driver's CPU per activity,
the part of ``plugin_overhead.py``'s API figure that the write path decides. The process's CPU is
measured round by round, against the MariaDB server's CPU in the same round (the work the service
asks of the database); ``--profile`` writes cProfile's statistics of the last round.

``--shards N`` routes through a bucket map over N scratch databases of the same server (their
tasks' owners spread over the buckets): what routing costs the write path — each transaction's
fence read, and a group split into one transaction per shard. It measures routing, not capacity:
every shard is the same server on the same cores.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from common import scratch_database  # type: ignore[import-not-found]

from status.app import commands as c
from status.bootstrap import build_service
from status.domain.auth import Role, ServicePrincipal
from status.infra import migrate
from status.infra.db import create_engine
from status.infra.shards import install_map
from tests.support.settings import make_settings

PRODUCER = "bench-worker"
CALLER = ServicePrincipal(PRODUCER, "bench", "default", frozenset({Role.COORDINATOR, Role.WORKER}))


@contextlib.contextmanager
def database(kind: str, shards: int = 0) -> Iterator[tuple[str, dict[str, str]]]:
    """The database's URL and, with ``shards``, the other shards' by name (a map installed over all)."""
    if shards:
        with contextlib.ExitStack() as stack:
            urls = {f"s{n}": stack.enter_context(scratch_database()) for n in range(shards)}
            engines = {name: create_engine(url) for name, url in urls.items()}
            install_map(engines["s0"], engines, datetime.now(UTC).replace(tzinfo=None))
            for engine in engines.values():
                engine.dispose()
            home = urls.pop("s0")
            yield home, urls
        return
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite:///{tmp}/bench.db"
            migrate.upgrade(url)
            yield url, {}
    else:
        with scratch_database() as url:
            yield url, {}


def mariadb_cpu() -> float:
    """CPU seconds so far of the MariaDB server on this machine (0 when there is none)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            if name in ("mariadbd", "mysqld"):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            continue
    return 0.0


def new_tasks(service: object, count: int, steps: int) -> list[str]:
    known = tuple(c.KnownStep(f"s{i:02d}", "FILE.PREPARE") for i in range(steps))
    ids: list[str] = []
    for _ in range(count):
        created = service.create_workflow(  # type: ignore[attr-defined]
            CALLER,
            c.CreateWorkflow(
                client_workflow_key=uuid.uuid4().hex,
                owner_id=f"bench-user-{len(ids) % 64}",  # over 64 buckets, as many users' tasks are
                title="bench",
                initial_tasks=(c.NewTask(client_task_key="t", title="t", known_steps=known),),
            ),
        )
        ids.append(created["tasks"][0]["taskId"])
    return ids


def run_round(service: object, task_ids: list[str], steps: int, group: int, apart: bool = False) -> int:
    """Every step of every task as one activity; the groups as the committer forms them: the
    bindings (each with its STARTED), then the activities' progress and endings (``apart``: in a
    group each, as a long activity's, whose ending comes long after its progress)."""
    now = datetime.now(UTC)
    work = [(task_id, f"s{i:02d}") for i in range(steps) for task_id in task_ids]
    done = 0
    for start in range(0, len(work), group):
        chunk = work[start : start + group]
        binds = [
            (
                CALLER,
                c.ActivateStep(
                    task_id,
                    step_id,
                    1,
                    PRODUCER,
                    temporal_activity=c.TemporalActivity("default", f"wf-{task_id}", "run-1", step_id),
                    started=c.StartedEvent(f"{task_id}/{step_id}/start", now, 1),
                ),
            )
            for task_id, step_id in chunk
        ]
        contexts = service.bind_executions(binds)  # type: ignore[attr-defined]
        reports = [(ctx, kind, seq) for ctx in contexts for kind, seq in (("STEP_PROGRESS", 2), ("STEP_COMPLETED", 3))]
        # The plugin sends what its outbox holds: a short activity's progress and ending together.
        waves = [[r for r in reports if r[1] == kind] for kind in ("STEP_PROGRESS", "STEP_COMPLETED")]
        for wave in waves if apart else [reports]:
            events = [
                (
                    CALLER,
                    c.ReportEvent(
                        event_id=f"{ctx.task_id}/{ctx.step_id}/{kind}",
                        event_type=kind,
                        source_seq=seq,
                        occurred_at=now,
                        execution_handle=ctx.execution_handle,
                    ),
                )
                for ctx, kind, seq in wave
            ]
            outcomes = service.report_group(events)  # type: ignore[attr-defined]
            refused = [o for o in outcomes if isinstance(o, BaseException) or not o.get("accepted")]
            if refused:
                raise SystemExit(f"the service refused an event: {refused[0]!r}")
        done += len(chunk)
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database", choices=("mariadb", "sqlite"), default="mariadb")
    parser.add_argument("--activities", type=int, default=600, help="activities per round")
    parser.add_argument("--group", type=int, default=10, help="activities per transaction")
    parser.add_argument("--steps", type=int, default=10, help="steps per task")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shards", type=int, default=0, help="route through a map over this many databases")
    parser.add_argument(
        "--apart", action="store_true", help="progress and endings in transactions of their own (long activities)"
    )
    parser.add_argument("--profile", type=Path, help="cProfile statistics of the last round to this file")
    args = parser.parse_args()
    tasks_per_round = max(1, args.activities // args.steps)
    with database(args.database, args.shards) as (url, others), tempfile.TemporaryDirectory() as data:
        sharding = {"shard_name": "s0", "shards": others} if args.shards else {}
        service = build_service(make_settings(url, Path(data), **sharding))
        service.install_default_definitions()
        warm = new_tasks(service, 2, args.steps)
        run_round(service, warm, args.steps, args.group, args.apart)
        figures = []
        for number in range(args.rounds):
            tasks = new_tasks(service, tasks_per_round, args.steps)
            profile = cProfile.Profile(time.process_time) if args.profile and number == args.rounds - 1 else None
            db_before, cpu_before, wall_before = mariadb_cpu(), time.process_time(), time.perf_counter()
            if profile is not None:
                profile.enable()
            count = run_round(service, tasks, args.steps, args.group, args.apart)
            if profile is not None:
                profile.disable()
            cpu, wall = time.process_time() - cpu_before, time.perf_counter() - wall_before
            db = mariadb_cpu() - db_before
            figures.append(cpu / count * 1000)
            print(
                f"round {number + 1}: {count} activities in {wall:.2f} s, {count / wall:.0f}/s;"
                f" CPU per activity: this process {cpu / count * 1000:.2f} ms"
                + (f", MariaDB {db / count * 1000:.2f} ms" if args.database == "mariadb" else "")
                + (" (profiled)" if profile is not None else "")
            )
            if profile is not None:
                profile.dump_stats(args.profile)
        driver = url.split("://", 1)[0]
        routed = f", routed over {args.shards} shard(s)" if args.shards else ""
        print(
            f"activity path ({driver}, {args.group} activities a group, {args.steps}-step tasks{routed}):"
            f" median {statistics.median(figures):.2f} ms of this process's CPU per activity"
            " (plugin_overhead.py's API target: 1.5 ms, HTTP included)"
        )


if __name__ == "__main__":
    main()
