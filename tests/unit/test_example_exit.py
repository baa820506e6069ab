"""A short-lived example leaves with the exit code its work decided and everything it printed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_example(body: str, tmp_path: Path) -> tuple[int, str, str]:
    script = tmp_path / "example.py"
    script.write_text(
        textwrap.dedent(
            """
            from examples.process import run_then_exit

            async def main():
            {body}

            run_then_exit(main())
            print("never printed: the process has left")
            """
        ).format(body=textwrap.indent(textwrap.dedent(body), "    "))
    )
    # stdout into a pipe is block-buffered: an exit that skipped the flush would lose the lines.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    done = subprocess.run([sys.executable, str(script)], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout, done.stderr


def test_work_that_succeeded_exits_0_with_what_it_printed(tmp_path: Path) -> None:
    code, out, _ = run_example('for n in range(3):\n    print("line", n)', tmp_path)
    assert (code, out) == (0, "line 0\nline 1\nline 2\n")


@pytest.mark.parametrize(
    ("body", "expected"), [('raise RuntimeError("no worker")', 1), ("raise KeyboardInterrupt", 130)]
)
def test_work_that_failed_exits_non_zero_and_says_why(tmp_path: Path, body: str, expected: int) -> None:
    code, out, err = run_example(f'print("started")\n{body}', tmp_path)
    assert (code, out) == (expected, "started\n")
    if expected == 1:
        assert "RuntimeError: no worker" in err
