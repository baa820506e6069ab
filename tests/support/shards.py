"""Three MariaDB databases as shards, a service routing over them, and helpers to place tasks."""

from __future__ import annotations

import secrets
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import sqlalchemy as sa

from status.app import commands as c
from status.app.routing import bucket_of
from status.app.service import StatusService
from status.domain.auth import ServicePrincipal
from status.infra.db import create_engine
from status.infra.schemas import JsonSchemaValidator
from status.infra.shards import ShardedDatabases, install_map
from status.infra.tokens import ExecutionTokens
from status.infra.uow import SqlDatabase
from tests.conftest import _migrated_mariadb
from tests.support.wiring import projector_for

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
