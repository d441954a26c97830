"""A notebook's traceback of snap's error shows the user's cell and the frame that raised, not
snap's frames between them (:mod:`snapshot_cli.hidden_frames`): a failing pipeline showed 8-10
of them with their context lines, ~70 lines above a message that says it all. An exception
that is not snap's keeps every frame, and so does pytest's report of one."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from snapshot_cli.errors import PipelineError, SnapError
from snapshot_cli.hidden_frames import HIDDEN

NOTEBOOK = """
import sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_cell("import snapshot_cli as snap", store_history=True)
shell.run_cell(
    "def prep(x):\\n    if x == 2:\\n        raise " + sys.argv[3] + "\\n    yield {'v': x}",
    store_history=True,
)
shell.run_cell(
    f"snap.create(prep, {sys.argv[1]!r}, inputs=[1, 2, 3], workers={sys.argv[2]})",
    store_history=True,
)
"""


def shown(tmp_path: Path, workers: int, raises: str) -> str:
    """What IPython shows of the failing create's cell, colours removed."""
    out = subprocess.run(
        [sys.executable, "-c", NOTEBOOK, str(tmp_path / "s"), str(workers), raises],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    return re.sub(r"\x1b\[[0-9;]*m", "", out)


def snap_frames(text: str) -> list[str]:
    return re.findall(r"^File \S*snapshot_cli/(\S+):\d+, in ([\w.<>]+)", text, re.MULTILINE)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_failing_pipeline_shows_its_cell_and_where_snap_raised(
    tmp_path: Path, workers: int
) -> None:
    said = shown(tmp_path, workers, "ValueError('bad record')")
    assert "PipelineError: the pipeline raised ValueError on input 2" in said, said
    assert "Cell In[3], line 1\n----> 1 snap.create(prep" in said, said  # the user's call
    assert "Cell In[2], line 3, in prep" in said, said  # the user's failing line
    assert "[... skipping hidden" in said, said
    # only the frame that raised: writers/task.py's _feed in process, the executor's run
    # where a worker's error arrives
    raised = ("writers/task.py", "_feed") if workers == 0 else ("writers/executors.py", "run")
    assert [(f, n.rpartition(".")[2]) for f, n in snap_frames(said)] == [raised], said
    assert len(said.splitlines()) < 35, said


def test_an_exception_not_of_snap_keeps_every_frame(tmp_path: Path) -> None:
    """A KeyboardInterrupt out of the pipeline (a Ctrl-C, or a bug) is not snap's error: where
    it went through snap may matter, and every frame is shown."""
    said = shown(tmp_path, 0, "KeyboardInterrupt")
    assert "KeyboardInterrupt" in said and "[... skipping hidden" not in said, said
    names = {n.rpartition(".")[2] for _, n in snap_frames(said)}
    assert {"create", "_create", "run_task", "_feed"} <= names, said


def test_the_frames_are_hidden_only_while_a_snap_error_is_handled() -> None:
    assert not HIDDEN  # (no exception)
    try:
        raise PipelineError("x")
    except SnapError:
        assert HIDDEN
    try:
        raise ValueError("x")
    except ValueError:
        assert not HIDDEN


def test_pytest_shows_snap_s_frames_of_a_snap_error(tmp_path: Path) -> None:
    """A test calling snap that fails with snap's error: its report keeps snap's frames
    (pytest calls a callable ``__tracebackhide__`` with the exception)."""
    (tmp_path / "test_user.py").write_text(
        "import snapshot_cli as snap\n\n"
        "def prep(x):\n    raise ValueError('bad record')\n\n"
        "def test_create(tmp_path):\n"
        "    snap.create(prep, str(tmp_path / 's'), inputs=[1], workers=0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
         "test_user.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip
    assert done.returncode == 1 and "1 failed" in done.stdout, done.stdout + done.stderr
    assert "PipelineError" in done.stdout, done.stdout
    for frame in ("writers/create.py", "writers/task.py", "keywords.py"):
        assert frame in done.stdout, done.stdout
