"""What is shipped to Ray is the file the local import takes, however PIPELINE spells it.

``ray_code.collect`` parsed the spec as text (``rpartition(":")``, ``os.path.isfile``,
``os.path.abspath``): ``file:///dir/prep.py:f`` and ``~/prep.py:f`` were not shipped at all
(a worker on another node found no file), and ``lnk/../prep.py:f`` shipped the directory
``abspath`` made of it, not the one the OS (and the local import) finds: a ``prep.py``
there ran instead. Each spelling is run here by the CLI, as a user runs it, first locally
(``--workers 0``), then on a real Ray cluster with the pipeline's directory moved away while
the tasks run, as it is on a node that is not this one: the records must be the local ones.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import snapshot_cli as snap

pytestmark = pytest.mark.slow


PREP = """
from helper import scale

def f(x):
    yield {"id": str(x), "x": scale(x)}
"""
MOVES = """
import os
os.chdir(os.path.dirname(os.path.abspath(__file__)))  # (so that its own files load)

from helper import scale

def f(x):
    yield {"id": str(x), "x": scale(x)}
"""
DECOY = 'def f(x):\n    yield {"id": str(x), "x": -x}\n'  # what abspath("lnk/../prep.py") named

# Run in a process of its own: the CLI, with the pipeline's directory (argv[1], if any)
# moved away while the Ray tasks run and put back after.
DRIVER = """
import os, sys
from snapshot_cli import cli
from snapshot_cli.writers import ray_executor

hide, args = sys.argv[1], sys.argv[2:]
schedule = ray_executor.RayExecutor._schedule

def away(self, *a, **k):
    os.rename(hide, hide + ".away")
    try:
        return schedule(self, *a, **k)
    finally:
        os.rename(hide + ".away", hide)

if hide:
    ray_executor.RayExecutor._schedule = away
sys.argv[:] = ["snap", *args]
cli.main()
"""


def _tree(tmp: Path) -> Path:
    """``proj/`` (the pipeline, its helper module), ``run/`` (the working directory, with
    ``lnk`` a link to ``proj/deep`` and a decoy prep.py), ``items.py`` (the inputs)."""
    proj, run = tmp / "real" / "proj", tmp / "run"
    (proj / "deep").mkdir(parents=True)
    run.mkdir()
    (proj / "prep.py").write_text(PREP)
    (proj / "moves.py").write_text(MOVES)
    (proj / "helper.py").write_text("def scale(x):\n    return 10 * x\n")
    (run / "lnk").symlink_to("../real/proj/deep")
    (run / "prep.py").write_text(DECOY)
    (tmp / "items.py").write_text("def items():\n    return [1, 2, 3, 4]\n")
    return proj


def _create(tmp: Path, spec: str, out: str, *how: str, hide: str = "", home: str = "") -> str:
    env = {**os.environ, "HOME": home or os.environ.get("HOME", "")}
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, hide, "create", spec, out,
         "--inputs-from", f"{tmp}/items.py:items", "--inputs-per-task", "1", "--quiet", *how],
        cwd=tmp / "run", env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stderr


def _records(path: Path) -> list[tuple[str, int]]:
    return sorted(
        (b["id"][i], int(b["x"][i])) for b in snap.open(str(path)).iter_batches()
        for i in range(len(b["id"]))
    )  # fmt: skip


SPELLINGS = {
    "file-url": "file://{proj}/prep.py:f",
    "home": "~/prep.py:f",
    "after-a-link": "lnk/../prep.py:f",
    "relative-from-elsewhere": "../real/proj/prep.py:f",
    "moves-on-import": "../real/proj/moves.py:f",
}


@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_every_spelling_of_a_pipeline_file_runs_its_own_code_on_ray(
    ray_cluster: str, tmp_path: Path, spelling: str
) -> None:
    proj = _tree(tmp_path)
    spec = SPELLINGS[spelling].format(proj=proj)
    home = str(proj) if spelling == "home" else ""  # (~ is the project's directory)
    _create(tmp_path, spec, str(tmp_path / "local"), "--workers", "0", home=home)
    local = _records(tmp_path / "local")
    assert local == [("1", 10), ("2", 20), ("3", 30), ("4", 40)]
    _create(tmp_path, spec, str(tmp_path / "ray"), "--executor", "ray",
            "--ray-address", ray_cluster, hide=str(proj), home=home)  # fmt: skip
    assert _records(tmp_path / "ray") == local
    fingerprints = {snap.open(str(tmp_path / d)).manifest.fingerprint for d in ("local", "ray")}
    assert len(fingerprints) == 1  # (the same code: a create of one finds the other up to date)
