"""Installing the plugin into one's own worker: only what it needs, no service, no generic packages."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SERVICE_ONLY = {"starlette", "sqlalchemy", "pymysql", "alembic", "uvicorn", "cent", "jsonschema", "structlog"}


def _run(*args: str, cwd: Path) -> str:
    result = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result.stdout


def _untracked_or_ignored(folder: Path) -> set[str]:
    """Files under ``folder`` that git does not track (ignored ones included): what a build left."""
    out = _run("git", "ls-files", "--others", "--ignored", "--exclude-standard", "--", str(folder), cwd=REPO)
    return {line for line in out.splitlines() if "__pycache__" not in line and not line.endswith(".pyc")}


def _top_level_packages(wheel: Path) -> set[str]:
    tops = {name.split("/", 1)[0] for name in zipfile.ZipFile(wheel).namelist() if "/" in name}
    return {t for t in tops if not t.endswith((".dist-info", ".data"))}


def test_the_plugin_installs_alone_in_a_clean_virtualenv(tmp_path: Path) -> None:
    env_dir = tmp_path / "worker-env"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    before = _untracked_or_ignored(REPO / "interceptors")
    _run(python, "-m", "pip", "install", "--quiet", str(REPO / "interceptors"), cwd=tmp_path)
    # A user's install leaves no build/ or .egg-info folders in the checkout.
    assert _untracked_or_ignored(REPO / "interceptors") == before
    installed = {
        p["name"].lower() for p in json.loads(_run(python, "-m", "pip", "list", "--format=json", cwd=tmp_path))
    }
    assert {"temporalio", "httpx", "task-status-observer-plugin"} <= installed
    assert installed & SERVICE_ONLY == set(), installed & SERVICE_ONLY
    # The plugin works from there (built with a token; its producer read from the token) …
    token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJteS13b3JrZXIifQ.c2ln"
    probe = (
        "from task_status_interceptors import TaskStatusPlugin, report_progress, task_step\n"
        f"plugin = TaskStatusPlugin('http://127.0.0.1:1', '{token}', outbox_path='o.sqlite3')\n"
        "print(plugin.reporter.config.producer_id)\n"
        "import importlib.util as u\n"
        "print([m for m in ('status', 'observer', 'migrations', 'examples', 'interceptors') if u.find_spec(m)])\n"
    )
    out = _run(python, "-c", probe, cwd=tmp_path).splitlines()
    assert out == ["my-worker", "[]"]  # … and brings no service packages, generic or not
    # Its own command answers in that environment (an empty outbox file: nothing kept).
    (tmp_path / "empty.sqlite3").touch()
    listed = subprocess.run(
        [python, "-m", "task_status_interceptors", "undeliverable", "list", str(tmp_path / "empty.sqlite3")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert listed.returncode == 0 and listed.stdout == "" and "0 undeliverable reports" in listed.stderr, listed


def test_the_plugin_wheel_holds_exactly_its_two_distinctive_packages(tmp_path: Path) -> None:
    _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--no-deps",
        "-w",
        str(tmp_path),
        str(REPO / "interceptors"),
        cwd=tmp_path,
    )
    (wheel,) = tmp_path.glob("task_status_observer_plugin-*.whl")
    assert _top_level_packages(wheel) == {"task_status_interceptors", "task_status_wire"}
    names = zipfile.ZipFile(wheel).namelist()
    assert "task_status_wire/task_events.proto" in names  # the contract travels with its generated code
    # Typed (PEP 561): a worker's type checker reads the plugin's annotations.
    assert {"task_status_interceptors/py.typed", "task_status_wire/py.typed"} <= set(names)


def test_the_service_wheel_carries_no_examples_migrations_or_plugin_packages(tmp_path: Path) -> None:
    _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--no-deps",
        "-w",
        str(tmp_path),
        str(REPO),
        cwd=tmp_path,
    )
    (wheel,) = tmp_path.glob("task_status_observer-*.whl")
    assert _top_level_packages(wheel) == {"status", "observer", "task_observer"}
    names = zipfile.ZipFile(wheel).namelist()
    # The top-level migrations/ ships inside the service's own package, with what Alembic needs.
    assert {"status/migrations/env.py", "status/migrations/script.py.mako"} <= set(names)
    assert any(n.startswith("status/migrations/versions/0001_") for n in names)
    assert "status/definitions/default.json" in names and "status/py.typed" in names
