"""A recorder of the loader's stages as Chrome trace events (chrome://tracing, Perfetto).

Each span is a complete event (``"ph": "X"``) on the thread that ran it, with the thread's
name (``snap-read_0``, ``snap-batch``, ``MainThread`` ...) so a user sees at a glance which
stage the time goes to and where the consumer waited. Recording is a list append (atomic
under the GIL) and stops at ``max_events``, so a long run cannot exhaust memory.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import threading
import time
from collections.abc import Iterator
from typing import Any


class Tracer:
    def __init__(self, max_events: int = 500_000) -> None:
        self.t0 = time.perf_counter()
        self.max_events = max_events
        self.events: list[dict[str, Any]] = []
        self.dropped = 0
        self._threads: dict[tuple[int, str], int] = {}  # (ident, name) → trace tid
        self._pid = os.getpid()

    def add(self, name: str, start: float, end: float, **args: Any) -> None:
        """A span from ``start`` to ``end`` (``time.perf_counter()`` seconds) on this thread."""
        if len(self.events) >= self.max_events:
            self.dropped += 1
            return
        # Thread idents are reused once a thread ends (a new epoch's readers get old ones),
        # so a trace row is one (ident, name) pair, numbered from 1 in order of appearance.
        key = (threading.get_ident(), threading.current_thread().name)
        tid = self._threads.get(key)
        if tid is None:
            tid = self._threads.setdefault(key, len(self._threads) + 1)
        event = {
            "name": name,
            "cat": "snap",
            "ph": "X",
            "ts": round((start - self.t0) * 1e6, 1),
            "dur": round(max(0.0, end - start) * 1e6, 1),
            "pid": self._pid,
            "tid": tid,
        }
        if args:
            event["args"] = args
        self.events.append(event)

    @contextlib.contextmanager
    def span(self, name: str, **args: Any) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, start, time.perf_counter(), **args)

    def to_json(self) -> dict[str, Any]:
        names = [
            {"name": "thread_name", "ph": "M", "pid": self._pid, "tid": tid, "args": {"name": n}}
            for (_, n), tid in sorted(self._threads.items(), key=lambda item: item[1])
        ]
        process = {
            "name": "process_name",
            "ph": "M",
            "pid": self._pid,
            "tid": 0,
            "args": {"name": "snap loader"},
        }
        return {
            "traceEvents": [process, *names, *self.events],
            "displayTimeUnit": "ms",
            "otherData": {"dropped_events": self.dropped},
        }

    def write(self, path: str) -> None:
        """Write the trace to ``path`` whole or not at all: under a temporary name beside it,
        renamed once written (a full disk or a file-size limit left a truncated trace); a
        link's target so (the link stays). A device or a pipe (``/dev/stdout``, a FIFO) is
        written in place, as a shell's ``>`` writes it: renamed over, it was replaced by a
        file (as root, ``/dev/null`` for every process of the machine)."""
        if not_a_file(path):
            with open(path, "w", encoding="utf-8") as out:
                json.dump(self.to_json(), out)
            return
        path = file_written(path)
        folder, name = os.path.split(path)
        part = os.path.join(folder, f".{name}.{os.getpid()}.part")
        try:
            # (0o666 and the umask, as open() makes files: not a temporary file's 0o600)
            with open(
                os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666), "w", encoding="utf-8"
            ) as f:
                json.dump(self.to_json(), f)
            os.replace(part, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(part)
            raise


def not_a_file(path: str) -> bool:
    """Whether ``path`` is there, and neither a regular file nor a directory (a device, a
    pipe, a socket), links followed."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def file_written(path: str) -> str:
    """The file a trace to ``path`` replaces: a link's target (the link stays), or the path."""
    return os.path.realpath(path) if os.path.islink(path) else os.path.abspath(path)
