"""``TaskStatusPlugin``: one line in a worker adds step reporting (design D10)."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from temporalio.plugin import SimplePlugin
from temporalio.worker import WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from task_status_interceptors._coordinator import CoordinatorActivities
from task_status_interceptors._interceptor import TaskStatusInterceptor
from task_status_interceptors._reporter import DEFAULT_WRITE_INTERVAL, Reporter, ReporterConfig


class TaskStatusPlugin(SimplePlugin):
    """Reports every activity that runs inside a task step to the Task Status Service.

    ``Worker(client, task_queue=..., workflows=[...], activities=[...], plugins=[TaskStatusPlugin(url, token)])``
    or ``Client.connect(..., plugins=[TaskStatusPlugin(url, token)])``.

    Args:
        status_url: base URL of the status service.
        service_token: the worker's service credential (roles WORKER and COORDINATOR:
            the worker activates the steps it runs, one attempt per Temporal attempt).
        producer_id: defaults to the credential's producer.
        outbox_path: the durable local outbox (SQLite); keep it on a persistent disk. Default:
            ``default_outbox_path`` (``$TASK_STATUS_OUTBOX_DIR`` or the user's state directory).
        heartbeat_interval: seconds between heartbeat batches (jittered).
        heartbeat_timeout_seconds: silence after which the status service marks an execution
            STALE (default: the service's); at least two heartbeat intervals.
        progress_from_heartbeats: treat ``activity.heartbeat({"current":..,"total":..})`` as progress.
        grpc_target: "host:port" of the service's gRPC adapter (``pip install
            task-status-observer-plugin[grpc]``); None reports over REST.
        write_interval: while reports keep coming, the outbox file takes one transaction, and the
            service one request, per this many seconds at most; what comes meanwhile joins them.
            The first report after a quiet spell goes at once. Shorter: reports reach the service
            sooner, at a higher cost per activity to the worker and to the service.
    """

    def __init__(
        self,
        status_url: str,
        service_token: str,
        *,
        producer_id: str | None = None,
        outbox_path: str | Path | None = None,
        heartbeat_interval: float = 5.0,
        heartbeat_timeout_seconds: int | None = None,
        progress_from_heartbeats: bool = False,
        grpc_target: str | None = None,
        write_interval: float = DEFAULT_WRITE_INTERVAL,
    ) -> None:
        producer = producer_id or _subject(service_token)
        path = Path(outbox_path) if outbox_path else default_outbox_path(producer)
        self.reporter = Reporter(
            ReporterConfig(
                status_url=status_url,
                service_token=service_token,
                producer_id=producer,
                outbox_path=path,
                heartbeat_interval=heartbeat_interval,
                heartbeat_timeout_seconds=heartbeat_timeout_seconds,
                grpc_target=grpc_target,
                write_interval=write_interval,
            )
        )
        self.coordinator = CoordinatorActivities(status_url, service_token, reporter=self.reporter)
        self._users = 0

        @asynccontextmanager
        async def run_context() -> AsyncIterator[None]:
            # The reporter lives as long as the worker; several workers may share one plugin.
            if self._users == 0:
                await self.reporter.start()
            self._users += 1
            try:
                yield
            finally:
                self._users -= 1
                if self._users == 0:
                    await self.reporter.stop()
                    await self.coordinator.aclose()

        def activities(existing: Sequence[Callable[..., Any]] | None) -> Sequence[Callable[..., Any]]:
            ours: list[Callable[..., Any]] = [
                self.coordinator.create_workflow,
                self.coordinator.submit_task_event,
                self.coordinator.classify,
                self.coordinator.set_owner,
            ]
            return [*(existing or []), *ours]

        def workflow_runner(runner: WorkflowRunner | None) -> WorkflowRunner:
            if not runner:
                raise ValueError("No WorkflowRunner provided to the TaskStatusPlugin.")
            if isinstance(runner, SandboxedWorkflowRunner):
                # The step context is a ContextVar shared by workflow code and the interceptor.
                return dataclasses.replace(
                    runner, restrictions=runner.restrictions.with_passthrough_modules("task_status_interceptors")
                )
            return runner

        super().__init__(
            "TaskStatusPlugin",
            interceptors=[TaskStatusInterceptor(self.reporter, progress_from_heartbeats=progress_from_heartbeats)],
            activities=activities,
            workflow_runner=workflow_runner,
            run_context=run_context,
        )


OUTBOX_DIR_ENV = "TASK_STATUS_OUTBOX_DIR"


def default_outbox_path(producer: str) -> Path:
    """Where a worker keeps its outbox when ``outbox_path`` is not given: ``$TASK_STATUS_OUTBOX_DIR``,
    else the user's state directory (``$XDG_STATE_HOME`` or ``~/.local/state``) under
    ``task-status-observer/`` — never the worker's current directory, which may be a checkout or a
    read-only image. An outbox an earlier version left in ``./.task-status/`` is kept in use, so
    reports it still holds are delivered after an upgrade."""
    name = f"{producer}.outbox.sqlite3"
    legacy = Path(".task-status") / name
    if legacy.exists():
        return legacy
    configured = os.environ.get(OUTBOX_DIR_ENV)
    if configured:
        return Path(configured) / name
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "task-status-observer" / name


def _subject(token: str) -> str:
    """The credential's ``sub`` (its producerId), read without verifying: only the service verifies
    tokens, and the plugin needs no JWT library for this."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return str(claims["sub"])
    except (IndexError, ValueError, KeyError, TypeError) as exc:
        raise ValueError("the service token is not a JWT with a subject; pass producer_id") from exc
