"""Three MariaDB databases as shards, a service routing over them, and helpers to place tasks."""

from __future__ import annotations

import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from status.api.errors import unexpected_error
from status.app import commands as c
from status.app.routing import bucket_of
from status.app.service import ExecutionContext, StatusService
from status.domain.auth import ServicePrincipal
from status.domain.errors import Unavailable
from status.domain.ids import bucket_hint, handle_bucket, workflow_bucket
from status.infra import tables as t
from status.infra.db import create_engine
from status.infra.schemas import JsonSchemaValidator
from status.infra.shards import ShardedDatabases, install_map
from status.infra.tokens import ExecutionTokens
from status.infra.uow import SqlDatabase
from tests.conftest import _migrated_mariadb
from tests.support.factories import event, now
from tests.support.wiring import fold_all, projector_for

SHARDS = ("a", "b", "c")
NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC).replace(tzinfo=None)


@contextmanager
def three_shards() -> Iterator[dict[str, sa.Engine]]:
    """Three migrated databases, the first the control store, a map installed over them."""
    makers = [_migrated_mariadb() for _ in SHARDS]
    urls = [next(maker) for maker in makers]
    engines = {name: create_engine(url) for name, url in zip(SHARDS, urls, strict=True)}
    install_map(engines["a"], engines, NOW)
    try:
        yield engines
    finally:
        for engine in engines.values():
            engine.dispose()
        for maker in makers:
            next(maker, None)


def sharded_service(
    engines: dict[str, sa.Engine], refresh_seconds: float = 3600.0, control: str = SHARDS[0]
) -> tuple[StatusService, ShardedDatabases]:
    """A service over the shards (``control``: the one holding the map, the home database) whose
    map, read now, is not re-read by itself for an hour: only a shard's refusal makes it look again."""
    databases = {name: SqlDatabase(engine) for name, engine in engines.items()}
    shards = ShardedDatabases(engines[control], databases, control, refresh_seconds=refresh_seconds)
    service = StatusService(
        databases[control],
        execution_tokens=ExecutionTokens(secrets.token_hex(32)),
        validator=JsonSchemaValidator(),
        shards=shards,
    )
    service.install_default_definitions()
    return service, shards


def owner_on(shards: ShardedDatabases, tenant: str, shard: str, skip: int = 0) -> str:
    """An owner whose bucket the map puts on ``shard`` (``skip``: the n-th such owner)."""
    for n in range(10_000):
        owner = f"user-{n}"
        if shards.map.route(bucket_of(tenant, owner)).shard == shard:
            if skip == 0:
                return owner
            skip -= 1
    raise AssertionError(f"no owner on {shard}")


def where(engines: dict[str, sa.Engine], table: sa.Table, column: sa.Column[str], value: str) -> list[str]:
    """The shards holding a row with ``column == value``."""
    found = []
    for name, engine in engines.items():
        with engine.connect() as conn:
            if conn.scalar(sa.select(sa.func.count()).select_from(table).where(column == value)):
                found.append(name)
    return found


def create(
    service: StatusService,
    coordinator: ServicePrincipal,
    owner: str,
    task_owner: str | None = None,
    refs: tuple[tuple[str, str], ...] = (),
) -> str:
    """A workflow of ``owner`` with one task (of ``task_owner``, default the owner) of one step, s1,
    with the external references ``refs``."""
    created = service.create_workflow(
        coordinator,
        c.CreateWorkflow(
            client_workflow_key=f"wf-{uuid.uuid4().hex}",
            owner_id=owner,
            title="Sharded",
            initial_tasks=(
                c.NewTask(
                    client_task_key="t",
                    title=f"of {owner}",
                    owner_id=task_owner,
                    known_steps=(c.KnownStep("s1", "DOCUMENT.PARSE"),),
                    external_refs=refs,
                ),
            ),
        ),
    )
    return str(created["tasks"][0]["taskId"])


class Projectors:
    """Each shard's workflow projector passing continuously on a thread, as each shard's observer does."""

    def __init__(self, engines: dict[str, sa.Engine]) -> None:
        self.projectors = [projector_for(engine) for engine in engines.values()]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            for projector in self.projectors:
                projector.run_once()
            self.stop.wait(0.01)

    def __enter__(self) -> Projectors:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(10)
        for projector in self.projectors:
            projector.close()


def bucket_of_tasks(
    service: StatusService, shards: ShardedDatabases, coordinator: ServicePrincipal, shard: str, count: int
) -> tuple[int, list[ExecutionContext]]:
    """``count`` tasks of one owner on ``shard`` (so one bucket), each with its step s1 running."""
    owner = owner_on(shards, coordinator.tenant_id, shard)
    tasks = [create(service, coordinator, owner) for _ in range(count)]
    contexts = service.bind_executions(
        [
            (coordinator, c.ActivateStep(task, "s1", 1, "coordinator-1", started=c.StartedEvent(f"{task}/s", now(), 1)))
            for task in tasks
        ]
    )
    assert all(isinstance(ctx, ExecutionContext) for ctx in contexts), contexts
    return bucket_of(coordinator.tenant_id, owner), contexts  # type: ignore[return-value]


def engines_of(service: StatusService) -> dict[str, sa.Engine]:
    """Each shard's engine by name (the one database's, without shards)."""
    return {name: database.engine for name, database in service.ctx.shards.every()}  # type: ignore[attr-defined]


def engine_for(service: StatusService, some_id: str) -> sa.Engine:
    """The engine of the shard holding a task, workflow or execution handle (by its bucket): where a
    test reads the rows it checks. Without shards, the one database's."""
    shards = service.ctx.shards
    if not isinstance(shards, ShardedDatabases):
        return service.db.engine  # type: ignore[attr-defined,no-any-return]
    bucket = bucket_hint(some_id) or workflow_bucket(some_id) or handle_bucket(some_id)
    assert bucket is not None, f"{some_id!r} names no bucket"
    return engines_of(service)[shards.map.route(bucket).shard]


def rows_everywhere(service: StatusService, statement: sa.Executable) -> list[sa.Row[Any]]:
    """What ``statement`` reads on every shard, one after the other (a query over all tasks)."""
    found: list[sa.Row[Any]] = []
    for engine in engines_of(service).values():
        with engine.connect() as conn:
            found.extend(conn.execute(statement).all())
    return found


def fence_reads(service: StatusService) -> int:
    """The statements a shard's transaction adds to what a test counts: the read of its buckets'
    write fences (none without shards)."""
    return 1 if isinstance(service.ctx.shards, ShardedDatabases) else 0


def fold_everywhere(service: StatusService) -> None:
    """Every pending workflow change folded on every shard, as each shard's observer folds its own."""
    for engine in engines_of(service).values():
        fold_all(engine)


def retryable(exc: BaseException) -> bool:
    """What the API answers 503 (retry with the same request): a refusal as moving, a shard unreachable."""
    return isinstance(exc, Unavailable) or isinstance(unexpected_error(exc), Unavailable)


class Producer:
    """Progress events round the tasks until stopped, each retried with its eventId while refused
    (moving) or its shard is unreachable — what a producer does with a retryable answer (503);
    what was acknowledged, at which version."""

    def __init__(
        self, service: StatusService, caller: ServicePrincipal, contexts: list[ExecutionContext], after_seq: int = 1
    ) -> None:
        """``after_seq``: the sourceSeq a producer before this one reached (``seq``), to go on from."""
        self.service, self.caller, self.contexts = service, caller, contexts
        self.seq = after_seq
        self.acked: dict[str, tuple[str, int]] = {}  # eventId -> (taskId, taskVersion)
        self.refused = 0
        self.stop = threading.Event()
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                self.seq += 1
                seq = self.seq
                for ctx in self.contexts:
                    event_id = f"{ctx.task_id}/progress/{seq}"
                    while True:
                        try:
                            result = self.service.report_event(
                                self.caller,
                                event("STEP_PROGRESS", seq, event_id, execution_handle=ctx.execution_handle),
                            )
                        except Exception as exc:
                            if not retryable(exc):
                                raise
                            self.refused += 1
                            time.sleep(0.005)
                            continue
                        break
                    assert result["accepted"] and not result["duplicate"], result
                    self.acked[event_id] = (ctx.task_id, int(result["taskVersion"]))
        except BaseException as exc:  # reported by the test
            self.failure = exc

    def __enter__(self) -> Producer:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(30)


def wait_for(condition: Callable[[], bool], seconds: float = 30.0) -> None:
    """Until ``condition`` holds (the producer's acknowledgements reaching a count, say)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the producer stopped moving"
        time.sleep(0.01)


def event_log(engine: sa.Engine, tasks: list[str]) -> list[tuple[str, str, int]]:
    """The tasks' event-log rows on one shard: (eventId, taskId, taskVersion)."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(t.task_event_log.c.event_id, t.task_event_log.c.task_id, t.task_event_log.c.task_version).where(
                t.task_event_log.c.task_id.in_(tasks)
            )
        ).all()
    return [(str(e), str(task), int(v)) for e, task, v in rows]
