"""``executor="ray"`` where Ray is not installed is refused before any work: found by the run,
after the inputs were read, the snapshot's directory held a run (and a lease) that only
another executor could finish, and ``snap inspect`` called it an unfinished snapshot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import snapshot_cli as snap
from snapshot_cli.errors import OptionError
from tests.conftest import REPO

NO_RAY = "import sys; sys.modules['ray'] = None  # as where Ray is not installed\n"


def _inputs(tmp_path: Path) -> str:
    (tmp_path / "in").mkdir()
    for i in range(3):
        (tmp_path / "in" / f"{i}.txt").write_text(str(i))
    return str(tmp_path / "in" / "*.txt")


def test_python_refuses_the_ray_executor_without_ray_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # (import ray: ImportError)
    with pytest.raises(OptionError, match=r"executor='ray' needs Ray: pip install 'ray>=2.9'"):
        snap.create(lambda p: iter([{"x": 1}]), str(tmp_path / "out"), inputs=_inputs(tmp_path),
                    executor="ray")  # fmt: skip
    assert not (tmp_path / "out").exists()


def test_the_cli_refuses_the_ray_executor_without_ray_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "pipe.py").write_text("def f(path):\n    yield {'x': 1}\n")
    run = NO_RAY + "from snapshot_cli.cli import main\nmain()\n"
    done = subprocess.run(
        [sys.executable, "-c", run, "create", f"{tmp_path / 'pipe.py'}:f", str(tmp_path / "out"),
         "--input", _inputs(tmp_path), "--executor", "ray"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "snap: error: --executor ray needs Ray: pip install 'ray>=2.9' (and snap installed on "
        "the cluster's nodes)"
    )
    assert "computing" not in done.stderr and not (tmp_path / "out").exists()
