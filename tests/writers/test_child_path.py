"""snap's own processes (a create's workers, a loader's decode processes) import what the
caller's process imports: the standard library's modules, not a user's file of the same name
in the working directory, and the caller's copies of snap's dependencies."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import click

import snapshot_cli

PIPE = """
def preprocess(i):
    import click, sys
    yield {"i": i, "click": getattr(click, "WHERE", "installed")}
def items():
    return [1, 2, 3]
"""
# modules snap's children import at start-up, before any of the user's code runs
SHADOWS = ("random", "json", "tempfile", "logging", "queue", "uuid", "tokenize")


def run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=180, check=False)  # fmt: skip


def test_modules_beside_the_pipeline_do_not_hide_the_standard_library(tmp_path: Path) -> None:
    """A ``random.py`` beside the pipeline, in the directory snap create runs in: workers
    died importing snap ("cannot import name 'Random' from 'random'") and ran the file."""
    (tmp_path / "pipe.py").write_text(PIPE)
    ran = tmp_path / "ran.txt"
    for name in SHADOWS:
        (tmp_path / f"{name}.py").write_text(
            f"open({str(ran)!r}, 'a').write({name!r} + '\\n')\nraise SystemExit('user file')\n"
        )
    snap = str(Path(sys.executable).with_name("snap"))  # (python -m puts the directory first)
    res = run([snap, "create", "pipe.py:preprocess", "out", "--inputs-from", "pipe:items",
               "--workers", "2", "--json"], tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["num_records"] == 3
    # a training script elsewhere, run from that directory, with a decode process
    train = tmp_path / "jobs" / "train.py"
    train.parent.mkdir()
    train.write_text(
        "import json, snapshot_cli as snap\n"
        "from snapshot_cli.readers import procs\n"
        "started = len(procs.pool().wait_ready(1))\n"
        "loader = snap.open('out').loader(1, processes=1, columns=['i'])\n"
        "print(json.dumps([sorted(int(i) for b in loader for i in b['i']), started]))\n"
    )
    res = run([sys.executable, "-W", "error::RuntimeWarning", str(train)], tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == [[1, 2, 3], 1]  # (1: the decode process started)
    assert not ran.exists(), ran.read_text()


def test_workers_import_the_callers_copies_of_snaps_dependencies(tmp_path: Path) -> None:
    """snap installed beside a dependency (as in any site-packages) and the caller's own copy
    of it first on its path (PYTHONPATH, a notebook's sys.path.insert): workers put snap's
    directory first and imported the other copy, so the pipeline ran with another version
    than with --workers 0."""
    installed = Path(click.__file__).parent
    site, mine = tmp_path / "site", tmp_path / "mine"
    for where, lib in (("site", site), ("mine", mine)):
        shutil.copytree(installed, lib / "click")
        with open(lib / "click" / "__init__.py", "a") as f:
            f.write(f"\nWHERE = {where!r}\n")
    (site / "snapshot_cli").symlink_to(Path(snapshot_cli.__file__).parent)
    (tmp_path / "pipe.py").write_text(PIPE)
    path = f"{mine}{os.pathsep}{site}"
    got = {}
    for workers in ("0", "2"):
        out = f"out{workers}"
        res = run([sys.executable, "-m", "snapshot_cli", "create", "pipe.py:preprocess", out,
                   "--inputs-from", "pipe:items", "--workers", workers], tmp_path,
                  PYTHONPATH=path)  # fmt: skip
        assert res.returncode == 0, res.stderr
        read = f"import snapshot_cli as s; print({{str(c) for b in s.open({out!r}).loader(3) "
        read += "for c in b['click']})"
        got[workers] = run([sys.executable, "-c", read], tmp_path).stdout.strip()
    assert got == {"0": "{'mine'}", "2": "{'mine'}"}
