"""A restarted observer gets its predecessor's relay id back, so its outbox partitions follow at once."""

from __future__ import annotations

from pathlib import Path

from observer.runner import relay_identity


def test_live_observers_get_distinct_slots_and_a_freed_slot_is_reused(tmp_path: Path) -> None:
    first, first_slot = relay_identity(tmp_path)
    second, second_slot = relay_identity(tmp_path)
    assert first != second and first.endswith("-relay0") and second.endswith("-relay1")
    assert first_slot is not None and second_slot is not None
    first_slot.close()  # the first observer ends (a crash releases its lock the same way)
    again, again_slot = relay_identity(tmp_path)
    assert again == first
    for slot in (second_slot, again_slot):
        assert slot is not None
        slot.close()
