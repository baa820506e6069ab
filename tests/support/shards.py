"""Three MariaDB databases as shards, a service routing over them, and helpers to place tasks."""

from __future__ import annotations

import secrets
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from status.app import commands as c
from status.app.routing import bucket_of
from status.app.service import StatusService
from status.domain.auth import ServicePrincipal
from status.domain.ids import bucket_hint, handle_bucket, workflow_bucket
from status.infra.db import create_engine
from status.infra.schemas import JsonSchemaValidator
from status.infra.shards import ShardedDatabases, install_map
from status.infra.tokens import ExecutionTokens
from status.infra.uow import SqlDatabase
from tests.conftest import _migrated_mariadb
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
    engines: dict[str, sa.Engine], refresh_seconds: float = 3600.0
) -> tuple[StatusService, ShardedDatabases]:
    """A service over the shards whose map, read now, is not re-read by itself for an hour: only a
    shard's refusal makes it look again."""
    databases = {name: SqlDatabase(engine) for name, engine in engines.items()}
    shards = ShardedDatabases(engines["a"], databases, "a", refresh_seconds=refresh_seconds)
    service = StatusService(
        databases["a"],
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


def create(service: StatusService, coordinator: ServicePrincipal, owner: str, task_owner: str | None = None) -> str:
    """A workflow of ``owner`` with one task (of ``task_owner``, default the owner) of one step, s1."""
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
