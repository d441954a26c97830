"""``kill -9`` at chosen points of a create, then one more input, then the same command: the
finished tasks whose inputs did not change are kept (the dead run is adopted, see
:mod:`snapshot_cli.writers.adopt`), and the create computes exactly the others; killed again
anywhere in that create, and given one more input again, the next computes exactly what is
still missing. Each time the records are a fresh create's, the snapshot verifies and gc
leaves nothing of the runs behind. The kills come from :mod:`tests.reliability.faultfs`,
as in ``test_kills.py`` (the process that makes storage call N is killed with SIGKILL)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from tests.forks import Forks
from tests.reliability import faultfs
from tests.reliability.faultfs import OPS, Plan
from tests.reliability.test_kills import Target, points

# Tasks of two inputs in order: [0, 1], [2, 3], [4, 5], then [6] with 7 inputs and [6, 7]
# with 8; the first three keep their keys, [6] does not survive the eighth input.
PIPE = """
import os
import numpy as np
HERE = os.path.dirname(os.path.abspath(__file__))
def preprocess(i, tag=0):
    with open(os.path.join(HERE, "calls.txt"), "a") as f:
        f.write(f"{i}\\n")
    for k in range(3):
        yield {"x": np.full(1000, i, np.uint8), "i": i * 3 + k}
def items():
    with open(os.path.join(HERE, "count.txt")) as f:
        return list(range(int(f.read())))
"""
KEPT = set(range(6))  # the inputs of the tasks that keep their keys as inputs are added


@pytest.fixture(autouse=True)
def registered(forks: Forks) -> None:
    faultfs.register()
    Target.forks = forks


class Growing(Target):
    def __init__(self, tmp: Path, count: int = 6) -> None:
        super().__init__(tmp)
        self.pipe.write_text(PIPE)
        self.inputs(count)

    def inputs(self, count: int) -> None:
        (self.tmp / "count.txt").write_text(str(count))
        self.count = count
        (self.tmp / "calls.txt").unlink(missing_ok=True)

    def copy(self, tmp: Path) -> Growing:
        """This target's state (its pipeline, inputs and snapshot directory, file times
        kept) in ``tmp``: a killed create's leftovers without killing one again (a process
        each, most of a sweep's time)."""
        shutil.copytree(self.out, tmp / "out", copy_function=shutil.copy2)
        other = Growing(tmp, self.count)
        assert other.finished() == self.finished()
        return other

    def calls(self) -> list[int]:
        path = self.tmp / "calls.txt"
        return sorted(int(x) for x in path.read_text().split()) if path.exists() else []

    def killed(self, after: int) -> None:
        plan = Plan("kill", str(self.tmp / f"plan-{self.count}"), ops=OPS, after_calls=after,
                    times=1)  # fmt: skip
        self.create(plan, "0")
        assert plan.fired(), after

    def finished(self) -> set[int]:
        """The inputs of :data:`KEPT` whose task a create could keep now: in the committed
        snapshot, or in a finished task of a run (a result whose key is its task's, or one
        the run took over) whose shards are all there at their size."""
        if (self.out / "manifest.json").exists():
            return {i for i in self.records_i() if i in KEPT}
        done: set[int] = set()
        for run in (self.out / "_runs").glob("*/run.json"):
            info = json.loads(run.read_text())
            keys = info.get("keys")  # (none: a run never adopted, its results all its own)
            results = list(info.get("taken", {}).values())
            for f in (run.parent / "tasks").glob("*.json"):
                r = json.loads(f.read_text())
                if keys is None or (r["task"] < len(keys) and r.get("key") == keys[r["task"]]):
                    results.append(r)
            for r in results:
                files = [self.out / s["path"] for s in r["shards"]]
                if all(f.exists() and f.stat().st_size == s["bytes"]
                       for f, s in zip(files, r["shards"], strict=True)):  # fmt: skip
                    done |= {i // 3 for f in files for i in _values(f)}
        return done & KEPT

    def records_i(self) -> set[int]:
        return {i // 3 for i in self.records()}

    def again(self) -> dict[str, object]:
        res = self.create(None, "0")
        assert res.returncode == 0, res.stderr
        return dict(json.loads(res.stdout))

    def fresh_and_clean(self) -> None:
        assert self.records() == list(range(3 * self.count))
        assert self.verified()
        assert self.in_process("gc", self.url)[0] == 0
        assert not (self.out / "_runs").exists() or not [
            p for p in (self.out / "_runs").iterdir() if p.is_dir()
        ]
        assert self.verified()


def _values(shard: Path) -> list[int]:
    with pa.memory_map(str(shard)) as source:
        return [int(v) for v in pa.ipc.open_file(source).read_all()["i"]]


def total_calls(tmp: Path) -> int:
    probe = Growing(tmp)
    plan = Plan("none", str(tmp / "count"), ops=OPS)
    assert probe.create(plan, "0").returncode == 0
    return plan.calls()


def mid_create(tmp: Path) -> int:
    """A call to kill the first create at that leaves finished tasks and no commit."""
    total = total_calls(tmp / "count")
    for after in range(total // 3, total, 4):
        probe = Growing(tmp / f"mid-{after}")
        probe.killed(after)
        if not (probe.out / "manifest.json").exists() and len(probe.finished()) == 4:
            return after
    raise AssertionError("no kill left two tasks finished and nothing committed")


def kill_add_rerun(target: Growing, after: int) -> None:
    target.killed(after)
    target.inputs(target.count + 1)
    kept = target.finished()
    target.again()
    assert target.calls() == sorted(set(range(target.count)) - kept), (after, kept)
    target.fresh_and_clean()


def test_kill_9_at_points_of_a_create_then_an_input_added(tmp_path: Path) -> None:
    for after in points(total_calls(tmp_path / "count"), every=9):
        kill_add_rerun(Growing(tmp_path / str(after)), after)


def test_kill_9_at_points_of_the_create_that_adopted_a_run(tmp_path: Path) -> None:
    """The adopting create killed anywhere (its run.json rewrite, its tasks, its commit):
    nothing it took is lost or counted twice by the next."""
    first = mid_create(tmp_path)  # (the first create: killed with two tasks finished)
    template = Growing(tmp_path / "template")
    template.killed(first)
    template.inputs(7)
    probe = template.copy(tmp_path / "probe")
    plan = Plan("none", str(probe.tmp / "count2"), ops=OPS)
    assert probe.create(plan, "0").returncode == 0
    for after in points(plan.calls(), every=9):
        kill_add_rerun(template.copy(tmp_path / str(after)), after)


def test_the_adopting_create_says_what_it_kept(tmp_path: Path) -> None:
    target = Growing(tmp_path / "t")
    target.killed(mid_create(tmp_path))
    target.inputs(7)
    kept = target.finished()
    res = subprocess.run(
        [sys.executable, "-m", "snapshot_cli", "create", f"{target.pipe}:preprocess", target.url,
         "--inputs-from", f"{target.pipe}:items", "--workers", "0", "--inputs-per-task", "2"],
        cwd=target.tmp, env=faultfs.subprocess_env(target.tmp, None), capture_output=True,
        text=True, timeout=180, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "ended unfinished (it failed or was stopped) before its inputs changed: keeping" in (
        res.stderr
    )
    assert f"{len(kept) // 2} of 4 tasks resumed" in res.stdout  # (the summary line)
