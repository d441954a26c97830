"""Wording a new-user probe met in the commands' output (2026-12-07): each says what it shows
as a person would write it."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from snapshot_cli import progress as progress_mod
from snapshot_cli.progress import Progress
from snapshot_cli.render import created_lines
from snapshot_cli.report import format_summary, summarise_value


@pytest.mark.parametrize(
    ("records", "seconds", "rate"),
    [(3, 8.7, "0.3 rec/s"), (1, 20.0, "0.05 rec/s"), (0, 5.0, "0 rec/s"), (40, 2.0, "20 rec/s")],
)
def test_a_slow_rate_is_not_shown_as_zero(records: int, seconds: float, rate: str) -> None:
    """3 records in 8.7 s showed "0 rec/s"."""
    now = [0.0]
    progress = Progress(4, clock=lambda: now[0])
    progress.add(records, 10 * records)
    now[0] = seconds
    assert f"  {rate}  " in progress.line() + "  "


@pytest.mark.parametrize("value", [b"", b"ab"])
def test_bytes_are_shown_without_a_trailing_space(value: bytes) -> None:
    shown = format_summary(summarise_value(value))
    assert shown == shown.rstrip() and shown.startswith(f"bytes[{len(value)}]")


def test_the_many_record_batches_hint_names_both_options() -> None:
    """A create with --batch-bytes 1 was told of --batch-rows alone."""
    info: dict[str, Any] = {"dry_run": False, "uncompressed_bytes": 5000, "bytes": 2_000_000,
                            "reused": False, "path": "s", "version": 1, "num_records": 5000,
                            "num_shards": 2, "seconds": 1.0, "tasks_resumed": 0,
                            "tasks_reused": 0, "tasks": 2, "num_record_batches": 5000}  # fmt: skip
    hint = created_lines(info)[1]
    assert "--batch-rows (default 1,024) and --batch-bytes (default 1 MiB) make fewer" in hint


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_other_output_goes_round_the_progress_line_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker's print, a log line, a warning were glued to the progress line's end on a
    terminal: "0:01 elapsed, ~0:03 leftprocessing f3.txt" (a probe)."""
    monkeypatch.setenv("TERM", "xterm")
    screen = _Terminal()
    bar = Progress(4, stream=screen, interval=0.0)
    try:
        bar.add(1, 10)  # (drawn: "\r\x1b[K" + the line, no newline)
        progress_mod.interject("processing f3.txt\n", screen)
        progress_mod.around(screen).write("snap: warning: careful\n")
        progress_mod.interject("half a line", screen)  # (no line drawn over it until it ends)
        bar.add(1, 10)
        progress_mod.interject(" ended\n", screen)
    finally:
        bar.close()
    shown = screen.getvalue()
    lines = [line.rsplit("\r", 1)[-1].replace("\x1b[K", "") for line in shown.split("\n")]
    assert "processing f3.txt" in lines and "snap: warning: careful" in lines, lines
    assert "half a line ended" in lines, lines
    assert lines[-2].startswith("snap: tasks 0/4  records 2"), lines  # (close's, last)
    assert not any("elapsed" in line and "processing" in line for line in lines), lines
    assert progress_mod.DRAWING == []  # (closed: none drawn any more)


PRINTS = """
import sys
import time
import warnings

def f(path):
    for _ in range(3):
        time.sleep(0.3)  # (the progress line is drawn between prints: every 0.2 s)
        print("processing", path[-6:])
    time.sleep(0.3)
    warnings.warn(f"odd {path[-6:]}")
    time.sleep(0.3)
    print("to stderr", path[-6:], file=sys.stderr)
    yield {"x": 1}
"""


@pytest.mark.parametrize("workers", ["2", "0"])
def test_a_workers_prints_are_not_glued_to_the_progress_line(tmp_path: Path, workers: str) -> None:
    """On a real terminal (a pty): every line the pipeline prints stands on a line of its own."""
    import os
    import pty
    import subprocess
    import sys

    (tmp_path / "p.py").write_text(PRINTS)
    for i in range(4):
        (tmp_path / f"f{i}.txt").write_text(str(i))
    main, side = pty.openpty()
    args = [sys.executable, "-m", "snapshot_cli", "create", "p.py:f", "out", "--input",
            "f*.txt", "--inputs-per-task", "1", "--workers", workers]  # fmt: skip
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "200"}
    proc = subprocess.Popen(args, cwd=tmp_path, stderr=side, stdout=subprocess.DEVNULL, env=env)
    os.close(side)
    shown = b""
    while True:
        try:
            chunk = os.read(main, 1 << 16)
        except OSError:  # (EIO: the terminal's last writer closed it)
            break
        if not chunk:
            break
        shown += chunk
    os.close(main)
    assert proc.wait(timeout=120) == 0, shown
    screen = shown.decode().replace("\r\n", "\n")
    lines = [line.rsplit("\r", 1)[-1].replace("\x1b[K", "") for line in screen.split("\n")]
    printed = [line for line in lines if "processing" in line]
    assert len(printed) == 12 and all(line.startswith("processing f") for line in printed), lines
    # its warnings and its writes to stderr too (with --workers 0 they were glued)
    warned = [line for line in lines if "UserWarning: odd f" in line]
    assert len(warned) == 4 and all(line.startswith(str(tmp_path)) for line in warned), lines
    errs = [line for line in lines if "to stderr" in line]
    assert len(errs) == 4 and all(line.startswith("to stderr f") for line in errs), lines
