"""Start a document run and print its live status as the user's browser would receive it.

    export TASK_STATUS_USER_TOKEN=...   # printed by task-observer dev (user alice of tenant demo)
    python -m examples.watch_run        # with the worker of examples/worker.py running

It prints its own run only (the user may have others going, e.g. the dev stack's demo), and
exits when that run has ended.

Uses the public API for a realtime session (connection token for the user's
own summary channel) and centrifuge-python (the test/dev extra) to listen.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable
from typing import Any

import httpx
from centrifuge import Client, ClientEventHandler, ServerPublicationContext
from temporalio.client import Client as TemporalClient

from examples.document_processing import DocumentRequest, DocumentWorkflow
from examples.process import run_then_exit
from examples.worker import TASK_QUEUE


def describe(message: dict[str, Any]) -> str:
    if message.get("kind") == "task.summary":
        step = message.get("currentStep") or {}
        progress = (message.get("progress") or {}).get("percent")
        notice = message.get("notice") or {}
        return (
            f"{message.get('title')}  v{message['taskVersion']:>3} {message['lifecycleStatus']:<9} "
            f"{message['health']:<8} {progress if progress is not None else '-':>6}%  "
            f"{step.get('phaseLabel') or step.get('stepId') or ''}"
            + (f"  [{notice.get('type')}: {notice.get('title')}]" if notice else "")
        )
    return f"{message.get('kind')}: {message.get('workflowVersion') or message.get('taskVersion')}"


async def watch(
    api_url: str,
    user_token: str,
    start_run: Callable[[], Any],
    printer: Callable[[str], None] = print,
    timeout: float = 120,
    title: str | None = None,
) -> list[str]:
    """Connect as the user, start the run, print its summaries until its task is terminal.

    ``title`` (unique per run) picks the run's task out of the user's channel before the run has
    said its task id; without it, only messages after the run returned its task id count.
    """
    async with httpx.AsyncClient(base_url=api_url, headers={"Authorization": f"Bearer {user_token}"}) as http:
        session = (await http.get("/api/realtime/session")).json()
    lines: list[str] = []
    done = asyncio.Event()
    task_ids: set[str] = set()

    class Printer(ClientEventHandler):
        async def on_publication(self, ctx: ServerPublicationContext) -> None:
            message = ctx.pub.data
            if message.get("kind") != "task.summary":
                return  # other kinds (workflow summaries, notification hints) are not this run's status
            if not task_ids and title is not None and message.get("title") == title:
                task_ids.add(message["taskId"])
            if message.get("taskId") not in task_ids:
                return  # another task of this user
            line = describe(message)
            lines.append(line)
            printer(line)
            if message.get("kind") == "task.summary" and message.get("lifecycleStatus") in (
                "SUCCEEDED",
                "FAILED",
                "CANCELLED",
                "TIMED_OUT",
            ):
                done.set()

    client = Client(session["endpoints"]["websocket"], events=Printer(), token=session["token"])
    await client.connect()
    try:
        # Bounded like the wait for the end: a run no worker picks up fails here, not never.
        result = await asyncio.wait_for(start_run(), timeout)
        task_ids.add(result["taskId"])
        await asyncio.wait_for(done.wait(), timeout)
    finally:
        await client.disconnect()
    return lines


async def main() -> None:
    temporal = await TemporalClient.connect(os.environ.get("TEMPORAL_ADDRESS", "127.0.0.1:7233"))

    title = f"contract-{uuid.uuid4().hex[:6]}.pdf"

    async def start() -> Any:
        return await temporal.execute_workflow(
            DocumentWorkflow.run,
            DocumentRequest(os.environ.get("DEMO_USER", "alice"), title),
            id=f"doc-{uuid.uuid4()}",
            task_queue=TASK_QUEUE,
        )

    url = os.environ.get("TASK_STATUS_URL", "http://127.0.0.1:8080")
    await watch(url, os.environ["TASK_STATUS_USER_TOKEN"], start, title=title)


if __name__ == "__main__":
    run_then_exit(main())
