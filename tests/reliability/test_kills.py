"""``kill -9`` at chosen points of create (lease, run state, shards, task results, the commit,
the tidying after it) and of gc: the process that makes storage call N is killed with SIGKILL
by :mod:`tests.reliability.faultfs`, so every phase is hit, not only the ones a timer finds.
After each kill: nothing half-committed is visible (no manifest, or a whole one that
verifies), and the same command run again finishes with exactly the records of a run that
was never killed; gc afterwards leaves a snapshot that verifies."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

import snapshot_cli as snap
from snapshot_cli.cli import cli
from tests.forks import Forks
from tests.reliability import faultfs
from tests.reliability.faultfs import OPS, Plan

PIPE = """
import numpy as np
def preprocess(i, tag=0):
    for k in range(3):
        yield {"x": np.full(1000, i, np.uint8), "i": i * 3 + k}
def items():
    return list(range(6))
"""
RECORDS = list(range(18))


@pytest.fixture(autouse=True)
def registered(forks: Forks) -> None:
    faultfs.register()
    Target.forks = forks


class Target:
    forks: Forks  # (set by the fixture above)

    def __init__(self, tmp: Path) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        self.tmp = tmp
        self.pipe = tmp / "pipe.py"
        self.pipe.write_text(PIPE)
        self.out = tmp / "out"
        self.url = faultfs.url(self.out)

    def copy(self, tmp: Path) -> Target:
        """This target's snapshot directory (file times kept) in a new target at ``tmp``."""
        shutil.copytree(self.out, tmp / "out", copy_function=shutil.copy2)
        return type(self)(tmp)

    def snap(self, plan: Plan | None, *args: str) -> subprocess.CompletedProcess[str]:
        """``python -m snapshot_cli *args``, forked from the session's server (:mod:`tests.forks`):
        a process of its own, killed as one, without an interpreter's imports each time."""
        return self.forks.run(list(args), self.tmp, faultfs.subprocess_env(self.tmp, plan), 180)

    def create(
        self, plan: Plan | None, workers: str, *extra: str
    ) -> subprocess.CompletedProcess[str]:
        return self.snap(plan, "create", f"{self.pipe}:preprocess", self.url, "--inputs-from",
                         f"{self.pipe}:items", "--workers", workers, "--inputs-per-task", "2",
                         "--json", *extra)  # fmt: skip

    def in_process(self, *args: str) -> tuple[int, str]:
        """A command that is not killed, run here: it checks the same things as in a process
        of its own, without an interpreter's start-up (most of these tests' time)."""
        res = CliRunner().invoke(cli, list(args), catch_exceptions=False)
        return res.exit_code, res.stdout

    def create_here(self, *extra: str) -> None:
        """The snapshot a test starts from, made here (workers=0)."""
        code, _ = self.in_process("create", f"{self.pipe}:preprocess", self.url, "--inputs-from",
                                  f"{self.pipe}:items", "--workers", "0", "--inputs-per-task",
                                  "2", "--quiet", *extra)  # fmt: skip
        assert code == 0

    def records(self) -> list[int]:
        return sorted(int(i) for b in snap.open(self.url).loader(4) for i in b["i"])

    def verified(self) -> bool:
        code, stdout = self.in_process("verify", self.url, "--json")
        return code == 0 and json.loads(stdout)["ok"]


# Which calls a sweep kills at: every ``every``-th from an offset drawn for each run, so that
# runs of the suite together cover every call while each one stays within its time. A
# failure names the call it killed; SNAP_KILL_OFFSET=k fixes the offset.
OFFSET = int(os.environ.get("SNAP_KILL_OFFSET", random.randrange(1 << 16)))


def points(total: int, every: int) -> list[int]:
    """Every ``every``-th call from the run's offset, the first, and the last few (the commit
    and what follows it)."""
    start = OFFSET % every
    return sorted({0} | set(range(start, total, every)) | set(range(max(0, total - 4), total)))


def kill_then_resume(target: Target, after: int, workers: str) -> None:
    plan = Plan("kill", str(target.tmp / "plan"), ops=OPS, after_calls=after, times=1)
    killed = target.create(plan, workers)
    assert plan.fired(), after
    victim = plan.fired()[0]["pid"]
    assert killed.returncode != 0 or workers != "0", (after, killed.stderr)
    if workers == "0":
        assert killed.returncode == -signal.SIGKILL
    else:  # the main process, or one worker, which the main process answers for in one line
        assert "Traceback" not in killed.stderr, killed.stderr
    if (target.out / "manifest.json").exists():  # killed after the commit: whole and right
        assert target.records() == RECORDS and target.verified(), (after, victim)
    again = target.create(None, workers)
    assert again.returncode == 0, (after, again.stderr)
    assert target.records() == RECORDS
    assert target.in_process("gc", target.url)[0] == 0
    assert target.verified()
    assert not [p for p in target.out.rglob("*") if p.name.endswith(".tmp")]


def count(target: Target, workers: str, *extra: str) -> int:
    plan = Plan("none", str(target.tmp / "count"), ops=OPS)
    assert target.create(plan, workers, *extra).returncode == 0
    return plan.calls()


def test_kill_9_at_points_of_create_with_workers(tmp_path: Path) -> None:
    total = count(Target(tmp_path / "count"), "2")
    for after in points(total, every=10):
        kill_then_resume(Target(tmp_path / str(after)), after, "2")


@pytest.mark.slow
def test_kill_9_at_every_sixth_call_of_create(tmp_path: Path) -> None:
    """In process (workers=0), at every sixth call: denser than the test with workers above
    (every 10th), which a workers=0 variant of it repeated at a subset of these points. (Every
    fourth took 45 s of the suite's 20 minutes; the run's offset moves the points.)"""
    total = count(Target(tmp_path / "count"), "0")
    for after in points(total, every=6):
        kill_then_resume(Target(tmp_path / str(after)), after, "0")


def test_kill_9_at_points_of_an_overwrite_and_its_commit(tmp_path: Path) -> None:
    """--overwrite with other params replaces a committed snapshot: killed anywhere, readers
    see the old snapshot or the new one, whole."""
    probe = Target(tmp_path / "count")
    probe.create_here()
    total = count(probe, "0", "--param", "tag=1", "--overwrite")
    for after in points(total, every=12):
        target = Target(tmp_path / str(after))
        target.create_here()
        plan = Plan("kill", str(target.tmp / "plan"), ops=OPS, after_calls=after, times=1)
        killed = target.create(plan, "0", "--param", "tag=1", "--overwrite")
        assert killed.returncode == -signal.SIGKILL, (after, killed.stderr)
        params = snap.open(target.url).manifest.pipeline["params"]
        assert params in ({}, {"tag": 1}), params
        assert target.records() == RECORDS and target.verified(), after
        again = target.create(None, "0", "--param", "tag=1", "--overwrite")
        assert again.returncode == 0, again.stderr
        assert snap.open(target.url).manifest.pipeline["params"] == {"tag": 1}
        assert target.records() == RECORDS and target.verified()


def test_kill_9_at_points_of_gc(tmp_path: Path) -> None:
    def with_garbage(target: Target) -> None:
        target.create_here()
        crash = Plan("kill", str(target.tmp / "crash"), ops=("write",), after_calls=17, times=1)
        assert target.create(crash, "0", "--param", "tag=1", "--overwrite").returncode != 0

    template = Target(tmp_path / "template")  # (copied for each point: the killed create
    with_garbage(template)  # was half of this test's time)
    probe = template.copy(tmp_path / "count")
    counting = Plan("none", str(probe.tmp / "count"), ops=OPS)
    res = probe.snap(counting, "gc", probe.url, "--json")
    assert res.returncode == 0 and {g["kind"] for g in json.loads(res.stdout)["removed"]} >= {
        "run", "shard"
    }  # fmt: skip
    for after in points(counting.calls(), every=12):
        target = template.copy(tmp_path / str(after))
        plan = Plan("kill", str(target.tmp / "plan"), ops=OPS, after_calls=after, times=1)
        assert target.snap(plan, "gc", target.url).returncode == -signal.SIGKILL
        assert target.records() == RECORDS and target.verified(), after
        assert target.in_process("gc", target.url)[0] == 0
        dry = json.loads(target.in_process("gc", target.url, "--dry-run", "--json")[1])
        assert dry["would_remove"] == [], (after, dry)
        assert target.records() == RECORDS and target.verified()
