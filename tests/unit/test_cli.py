from __future__ import annotations

import argparse

import pytest

from status.cli import build_parser, main


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert commands
    for name in commands:
        assert name in out


def test_unknown_command_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["no-such-command"])
    assert exit_info.value.code == 2


def test_every_option_of_every_command_has_help_text() -> None:
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    missing = []
    for name, sub in commands.items():
        for action in sub._actions:
            if action.dest == "help":
                continue
            if not action.help and not isinstance(action, argparse._SubParsersAction):
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
            if isinstance(action, argparse._SubParsersAction):
                for inner_name, inner in action.choices.items():
                    missing += [
                        f"{name} {inner_name} {'/'.join(a.option_strings) or a.dest}"
                        for a in inner._actions
                        if a.dest != "help" and not a.help
                    ]
    assert missing == []
