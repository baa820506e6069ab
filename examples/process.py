"""How a short-lived example process ends."""

from __future__ import annotations

import asyncio
import os
import sys
import traceback
from collections.abc import Coroutine
from typing import Any, NoReturn


def run_then_exit(main: Coroutine[Any, Any, Any]) -> NoReturn:
    """``asyncio.run(main)``, then leave without finalizing the interpreter.

    The trap: the Temporal client's native runtime keeps threads of its own that may still hand the
    GIL back while the interpreter finalizes; CPython then aborts the process ("PyGILState_Release:
    thread state ... must be current") — after the example's work succeeded and was printed, so a
    script running the example sees a crash (exit 134) where nothing failed. By then there is
    nothing left to clean up, so the process flushes what it printed and exits with the code its
    work decided.
    """
    code = 0
    try:
        asyncio.run(main)
    except KeyboardInterrupt:
        code = 130
    except Exception:
        traceback.print_exc()  # as Python would have printed it; the exit code says it failed
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
