"""A server's long-lived heap, kept out of the cycle collector's way.

A full collection walks every container the collector tracks, with every thread stopped. What a
server builds before it serves — its modules, the application and its routes, the engine — lives
as long as the process (about 120,000 objects in the API: 40 ms of every full pass on a 2-core
machine), yet each full pass that serving triggered walked all of it again. Frozen once the server
is built, a pass walks only what serving made. Reference counting still frees a frozen object
nothing holds any more; only a cycle among them would stay, made before serving and made once.

Serving then makes containers by the thousand per request (a change's states, rows and messages),
freed by reference counting when the request is done; CPython's young generation of 700 had the
collector walk them whenever a request held 700 at once: about every eighth plugin activity,
0.05 ms of the API's ~1.3 ms per activity. With ``YOUNG`` it walks them once in a thousand, for
at most that many containers' cycles waiting longer (docs/benchmarks.md, "2026-12-07 (late night)").
"""

from __future__ import annotations

import gc

YOUNG = 10_000


def settle() -> int:
    """Collect what building left behind, then freeze the rest and let the young generation grow
    to ``YOUNG``; how many objects are frozen."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG, middle, old)
    return gc.get_freeze_count()
