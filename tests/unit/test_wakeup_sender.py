"""Wake-up datagrams leave from the configured interface, not from every one (issue 21 §8)."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from status.infra import wakeup


def test_the_sender_binds_to_the_configured_host(tmp_path: Path) -> None:
    signal = wakeup.OutboxSignal(sa.create_engine(f"sqlite:///{tmp_path / 'x.sqlite3'}"), "127.0.0.1")
    try:
        assert signal._udp().getsockname()[0] == "127.0.0.1"
    finally:
        signal._udp().close()
