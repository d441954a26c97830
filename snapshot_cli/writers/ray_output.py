"""What the pipeline prints in a Ray task: kept by the task and said by the command as the
task ends, whole, in order, on its stderr (round its progress line).

Left to Ray, a task's prints went through its log forwarding: each line prefixed with
``(task_outcome pid=N)``, coloured even into a file and under ``NO_COLOR``, repeated lines
merged ("[repeated 14x across cluster]"), and the lines of the last tasks lost as the run
ended (2 and 9 of 10 in a probe's runs; a print just before the pipeline raised, in 2 of 2).
What Python writes to ``sys.stdout`` and ``sys.stderr`` (prints, warnings, a logging
handler's lines) is kept here; what C code writes to the file descriptors still goes through
Ray's forwarding. A warning's path into Ray's copy of the code is said as the user's file.
"""

from __future__ import annotations

import contextlib
import io
import sys
import threading
from collections.abc import Iterator
from typing import Any

LIMIT = 1 << 20  # characters a task's output keeps (the rest is counted, and said so)


class Kept(io.TextIOBase):
    """A text stream that keeps what is written (up to ``LIMIT`` characters); anything else
    of a stream (``fileno``, ``buffer``) is the real one's: what goes there is Ray's."""

    def __init__(self, real: Any, limit: int = LIMIT) -> None:
        super().__init__()
        self.real, self.limit = real, limit
        self.parts: list[str] = []
        self.size = self.dropped = 0
        self.lock = threading.Lock()

    def write(self, text: str) -> int:
        with self.lock:
            take = text[: max(0, self.limit - self.size)]
            self.parts.append(take)
            self.size += len(take)
            self.dropped += len(text) - len(take)
        return len(text)

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def fileno(self) -> int:
        return int(self.real.fileno())

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def text(self) -> str:
        said = "".join(self.parts)
        if self.dropped:
            said += f"\n[and {self.dropped:,} more characters the task printed, not kept]\n"
        return said


@contextlib.contextmanager
def kept() -> Iterator[Kept]:
    """``sys.stdout`` and ``sys.stderr`` kept in one stream while the task runs (in the order
    written); put back after, unless the pipeline set its own meanwhile."""
    out, err = sys.stdout, sys.stderr
    stream = Kept(err if err is not None else out)
    sys.stdout = sys.stderr = stream
    try:
        yield stream
    finally:
        if sys.stdout is stream:
            sys.stdout = out
        if sys.stderr is stream:
            sys.stderr = err


def say(text: str) -> None:
    """A task's output on the command's stderr, round its progress line."""
    if not text:
        return
    from ..progress import around

    with contextlib.suppress(OSError, ValueError, AttributeError):  # (stderr closed: `2>&-`)
        stream = around(sys.stderr)
        stream.write(text if text.endswith("\n") else text + "\n")
        stream.flush()
