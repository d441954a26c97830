"""A pipeline that forks and lets the child return (or raise, or yield) instead of ending it
with ``os._exit()``: the child went on in snap's code with its parent's state. Found by a
new-user probe: with workers, a snapshot of 0 records committed with exit 0 (the child's
end of the task, its records lost) or one whose every shard failed verify (parent and child
wrote the same shard files); with ``--workers 0`` the child committed a snapshot of its own
and the parent then said "moved or deleted while this create ran" eight times.

Now such a child says so and exits at its first step into snap's writing; the parent's
records are the snapshot. Real processes: the CLI, forking pipelines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import snap_subprocess
from tests.writers.test_processes import make_inputs

PIPELINE = """
import os

def returns(path):
    if os.fork() == 0:
        return  # (no os._exit: the child goes back into whoever called this)
    os.wait()
    yield {"a": int(open(path).read())}

def yields(path):
    if os.fork() == 0:
        yield {"a": -1}
        return
    os.wait()
    yield {"a": int(open(path).read())}

def raises(path):
    if os.fork() == 0:
        raise ValueError("the child's own error")
    os.wait()
    yield {"a": int(open(path).read())}
"""


@pytest.mark.parametrize("workers", ["2", "0"])
@pytest.mark.parametrize("function", ["returns", "yields", "raises"])
def test_a_forked_child_that_returns_into_snap_writes_nothing(
    tmp_path: Path, function: str, workers: str
) -> None:
    make_inputs(tmp_path / "in", 5)
    (tmp_path / "forks.py").write_text(PIPELINE)
    out = tmp_path / "snap"
    made = snap_subprocess(
        "create", f"{tmp_path / 'forks.py'}:{function}", str(out), "--input",
        str(tmp_path / "in" / "*.txt"), "--workers", workers, "--inputs-per-task", "1",
        "--json", "--quiet",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["num_records"] == 5
    said = [line for line in made.stderr.splitlines() if "forked" in line]
    assert said and all("it exits here, writing nothing" in line for line in said), made.stderr
    assert "moved or deleted" not in made.stderr
    checked = snap_subprocess("verify", str(out))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    shown = snap_subprocess("head", str(out), "-n", "5", "--json")
    assert sorted(r["a"] for r in json.loads(shown.stdout)["records"]) == [0, 1, 2, 3, 4]
