"""README.md's code blocks, read from the file itself, so that the README and the tests that
run its blocks cannot drift apart."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tests.conftest import REPO

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class Block:
    lang: str  # "python", "sh", "bash", or "" for text such as a synopsis or a tree
    code: str
    line: int  # where it starts in README.md

    @property
    def runnable(self) -> bool:
        return self.lang in ("python", "sh", "bash")


def blocks() -> list[Block]:
    text = (REPO / "README.md").read_text()
    return [
        Block(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1)
        for m in _FENCE.finditer(text)
    ]


def block_with(marker: str) -> Block:
    """The one runnable block that contains ``marker``."""
    found = [b for b in blocks() if b.runnable and marker in b.code]
    if len(found) != 1:
        raise AssertionError(f"{len(found)} README blocks contain {marker!r}, not 1")
    return found[0]
