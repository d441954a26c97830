"""The incremental tests' world: a directory of numbered input files, a pipeline that can
record which inputs it ran on (and crash on one), and snapshots made from them."""

from __future__ import annotations

from pathlib import Path

import snapshot_cli as snap

PIPE = """
import os, signal
import numpy as np

def preprocess(path, *, calls=None):
    name = os.path.basename(path)
    if calls:
        with open(calls, "a") as f:
            f.write(name + "\\n")
    die_on = os.environ.get("SNAP_TEST_DIE_ON")  # not a param: it must not change the snapshot
    if die_on and name == die_on and not os.path.exists(die_on_marker(path)):
        open(die_on_marker(path), "w").close()
        os.kill(os.getpid(), signal.SIGKILL)  # a crash in the middle of the create
    with open(path) as f:
        i = int(f.read())
    for k in range(4):
        yield {"i": np.int64(i * 10 + k), "x": np.full(16, i % 7, np.float32)}

def die_on_marker(path):
    return os.path.join(os.path.dirname(os.path.dirname(path)), "died")
"""


class Tree:
    """A directory of numbered input files, a pipeline, and snapshots made from them."""

    def __init__(self, root: Path, n: int) -> None:
        self.root = root
        (root / "in").mkdir(parents=True)
        self.pipe = root / "pipe.py"
        self.pipe.write_text(PIPE)
        self.calls = root / "calls"
        for i in range(n):
            self.write(i)

    def write(self, i: int, value: int | None = None) -> None:
        (self.root / "in" / f"in-{i:05d}.txt").write_text(str(i if value is None else value))

    def remove(self, i: int) -> None:
        (self.root / "in" / f"in-{i:05d}.txt").unlink()

    def create(self, out: str = "s", **kw: object) -> snap.CreateInfo:
        params = {"calls": str(self.calls)}
        return snap.create(f"{self.pipe}:preprocess", str(self.root / out),
                           inputs=str(self.root / "in" / "*.txt"), params=params,
                           workers=0, **kw)  # fmt: skip

    def take_calls(self) -> list[str]:
        text = self.calls.read_text() if self.calls.exists() else ""
        self.calls.unlink(missing_ok=True)
        return sorted(text.split())


def content(path: str, version: int | None = None) -> list[list[int]]:
    """Each shard's records (in order): what a from-scratch create must reproduce."""
    s = snap.open(path, version=version)
    return [s.read_shard(i).column("i").to_pylist() for i in range(len(s.shards))]
