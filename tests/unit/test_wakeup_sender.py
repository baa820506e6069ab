"""Wake-up datagrams leave from the configured interface, not from every one ."""

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


def test_a_wake_up_names_what_was_written_and_wakes_only_its_consumers(tmp_path: Path) -> None:
    """A commit that only fed the projector does not send the relay to look, nor one that only wrote
    messages the projector; a datagram naming nothing it knows (an older sender's) wakes both."""
    import asyncio
    import socket

    assert wakeup.datagram_for(frozenset({"outbox"})) == b"o"
    assert wakeup.datagram_for(frozenset({"feed", "outbox"})) == b"fo"
    assert wakeup.kinds_of(b"f") == {"feed"} and wakeup.kinds_of(b"w") == wakeup.WAKE_KINDS

    async def main() -> None:
        signal = wakeup.OutboxSignal(sa.create_engine(f"sqlite:///{tmp_path / 'x.sqlite3'}"))
        receiver = wakeup.WakeReceiver(signal)
        relay, projector = receiver.event(frozenset({"outbox"})), receiver.event(frozenset({"feed"}))
        address = await receiver.start()
        assert address is not None
        try:
            signal.committed(frozenset({"feed"}))  # in process
            await asyncio.wait_for(projector.wait(), 5)
            assert not relay.is_set()  # set in the same callback, had it been named
            projector.clear()
            host, port = wakeup.parse_address(address)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.sendto(b"o", (host, port))  # from another process
                await asyncio.wait_for(relay.wait(), 5)
                assert not projector.is_set()
                relay.clear()
                sock.sendto(b"w", (host, port))
                await asyncio.wait_for(asyncio.gather(relay.wait(), projector.wait()), 5)
        finally:
            receiver.close()
            signal.close()

    asyncio.run(main())
