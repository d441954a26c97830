"""snap's Python API from a working directory that was deleted (a notebook's or a REPL's,
``python -c``: ``''`` first on ``sys.path``), with absolute paths only: it works. A create
with ``workers=0`` failed with "<OUTPUT>: No such file or directory (ENOENT)", blaming
OUTPUT; with workers, "cannot start a worker process"; a loader's decode processes did not
start (a warning). ``os.path.abspath('')`` raised where snap asked whether a ``sys.path``
entry is the standard library's (:func:`snapshot_cli.child.is_stdlib`) and where it looked
for a pipeline's module name (:mod:`snapshot_cli.writers.importing`)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.infra.users import SOURCE

# Run in a fresh process whose first act is to delete its working directory (argv[1]).
PRELUDE = """
import os, sys
os.chdir(sys.argv[1])
os.rmdir(sys.argv[1])
assert sys.path[0] == ""  # (python -c: the working directory first)
import snapshot_cli as snap
out = sys.argv[2]
"""


def run_gone(tmp_path: Path, code: str) -> list[str]:
    """``code`` after PRELUDE, in a directory deleted first: its stdout's lines."""
    gone = tmp_path / "gone"
    gone.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code), str(gone), str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": SOURCE},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not gone.exists()
    return done.stdout.splitlines()


PIPELINE = """
def preprocess(path):
    return [{"n": len(open(path, "rb").read())}]
"""


def test_create_and_read_with_absolute_paths(tmp_path: Path) -> None:
    (tmp_path / "pipe.py").write_text(PIPELINE)
    (tmp_path / "in").mkdir()
    for i in range(4):
        (tmp_path / "in" / f"{i}.bin").write_bytes(b"x" * i)
    lines = run_gone(
        tmp_path,
        """
        import warnings
        warnings.simplefilter("error")  # (a decode process that cannot start: a warning)
        for w in (0, 2):
            info = snap.create(f"{out}/pipe.py:preprocess", f"{out}/s{w}", inputs=f"{out}/in/*",
                               workers=w, progress=False)
            print("file", w, info.num_records)
        info = snap.create(lambda i: [{"n": i}], f"{out}/lam", inputs=range(5), workers=2,
                           progress=False)
        print("lambda", info.num_records)
        s = snap.open(f"{out}/s0")
        print("loader", sum(len(b["n"]) for b in s.loader(batch_size=2, processes=1)))
        """,
    )
    assert lines == ["file 0 4", "file 2 4", "lambda 5", "loader 4"]


def test_what_needs_the_working_directory_says_so(tmp_path: Path) -> None:
    """A module spec found nowhere, a failing lambda (its frames are ``<string>``'s), and any
    other OS error with no file named: never "<OUTPUT>: No such file or directory"."""
    lines = run_gone(
        tmp_path,
        """
        import errno
        from snapshot_cli.child import is_stdlib
        from snapshot_cli.writers import guards

        print("stdlib", is_stdlib(""), is_stdlib("relative/dir"))
        try:
            snap.create("no_such_module_anywhere:f", f"{out}/m", inputs=range(2), workers=0,
                        progress=False)
        except snap.SnapError as err:
            print(type(err).__name__, err)
        try:
            snap.create(lambda i: [{"n": 1 / 0}], f"{out}/z", inputs=range(2), workers=0,
                        progress=False)
        except snap.SnapError as err:
            print(type(err).__name__, str(err).splitlines()[-1])

        def needs_cwd(pipeline, output, **options):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory")

        try:
            guards.faults_answered(needs_cwd)(None, f"{out}/c")
        except snap.SnapError as err:
            print(type(err).__name__, err)
        """,
    )
    assert lines[0] == "stdlib False False"
    assert lines[1] == (
        "PipelineLoadError pipeline module 'no_such_module_anywhere' not found (from "
        "'no_such_module_anywhere:f'); the current directory was deleted, and this path is "
        "relative to it: cd to a directory that exists, or give absolute paths"
    )
    assert lines[2] == "PipelineError ZeroDivisionError: division by zero"
    assert lines[3] == (
        f"StorageError snap.create of {tmp_path}/c failed ([Errno 2] No such file or "
        "directory): the current directory was deleted, and this create needed it: cd "
        "(os.chdir) to a directory that exists, then run it again"
    )


def test_warnings_and_a_relative_trace_from_a_deleted_directory(tmp_path: Path) -> None:
    """snap's warnings look up their caller's file (``errors.outside_snap``, ``cli_io``'s
    filter): a ``<string>`` frame's ``abspath`` raised a bare FileNotFoundError instead of
    the warning (``processes=`` past the core count); a relative ``--trace`` blamed "the
    snapshot"."""
    lines = run_gone(
        tmp_path,
        """
        import warnings
        from snapshot_cli.cores import cores
        snap.create(lambda i: [{"n": i}], f"{out}/s", inputs=range(6), workers=0,
                    progress=False)
        more = cores() + 1  # (decode processes beyond the cores: a warning)
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            n = sum(len(b["n"]) for b in snap.open(f"{out}/s").loader(2, processes=more))
        print("loader", n, any(f"processes={more}" in str(w.message) for w in said))
        from click.testing import CliRunner
        from snapshot_cli.cli import cli
        done = CliRunner().invoke(cli, ["bench", f"{out}/s", "--trace", "t.json"])
        print(done.exit_code, done.output.strip().splitlines()[-1])
        """,
    )
    assert lines[0] == "loader 6 True"
    assert lines[1].startswith("1 snap: error: ") and lines[1].endswith(
        "--trace 't.json': the current directory was deleted, and this path is relative to it: "
        "cd to a directory that exists, or give absolute paths"
    ), lines[1]
