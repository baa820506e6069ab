"""What a MySQL/MariaDB driver's error says, read the same way wherever one is handled."""

from __future__ import annotations

# Galera (MariaDB): 1047 "WSREP has not yet prepared node for application use" (a node that lost
# its quorum, or is joining).
NODE_NOT_READY = frozenset({1047})


def mysql_code(exc: BaseException | None) -> int | None:
    """The server's error number of a DB-API exception (MySQL/MariaDB drivers), else None."""
    args = getattr(exc, "args", None)
    return args[0] if args and isinstance(args[0], int) else None
