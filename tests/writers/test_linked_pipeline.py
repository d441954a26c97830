"""A pipeline file reached through a symbolic link imports the modules beside its target, as
``python link.py`` does (Python puts the target's directory on ``sys.path``): snap put the
link's directory there, and ``from helper import ...`` failed, "No module named 'helper'"
(a probe). The local executor here; Ray in ``test_ray_output.py``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import snap_subprocess


def linked_tree(root: Path) -> None:
    (root / "code").mkdir()
    (root / "code" / "helper.py").write_text("def featurize(x):\n    return len(x)\n")
    (root / "code" / "pipe.py").write_text(
        "from helper import featurize\n\ndef prep(path):\n    yield {'n': featurize(path)}\n"
    )
    (root / "links").mkdir()
    (root / "links" / "run.py").symlink_to("../code/pipe.py")  # (another name, too)
    (root / "in.txt").write_text("a")


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_linked_pipeline_imports_beside_its_target(tmp_path: Path, workers: str) -> None:
    linked_tree(tmp_path)
    done = snap_subprocess("create", "links/run.py:prep", "out", "--input", "in.txt",
                           "--workers", workers, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    shown = subprocess.run([sys.executable, "links/run.py"], cwd=tmp_path, capture_output=True,
                           text=True, check=False)  # fmt: skip
    assert shown.returncode == 0, shown.stderr  # (Python imports it so)
