"""A pipeline file is imported under its own name, so the processes it starts can import it.

`snap create pipe.py:f` imported pipe.py as a private module (`_snap_pipeline_pipe_<hash>`).
What the file defines pickles by its module's name, so a spawn or forkserver
`multiprocessing.Pool` or `ProcessPoolExecutor` inside the function (the default start
method on macOS, and on Linux from Python 3.14) sent its children a name they could not
import: the Pool's workers died and were replaced forever (a hang), the executor broke. A
sibling module's `import pipe` also made a second copy of the file's module. Where the file's
own name could mean another module (`json.py`, or another `pipe.py` imported before in the
same process) or is no identifier, the private name stays.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

import snapshot_cli as snap
from snapshot_cli import child
from snapshot_cli.writers import importing
from tests.conftest import REPO
from tests.writers.test_first_use import run_script

POOLS = """
import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor

import sibling

def square(x):
    return x * x

def preprocess(i):
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("forkserver")) as ex:
        executed = list(ex.map(square, [i, i + 1]))  # (a broken pool raises at once)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        pooled = pool.map_async(square, [i, i + 1]).get(timeout=120)  # a hang fails, late
    yield {
        "i": i,
        "pooled": sum(pooled),
        "executed": sum(executed),
        "one_module": sibling.the_pipeline() is sys.modules[__name__],
    }
"""

SIBLING = """
def the_pipeline():
    import {name}
    return {name}
"""


@pytest.mark.parametrize("workers", [0, 2])
def test_processes_started_by_the_pipeline_import_its_file(tmp_path: Path, workers: int) -> None:
    # a name of its own in this test process (where other tests import many a pipe.py)
    name = f"pools_{workers}"
    (tmp_path / f"{name}.py").write_text(POOLS)
    (tmp_path / "sibling.py").write_text(textwrap.dedent(SIBLING.format(name=name)))
    out = tmp_path / "s"
    snap.create(f"{tmp_path / name}.py:preprocess", out, inputs=[1, 5], workers=workers,
                inputs_per_task=1)  # fmt: skip
    rows = sorted(snap.open(out).head(), key=lambda r: r["i"])
    assert [(r["i"], r["pooled"], r["executed"]) for r in rows] == [(1, 5, 5), (5, 61, 61)]
    assert all(r["one_module"] for r in rows)


@pytest.mark.parametrize(
    "stem", ["json", "my-prep", "class", "numpy", "pyarrow", "fsspec", "snapshot_cli"]
)
def test_a_file_whose_name_is_taken_or_no_module_name_still_runs(
    tmp_path: Path, stem: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`json.py` would be the standard library's json to its children (a private name is
    kept, and `import json` in the process stays the library); `my-prep` and `class` cannot
    be imported by name at all."""
    # The file's directory stays on this process's path, before installed packages, for
    # the processes it starts (importing._put_on_path): restored after, or a `numpy.py`
    # there was numpy to every later test's spawned children (DataLoader workers died)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(child, "CODE_DIRS", set(child.CODE_DIRS))
    (tmp_path / f"{stem}.py").write_text("def preprocess(i):\n    yield {'i': i * 2}\n")
    for workers in (0, 2):
        out = tmp_path / f"s{workers}"
        snap.create(f"{tmp_path / stem}.py:preprocess", out, inputs=[1, 2], workers=workers)
        assert sorted(r["i"] for r in snap.open(out).head()) == [2, 4]
    import json

    assert json.dumps([1]) == "[1]" and hasattr(json, "JSONDecodeError")


SCRIPT = """
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import snapshot_cli as snap
{import_line}

{definition}

def preprocess(i):
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as ex:
        yield {{"v": sum(ex.map(square, [i, i + 1]))}}

if __name__ == "__main__":  # the pool's children import this script as their __main__
    snap.create(preprocess, "out", inputs=[1, 5], workers=2, inputs_per_task=1)
    print(sorted(int(r["v"]) for r in snap.open("out").head()))
"""
SQUARE = "def square(x):\n    return x * x\n"


def test_a_script_function_handed_to_the_pipelines_own_processes_is_told_where_to_move_it(
    tmp_path: Path,
) -> None:
    """A pipeline of the running script goes to snap's workers by value; a function of the
    script it hands to processes of its own pickles by name, and in a worker `__main__` is
    not the script. The error says to move it into a module, and doing so works."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(import_line="", definition=SQUARE))
    failed = run_script(script, tmp_path)
    assert failed.returncode == 1, failed.stderr
    assert "the pipeline raised PicklingError on input" in failed.stderr
    assert (
        "'square' is defined in the script or notebook that called snap.create, and the "
        "pipeline runs in snap's worker processes, where processes it starts itself cannot "
        "find it by name: move 'square' into a module of its own beside the script (from "
        "helpers import square), or run the pipeline in this process (workers=0)"
    ) in failed.stderr
    (tmp_path / "helpers.py").write_text(SQUARE)
    script.write_text(SCRIPT.format(import_line="from helpers import square", definition=""))
    moved = run_script(script, tmp_path)
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout.strip() == "[5, 61]"


SHADOWING = """
import importlib.util
import multiprocessing
import sys

import snapshot_cli as snap

def cube(x):
    import json  # (a child imports json, or a module that does, after sys.path is set)

    return json.loads(str(x)) ** 3

if __name__ == "__main__":
    snap.create("proj/prep.py:preprocess", "out", inputs=[1, 2], workers=int(sys.argv[1]))
    print("sibling", importlib.util.find_spec("helpers").origin)  # `python prep.py` finds it
    print("stdlib", importlib.util.find_spec("json").origin)
    with multiprocessing.get_context("spawn").Pool(1) as pool:  # children import json first
        print("pool", pool.map_async(cube, [2]).get(timeout=120))
"""


@pytest.mark.parametrize("workers", [0, 2])
def test_a_pipelines_directory_does_not_hide_the_standard_library(
    tmp_path: Path, workers: int
) -> None:
    """Importing `proj/prep.py` put `proj/` first on the caller's `sys.path`, for good: a
    `json.py` (or `random.py`, `types.py`, ...) beside the pipeline then was the standard
    library's module to every process the caller spawned afterwards (a `spawn` Pool's
    children died importing it, and the Pool waited forever; pytest's workers met it after
    the test above). The directory goes after the standard library now: sibling modules are
    found as before, the standard library's names stay its own."""
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "json.py").write_text("raise RuntimeError('the project json.py was imported')\n")
    (proj / "helpers.py").write_text("TWICE = 2\n")
    (proj / "prep.py").write_text(
        "import helpers\n\ndef preprocess(i):\n    yield {'i': i * helpers.TWICE}\n"
    )
    (tmp_path / "main.py").write_text(SHADOWING)
    res = subprocess.run(
        [sys.executable, "main.py", str(workers)], cwd=tmp_path, capture_output=True,
        text=True, timeout=180, env={**os.environ, "PYTHONPATH": str(REPO)}, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    said = dict(line.split(" ", 1) for line in res.stdout.splitlines())
    assert said["sibling"] == str(proj / "helpers.py")
    assert said["stdlib"] != str(proj / "json.py") and "python3" in said["stdlib"]
    assert said["pool"] == "[8]"


def test_the_directory_goes_after_the_standard_library_and_before_site_packages(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """As a Python without a venv has its path: the interpreter's own site-packages lies
    inside the standard library's directory, and a sibling module must still come first."""
    lib = sysconfig.get_path("stdlib")
    path = ["/elsewhere", os.path.join(os.path.dirname(lib), "python3X.zip"), lib,
            os.path.join(lib, "lib-dynload"), os.path.join(lib, "site-packages")]  # fmt: skip
    monkeypatch.setattr(sys, "path", list(path))
    importing._put_on_path(str(tmp_path))
    assert sys.path == [*path[:4], str(tmp_path), path[4]]
    importing._put_on_path(str(tmp_path))  # once
    assert sys.path.count(str(tmp_path)) == 1
