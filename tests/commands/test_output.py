"""Where a command's output goes when the world around it is not a terminal of 80 columns
with a reader at both ends: a narrow or dumb terminal, a reader that goes away, a full
device, a closed stream, a broken environment."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snapshot_cli.progress import Progress

SNAP = str(Path(sys.executable).with_name("snap"))
SLOW = """
import os
def f(item):
    os.write(1, b"from C\\n")  # (a library's own prints, below Python)
    print("from Python")
    yield {"i": item}
def items():
    return list(range(40))
"""


def sh(script: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=180, check=False)  # fmt: skip


def ids(cwd: Path, snapshot: str) -> list[int]:
    read = f"import snapshot_cli as s; print(sorted(int(i) for b in s.open({snapshot!r}).loader(8)"
    out = subprocess.run([sys.executable, "-c", read + " for i in b['i']))"], cwd=cwd,
                         capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    return json.loads(out.stdout)


@given(
    tasks=st.integers(0, 10**7), done=st.integers(0, 10**7), records=st.integers(0, 10**12),
    nbytes=st.integers(0, 10**15), seconds=st.floats(0, 10**6), width=st.integers(0, 300),
)  # fmt: skip
def test_the_progress_line_fits_any_width(
    tasks: int, done: int, records: int, nbytes: int, seconds: float, width: int
) -> None:
    now = [0.0]
    bar = Progress(tasks, stream=io.StringIO(), clock=lambda: now[0])
    bar.done_tasks, bar.records, bar.bytes = min(done, tasks), records, nbytes
    now[0] = seconds
    text = bar.line(width)
    assert len(text) <= width
    head = f"snap: tasks {bar.done_tasks}/{tasks}"
    assert text.startswith(head) or len(head) > width  # what it is counting stays
    assert bar.line(10**4) == bar.line()  # (room for all: the whole line)


def draws_on_a_terminal(columns: int, term: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """What a Progress writes on a real terminal (a pty) ``columns`` wide."""
    monkeypatch.setenv("TERM", term)
    main, side = pty.openpty()
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    now = [0.0]
    with open(side, "w", closefd=True) as stream:
        bar = Progress(400, stream=stream, clock=lambda: now[0])
        assert bar.tty
        for k in range(1, 400, 37):
            now[0] += 0.5
            bar.task_done(k * 1000, k * 10**6)
        bar.close()
    out = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # (the other side closed)
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    return out.decode()


@pytest.mark.parametrize("columns", [80, 50, 30])
def test_on_a_terminal_each_redraw_fits_its_width(
    columns: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An 80-column terminal got 85 columns a redraw: each wrapped and left a row behind."""
    out = draws_on_a_terminal(columns, "xterm", monkeypatch)
    draws = [d.replace("\x1b[K", "").rstrip("\r\n") for d in out.split("\r") if d.strip()]
    assert len(draws) >= 5, out
    assert all(0 < len(d) < columns for d in draws), [len(d) for d in draws]
    assert "\x1b[K" in out


def test_a_dumb_terminal_gets_no_escape_codes(monkeypatch: pytest.MonkeyPatch) -> None:
    """TERM=dumb (Emacs' compile buffer): spaces over a longer line, never "\\e[K"."""
    out = draws_on_a_terminal(200, "dumb", monkeypatch)
    assert "\x1b" not in out and out.count("\r") >= 5, repr(out)


class Gone(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def isatty(self) -> bool:
        return True


def test_a_stream_that_fails_ends_the_drawing_not_the_work() -> None:
    bar = Progress(3, stream=Gone())
    for _ in range(3):
        bar.task_done(1, 10)  # (raised BrokenPipeError into the create)
    bar.close()
    assert bar.stream is None and bar.done_tasks == 3


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_create_whose_message_reader_goes_away_still_makes_the_snapshot(
    tmp_path: Path, workers: str
) -> None:
    """`snap create ... 2>&1 | head -1`: the progress line met EPIPE and the create stopped,
    "out: Broken pipe (EPIPE)", its snapshot left unfinished."""
    # (a function that prints fails there as in any Python program: print() raises
    # BrokenPipeError; left to the function, as Python leaves it)
    (tmp_path / "slow.py").write_text(SLOW.replace("os.write", "# ").replace("print", "#"))
    res = sh(f"{SNAP} create slow.py:f out --inputs-from slow:items --inputs-per-task 1 "
             f"--workers {workers} 2>&1 | head -1; exit ${{PIPESTATUS[0]}}", tmp_path)  # fmt: skip
    assert res.returncode in (0, 141), res  # (141: its last line found no reader, as `head`)
    assert ids(tmp_path, "out") == list(range(40))
    assert "Traceback" not in res.stdout + res.stderr


def test_a_closed_stderr_leaves_the_work_and_stdout_alone(tmp_path: Path) -> None:
    """`2>&-` with worker processes: the protocol's pipe took fd 2 and the pipeline's prints
    went into it (the workers failed); without workers, C's prints came out on stdout,
    inside --json's document."""
    (tmp_path / "slow.py").write_text(SLOW)
    create = f"{SNAP} create slow.py:f OUT --inputs-from slow:items --inputs-per-task 4"
    res = sh(create.replace("OUT", "two") + " --workers 2 2>&-", tmp_path)
    assert res.returncode == 0, res
    assert ids(tmp_path, "two") == list(range(40))
    res = sh(create.replace("OUT", "none") + " --workers 0 --json 2>&-", tmp_path)
    assert res.returncode == 0, res
    assert json.loads(res.stdout)["num_records"] == 40  # (nothing but the document)


@pytest.mark.parametrize(
    "args",
    [["inspect", "s"], ["inspect", "s", "--json"], ["head", "s"], ["verify", "s"],
     ["gc", "s", "--dry-run"], ["--version"], ["inspect", "--help"], ["--help"]],
)  # fmt: skip
def test_a_full_standard_output_is_said_to_be_one(tmp_path: Path, args: list[str]) -> None:
    """`snap inspect s > /dev/full` said "the snapshot: No space left on device ... run the
    same command again: it resumes"; --help and --version gave click's traceback."""
    (tmp_path / "slow.py").write_text(SLOW)
    made = sh(f"{SNAP} create slow.py:f s --inputs-from slow:items --workers 0 --quiet", tmp_path)
    assert made.returncode == 0, made
    res = sh(f"{SNAP} {' '.join(args)} > /dev/full", tmp_path)
    assert res.returncode == 1, res
    errors = [line for line in res.stderr.splitlines() if not line.startswith("snap: shards")]
    assert errors == [
        "snap: error: cannot write to standard output: No space left on device (ENOSPC)"
    ], res.stderr  # (verify's progress lines before it)


def test_packages_that_do_not_fit_together_are_no_bug_in_snap(tmp_path: Path) -> None:
    """numpy<2 beside pyarrow 26 (pip installs them; pyarrow refuses at import): "unexpected
    ImportError ... (a bug in snap ...)"."""
    fake = tmp_path / "lib" / "pyarrow"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "raise ImportError('pyarrow requires NumPy 2.0 or newer, found 1.26.4')\n"
    )
    (tmp_path / "slow.py").write_text(SLOW)
    res = sh(f"{SNAP} create slow.py:f s --inputs-from slow:items --workers 0", tmp_path,
             PYTHONPATH=str(tmp_path / "lib"))  # fmt: skip
    assert res.returncode == 1, res
    (line,) = [x for x in res.stderr.splitlines() if x.startswith("snap: error:")]
    assert "pyarrow requires NumPy 2.0 or newer" in line and "do not work together" in line
    assert "bug in snap" not in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize(
    "args", [["--help"], ["--version"], ["inspect", "--help"], ["create", "--help"], ["gc", "-h"]]
)
def test_click_s_own_output_to_a_reader_gone_exits_as_sigpipe(args: list[str]) -> None:
    """`snap --help | head -1`: click answered the broken pipe of its own writes with exit 1,
    where every command of snap's exits 141, silently, as a Unix tool ended by SIGPIPE."""
    read, write = os.pipe()
    os.close(read)  # (the reader gone before a byte is written: EPIPE, whatever the timing)
    try:
        res = subprocess.run([SNAP, *args], stdout=write, stderr=subprocess.PIPE, text=True,
                             timeout=60, check=False)  # fmt: skip
    finally:
        os.close(write)
    assert (res.returncode, res.stderr) == (141, ""), res


@pytest.mark.parametrize(
    "args", [["head", "s", "-n", "4000", "--json"], ["head", "s", "-n", "4000"]]
)
def test_a_document_larger_than_the_pipe_to_a_reader_gone_exits_as_sigpipe(
    tmp_path: Path, args: list[str]
) -> None:
    """`snap head s -n 5000 --json | head -c 100`: the document (1.6 MB) was written at once,
    the write came back cut short when the reader went away, Python reported it whole, and
    snap exited 0 with most of its answer lost; it exits 141, as for text."""
    import numpy as np

    import snapshot_cli as snap

    def records(i: int) -> object:
        for k in range(100):
            yield {"i": np.int64(i * 100 + k), "v": np.full(8, k, np.float32), "t": f"r{k}"}

    snap.create(records, tmp_path / "s", inputs=list(range(40)), workers=0, inputs_per_task=1)
    with subprocess.Popen([SNAP, *args], cwd=tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as proc:  # fmt: skip
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.read(100)
        proc.stdout.close()  # the reader goes away (as `head -c 100` does)
        err = proc.stderr.read()
        assert (proc.wait(timeout=120), err, len(first)) == (141, b"", 100)
