"""The notice kinds are written once, in the domain (``NoticeKind``: a notice takes nothing else,
mypy holds that); the web client's type lists the same ones."""

from __future__ import annotations

import re
from pathlib import Path

from status.domain.notices import NoticeKind

TYPES_TS = Path(__file__).resolve().parents[2] / "web" / "src" / "types.ts"


def test_the_web_clients_notice_kinds_are_the_services() -> None:
    declared = re.search(r"export type NoticeKind =(.*?);", TYPES_TS.read_text(), re.S)
    assert declared is not None, "web/src/types.ts declares no NoticeKind"
    assert set(re.findall(r"'([A-Z_]+)'", declared.group(1))) == {kind.value for kind in NoticeKind}
