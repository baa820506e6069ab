"""The HTTP layer of one reported event, in process: what the API's event loop spends per request.

    .venv/bin/python bench/http_layer.py [--requests 20000] [--rounds 3] [--profile FILE]

A single ``POST /internal/v1/task-events`` goes through the whole ASGI application — the
middleware (answer counting, draining, the request deadline), routing, the credential check, the
body read and parsed into a command, the answer rendered — with the group committer answering at
once: no server socket, no database, no other process. ``ingest.py`` measures the same layer on a
busy machine, where its share of the API's CPU moves with everything else on the cores; this is
the layer alone, steady to a few percent between runs, so a change to it can be weighed. Prints
the CPU per request of each round and their median; ``--profile`` writes cProfile's statistics
of the last round.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from status.api.app import create_app  # noqa: E402
from status.app.answers import EventAccepted  # noqa: E402
from status.domain.auth import Role  # noqa: E402
from status.infra.tokens import ServiceTokens  # noqa: E402
from tests.support.settings import make_settings  # noqa: E402

PATH = "/internal/v1/task-events"


def _request(token: str) -> tuple[dict[str, Any], bytes]:
    body = json.dumps(
        {
            "executionHandle": "exh_" + "x" * 60,
            "eventId": str(uuid.uuid4()),
            "eventType": "STEP_PROGRESS",
            "occurredAt": "2026-12-07T00:00:00Z",
            "sourceSeq": 2,
            "progress": {"current": 1, "total": 10, "unit": "item"},
        }
    ).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": PATH,
        "raw_path": PATH.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"authorization", f"Bearer {token}".encode()),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    return scope, body


async def _rounds(
    app: Any, scope: dict[str, Any], body: bytes, requests: int, rounds: int, profile: Path | None
) -> None:
    answers: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        answers.append(message)

    await app(dict(scope), receive, send)
    if answers[0]["status"] != 200:
        raise SystemExit(f"the request was refused: {answers[0]['status']} {answers[-1].get('body', b'')[:300]!r}")
    per_request = []
    for number in range(1, rounds + 1):
        profiler = cProfile.Profile() if profile is not None and number == rounds else None
        answers.clear()
        began = time.process_time()
        if profiler is not None:
            profiler.enable()
        for _ in range(requests):
            await app(dict(scope), receive, send)
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(profile)  # type: ignore[arg-type]
        spent = 1e6 * (time.process_time() - began) / requests
        note = " (profiled)" if profiler is not None else ""
        print(f"round {number}: {requests} requests, {spent:.1f} us of CPU per request{note}")
        if profiler is None:
            per_request.append(spent)
        assert all(m["status"] == 200 for m in answers if m["type"] == "http.response.start")
    print(f"HTTP layer per single-event request: median {statistics.median(per_request):.1f} us (commit not included)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", type=Path, help="cProfile statistics of the last round to this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        settings = make_settings(f"sqlite:///{tmp}/status.sqlite3", Path(tmp))
        app = create_app(settings)
        token = ServiceTokens(settings.service_token_secret).issue("bench-worker", "bench", "s", [Role.WORKER])

        async def committed(caller: Any, cmd: Any) -> EventAccepted:
            return {
                "eventId": cmd.event_id,
                "accepted": True,
                "duplicate": False,
                "stale": False,
                "taskId": "tsk_bench",
                "stepId": "s01",
                "operationCode": "DOCUMENT.PARSE",
                "lifecycleStatus": "RUNNING",
                "businessStatus": None,
                "taskLifecycleStatus": "RUNNING",
                "taskVersion": "3",
                "stepVersion": "2",
                "committedAt": "2026-12-07T00:00:00.000Z",
            }

        app.state.api.committer.submit = committed  # the group committer answers at once
        scope, body = _request(token)
        rounds = args.rounds + (1 if args.profile else 0)
        asyncio.run(_rounds(app, scope, body, args.requests, rounds, args.profile))


if __name__ == "__main__":
    main()
