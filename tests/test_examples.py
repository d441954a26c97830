"""The training examples run as a user would run them, and learn."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


@pytest.mark.parametrize("script", ["train_torch.py", "train_jax.py"])
def test_training_example_learns(script: str, tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, str(REPO / "examples" / script), str(tmp_path / "train")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    accuracies = [float(a) for a in re.findall(r"train accuracy ([0-9.]+)", res.stdout)]
    assert len(accuracies) == 4
    assert accuracies[-1] > 0.9  # 4 classes: chance is 0.25
    assert accuracies[-1] >= accuracies[0]
    assert (tmp_path / "train" / "snapshot" / "manifest.json").exists()
