"""A small progress line on stderr: tasks, records, bytes and rate. Thread-safe."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TextIO


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def human_count(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n:.0f}"


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: "1 shard", "2 shards", "1.5k records"."""
    plural = "es" if noun.endswith(("s", "sh", "ch", "x")) and noun != "epoch" else "s"
    return f"{human_count(n)} {noun}{'' if n == 1 else plural}"


def ordinal(n: int) -> str:
    """``n`` as an English ordinal, digits grouped: "1st", "22nd", "113th", "5,001st"."""
    suffix = "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n:,}{suffix}"


def clock_time(seconds: float) -> str:
    """``seconds`` as a clock shows a duration: "0:42", "12:05", "3:07:00"."""
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """Counts tasks, records and bytes; redraws at most every ``interval`` seconds.

    On a terminal the line is redrawn in place, cut to the terminal's width (a line that
    wraps leaves a row behind at every redraw); elsewhere (CI logs) a line is printed every
    ``log_interval`` seconds and at the end. A stream that cannot be written (its reader
    gone: ``snap create ... 2>&1 | head -1``, a full disk) ends the drawing, not the work.
    """

    def __init__(
        self,
        total_tasks: int,
        done_tasks: int = 0,
        stream: TextIO | None = None,
        interval: float = 0.2,
        log_interval: float = 10.0,
        unit: str = "tasks",
        clock: Callable[[], float] = time.monotonic,
        done_counts: tuple[int, int] = (0, 0),
    ) -> None:
        self.unit, self.clock = unit, clock
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.dumb = os.environ.get("TERM", "") in ("dumb", "")  # (no "erase line" code)
        self.interval = interval if self.tty else log_interval
        self.total_tasks, self.done_tasks = total_tasks, done_tasks
        self.done_before = done_tasks  # (a resumed run's: not in this run's rate)
        self.records, self.bytes = done_counts  # shown: the records and bytes of the units
        # done before (a resumed run's), counted since, or the totals close() was given
        self.records_here = self.bytes_here = 0  # counted in this run: the rates' (a grow's
        # close() gives the snapshot's totals, reused records too: 977k rec/s for 15k)
        self.started = clock()
        self._last = 0.0
        self._drawn: tuple[int, int, int] | None = None  # the counts the last line showed
        self._shown = 0  # the length of the line on the terminal now
        self._cut = False  # other output ended mid-line: no line drawn over it until it ends
        self._lock = threading.Lock()
        if self.tty:
            DRAWING[:] = [self]  # (what other output on this terminal goes round: interject)

    def add(self, records: int, nbytes: int) -> None:
        with self._lock:
            self._count(records, nbytes)
            self._maybe_draw()

    def _count(self, records: int, nbytes: int) -> None:
        self.records += records
        self.bytes += nbytes
        self.records_here += records
        self.bytes_here += nbytes

    def task_done(self, records: int = 0, nbytes: int = 0) -> None:
        """One more unit finished (with the records and bytes it adds, if not yet counted)."""
        with self._lock:
            self.done_tasks += 1
            self._count(records, nbytes)
            self._maybe_draw()

    def line(self, width: int | None = None) -> str:
        """The line; with ``width``, the parts that fit in it (the least telling left out
        first: the byte rate, the record rate, the bytes, the elapsed time), cut at worst."""
        elapsed = max(1e-9, self.clock() - self.started)
        head = f"snap: {self.unit} {self.done_tasks}/{self.total_tasks}"
        records, size = f"records {human_count(self.records)}", human_bytes(self.bytes)
        rate = self.records_here / elapsed  # (3 records in 8.7 s: "0.3", not "0")
        rec_rate = f"{human_count(rate) if rate >= 1 or not rate else f'{rate:.1g}'} rec/s"
        byte_rate = f"{human_bytes(self.bytes_here / elapsed)}/s"
        timing, eta = [], []
        done_here, left = self.done_tasks - self.done_before, self.total_tasks - self.done_tasks
        if left > 0:  # and the time left at this run's rate, once it has one
            eta = [f"~{clock_time(left * elapsed / done_here)} left"] if done_here else []
            timing = [f"{clock_time(elapsed)} elapsed{''.join(', ' + e for e in eta)}"]
        tries = [
            [head, records, size, rec_rate, byte_rate, *timing],
            [head, records, size, rec_rate, *timing],
            [head, records, size, *timing],
            [head, records, *timing],
            [head, records, *eta],
            [head, *eta],
        ]
        for parts in tries:
            text = "  ".join(parts)
            if width is None or len(text) <= width:
                return text
        return "  ".join(tries[-1])[: max(0, width or 0)]

    def interject(self, data: bytes | str) -> None:
        """Write ``data`` (a worker's output, a log line) on the terminal where the line is
        drawn: the line is cleared first, drawn again under it (it was glued to the line's
        end: "0:01 elapsed, ~0:03 leftprocessing f3.txt"; a probe)."""
        with self._lock:
            stream = self.stream
            if stream is None:
                return
            try:
                if self._shown and not self._cut:
                    stream.write("\r\x1b[K" if not self.dumb else "\r" + " " * self._shown + "\r")
                    self._shown = 0
                _write(data, stream)
                tail = data[-1:] if data else ""
                self._cut = tail not in ("\n", b"\n")
                if not self._cut and self._drawn is not None:
                    self._draw()
            except (OSError, ValueError, AttributeError):
                self.stream = None

    def _maybe_draw(self) -> None:
        if self._cut:
            return
        now = self.clock()
        if now - self._last >= self.interval:
            self._last = now
            self._draw()

    def _draw(self, end: str = "") -> None:
        self._drawn = (self.done_tasks, self.records, self.bytes)
        if self.stream is None:  # stderr closed by the shell (`2>&-`): nowhere to show it
            return
        try:
            if self.tty:
                text = self.line(_width(self.stream) - 1)  # (the last column wraps on some)
                if self.dumb:  # spaces over the longer line before, then back
                    pad = max(0, self._shown - len(text))
                    self.stream.write("\r" + text + " " * pad + "\b" * pad + end)
                else:
                    self.stream.write("\r\x1b[K" + text + end)
                self._shown = 0 if end else len(text)
            else:
                self.stream.write(self.line() + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # its reader gone, a full disk, closed: stop drawing
            self.stream = None

    def close(self, records: int | None = None, nbytes: int | None = None) -> None:
        """Draw the final line; ``records``/``nbytes`` replace the running counts with the
        true totals (bytes counted per record batch leave out each file's header and footer),
        not in the rates: those are of what this run counted."""
        with self._lock:
            if records is not None:
                self.records = records
            if nbytes is not None:
                self.bytes = nbytes
            if self in DRAWING:
                DRAWING.remove(self)
            if not self.tty and self._drawn == (self.done_tasks, self.records, self.bytes):
                return  # a log already has this line (only the rates would differ)
            if self._cut:  # (after another's output that ended mid-line: on a line of its own)
                self._write("\n")
            self._draw(end="\n")

    def _write(self, text: str) -> None:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            if self.stream is not None:
                self.stream.write(text)


DRAWING: list[Progress] = []  # the line drawn on the terminal now (none, or one)


def interject(data: bytes | str, stream: TextIO) -> None:
    """Write ``data`` to ``stream``, round the progress line drawn there if there is one."""
    drawing = DRAWING[0] if DRAWING else None
    if drawing is not None and drawing.stream is stream:
        drawing.interject(data)
    else:
        _write(data, stream)


def _write(data: bytes | str, stream: TextIO) -> None:
    """``data`` to ``stream``: bytes (a worker's output) to its buffer, as they came."""
    buffer = getattr(stream, "buffer", None) if isinstance(data, bytes) else None
    if buffer is None:
        stream.write(data.decode(errors="replace") if isinstance(data, bytes) else data)
        return
    stream.flush()
    buffer.write(data)
    buffer.flush()


def _width(stream: TextIO) -> int:
    """The terminal's columns (80 where it cannot tell: the usual default)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (OSError, ValueError, AttributeError):
        return shutil.get_terminal_size((80, 24)).columns


def around(stream: TextIO) -> TextIO | Round:
    """``stream``, or where a progress line is drawn on it, one whose writes go round it."""
    return Round(stream) if DRAWING and DRAWING[0].stream is stream else stream


class Round:
    """``stream``, its writes round the progress line drawn on it when one is (see
    :func:`interject`); anything else of it as it is (``fileno``, ``encoding``, ...)."""

    def __init__(self, stream: TextIO) -> None:
        self.inner = stream

    def write(self, text: str) -> int:
        interject(text, self.inner)
        return len(text)

    def flush(self) -> None:
        self.inner.flush()

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


class _PipelineOutput:
    """While tasks run in this process (``--workers 0``, ``workers=0``): the pipeline's
    prints go to stderr, and its writes there (``warnings.warn``, ``print(file=sys.stderr)``)
    go round a progress line drawn on it, where they were glued to its end.

    ``redirect_stdout(sys.stderr)`` was not enough for tasks that may run at once in several
    threads (a notebook making snapshots in a thread pool): each restores the stream it
    found, so overlapping ones left ``sys.stdout`` on stderr for good. The first task in
    redirects, the last one out restores (a stream the pipeline set meanwhile is kept)."""

    def __init__(self) -> None:
        self.lock, self.running = threading.Lock(), 0
        self.saved: Any = None
        self.ours: Any = None
        self.saved_err: Any = None
        self.ours_err: Round | None = None

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        with self.lock:
            if self.running == 0:
                self.ours = Round(sys.stderr) if sys.stderr is not None else None
                self.saved, sys.stdout = sys.stdout, self.ours
                err = around(sys.stderr) if sys.stderr is not None else None
                self.saved_err, self.ours_err = sys.stderr, err if isinstance(err, Round) else None
                if self.ours_err is not None:  # (a line is drawn there: round it)
                    sys.stderr = self.ours_err
            self.running += 1
        try:
            yield
        finally:
            with self.lock:
                self.running -= 1
                if self.running == 0:
                    if sys.stdout is self.ours:
                        sys.stdout = self.saved
                    if self.ours_err is not None and sys.stderr is self.ours_err:
                        sys.stderr = self.saved_err


pipeline_output = _PipelineOutput()
