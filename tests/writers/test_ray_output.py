"""What the pipeline prints in a Ray task reaches the command's stderr, whole: through Ray's
log forwarding the last tasks' lines were lost as the run ended (2 and 9 of 10 in a probe's
runs), a print just before the pipeline raised too, and each line came prefixed
``(task_outcome pid=N)`` and coloured, repeated lines merged. A real local Ray cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

PIPELINE = """
import os, warnings

def noisy(path):
    print("hello from", os.path.basename(path))
    print("the same line")  # (Ray merged repeated lines: "[repeated 9x across cluster]")
    warnings.warn("careful with " + os.path.basename(path))
    yield {"n": 1}

def fails(path):
    print("DIAG: about to fail on", os.path.basename(path), flush=True)
    raise RuntimeError("fail")
"""


def create(tmp_path: Path, function: str, ray_cluster: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    args = [sys.executable, "-m", "snapshot_cli", "create", f"pipe.py:{function}", "out",
            "--input", "in/*.txt", "--executor", "ray", "--ray-address", ray_cluster]  # fmt: skip
    return subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def test_every_line_a_ray_task_prints_is_said_once(tmp_path: Path, ray_cluster: str) -> None:
    (tmp_path / "pipe.py").write_text(PIPELINE)
    (tmp_path / "in").mkdir()
    for i in range(10):
        (tmp_path / "in" / f"f{i}.txt").write_text(str(i))
    done = create(tmp_path, "noisy", ray_cluster)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert sorted(line for line in lines if line.startswith("hello from")) == [
        f"hello from f{i}.txt" for i in range(10)
    ], done.stderr
    assert lines.count("the same line") == 10, done.stderr
    warned = [line for line in lines if "UserWarning: careful with" in line]
    assert len(warned) == 10, done.stderr
    assert all(line.startswith(str(tmp_path / "pipe.py")) for line in warned), warned
    assert "task_outcome pid=" not in done.stderr and "\x1b[" not in done.stderr


def test_a_print_before_the_pipeline_raised_is_said(tmp_path: Path, ray_cluster: str) -> None:
    (tmp_path / "pipe.py").write_text(PIPELINE)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "f1.txt").write_text("1")
    done = create(tmp_path, "fails", ray_cluster)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert "DIAG: about to fail on f1.txt" in lines, done.stderr
    assert lines.index("DIAG: about to fail on f1.txt") < next(
        i for i, line in enumerate(lines) if line.startswith("snap: error:")
    )


def test_a_linked_pipeline_ships_its_target_s_directory(tmp_path: Path, ray_cluster: str) -> None:
    """A pipeline file reached through a link: its target's directory is shipped, as the
    local import takes its modules from there (``from helper import ...`` failed on Ray as
    locally: "No module named 'helper'")."""
    from tests.writers.test_linked_pipeline import linked_tree

    linked_tree(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [sys.executable, "-m", "snapshot_cli", "create", "links/run.py:prep", "out",
            "--input", "in.txt", "--executor", "ray", "--ray-address", ray_cluster]  # fmt: skip
    done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
