"""The benchmarks stay runnable: each script answers ``--help`` (its imports of snap's
modules hold: ``validation.py`` imported a function that had moved, and nothing ran it) and
each helper module imports. Running them is ``make bench``'s business, not the suite's."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

BENCH = REPO / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py") if '__name__ == "__main__"' in p.read_text())
HELPERS = sorted(p.stem for p in BENCH.glob("*.py") if p.name not in SCRIPTS)


def test_there_are_scripts_and_helpers() -> None:
    assert {"replay.py", "device.py", "peers.py", "validation.py"} <= set(SCRIPTS)
    assert {"_common", "cpu_pipeline"} <= set(HELPERS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_benchmark_answers_help(script: str) -> None:
    res = subprocess.run([sys.executable, str(BENCH / script), "--help"], cwd=REPO,
                         capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    assert "usage" in res.stdout.lower()


def test_each_helper_imports() -> None:
    code = f"import sys; sys.path.insert(0, {str(BENCH)!r}); " + "; ".join(
        f"import {name}" for name in HELPERS
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
