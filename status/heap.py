"""A server's long-lived heap, kept out of the cycle collector's way.

A full collection walks every container the collector tracks, with every thread stopped. What a
server builds before it serves — its modules, the application and its routes, the engine — lives
as long as the process (about 120,000 objects in the API: 40 ms of every full pass on a 2-core
machine), yet each full pass that serving triggered walked all of it again. Frozen once the server
is built, a pass walks only what serving made. Reference counting still frees a frozen object
nothing holds any more; only a cycle among them would stay, made before serving and made once.
"""

from __future__ import annotations

import gc


def settle() -> int:
    """Collect what building left behind, then freeze the rest; how many objects are frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
