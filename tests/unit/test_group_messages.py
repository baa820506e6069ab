"""Which staged messages a group writes: a change the same group changes again is covered by the
later full state, unless something of it must reach a client on its own."""

from __future__ import annotations

from datetime import datetime

from status.app.group import Group, StagedMessages
from status.domain.messages import Aggregate, Message

NOW = datetime(2026, 12, 6, 12, 0, 0)
OWNER = (("owner",), ())


def _message(task_id: str, version: int) -> Message:
    home = f"task_user:t/owner/{task_id}"
    return Message(Aggregate("TASK", task_id, version, home), (home,), "USER_SUMMARY", {"v": version}, False, None, NOW)


class Builds:
    """Stages a task's versions and records which of them were built."""

    def __init__(self, group: Group) -> None:
        self.group = group
        self.built: list[tuple[str, int]] = []

    def stage(
        self,
        task_id: str,
        version: int,
        *,
        coverable: bool = True,
        audience: tuple[tuple[str, ...], tuple[tuple[str, str], ...]] = OWNER,
    ) -> None:
        def build() -> list[Message]:
            self.built.append((task_id, version))
            return [_message(task_id, version)]

        self.group.outbox.append(StagedMessages(task_id, audience, coverable, build))


def test_a_change_changed_again_in_its_group_is_covered_by_the_later_state() -> None:
    group = Group()
    builds = Builds(group)
    builds.stage("a", 2)  # progress
    builds.stage("b", 7)
    builds.stage("a", 3)  # progress again
    builds.stage("a", 4, coverable=False)  # the step's end: must reach clients
    written = group.messages()
    assert builds.built == [("b", 7), ("a", 4)]
    assert [(m.aggregate.id, m.aggregate.version) for m in written] == [("b", 7), ("a", 4)]


def test_what_must_reach_clients_or_other_viewers_is_built_in_staged_order() -> None:
    group = Group()
    builds = Builds(group)
    builds.stage("a", 2, coverable=False)  # a notice
    builds.stage("a", 3, audience=(("owner",), (("PROJECT", "p1"),)))
    group.outbox.append(_message("a", 3))  # a message staged as it is (a notification hint)
    builds.stage("a", 4)  # the group's last change of the task: always written
    written = group.messages()
    # version 3 reached a group the later state does not: not covered
    assert builds.built == [("a", 2), ("a", 3), ("a", 4)]
    assert [m.aggregate.version for m in written] == [2, 3, 3, 4]
