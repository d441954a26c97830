"""A snapshot of many small shards: under the usual limits of open files, and its first batch.

Each memory map of a window's shards held a file descriptor (before Python 3.13), so a
snapshot of 3,000 one-record shards failed with "Too many open files" under Linux's usual
soft limit of 1,024 (this machine's is higher, so nothing noticed). The loader raises the
soft limit to the hard one; where the hard limit is too low, the error says what to change;
and its decode processes are waited on with ``poll`` (``select`` cannot watch a file
descriptor past 1,023, which a raised limit reaches). Real processes with their limits set.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from tests.conftest import snap_subprocess

SHARDS = 600


@pytest.fixture(scope="module")
def many_shards(tmp_path_factory: pytest.TempPathFactory) -> str:
    def preprocess(i: int) -> object:
        yield {"i": i, "x": np.full(16, i, np.float32)}

    out = str(tmp_path_factory.mktemp("many") / "s")
    snap.create(preprocess, out, inputs=range(SHARDS), workers=0, inputs_per_task=1)
    assert len(snap.open(out).shards) == SHARDS
    return out


def limited(soft: int, hard: int | None = None) -> object:
    """A preexec_fn that sets the child's open-files limits (hard: this process's)."""
    _, ours = resource.getrlimit(resource.RLIMIT_NOFILE)
    return lambda: resource.setrlimit(
        resource.RLIMIT_NOFILE, (soft, ours if hard is None else hard)
    )


READ = """
import os, resource, sys
import snapshot_cli as snap
s = snap.open(sys.argv[1])
everything = list(range(len(s.shards)))
assert sorted(int(i) for b in s.loader(50, drop_last=False) for i in b["i"]) == everything
# the limit is raised: descriptors past 1,023 before the decode processes' sockets are made
spare = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
batches = s.loader(50, drop_last=False, processes=2)
assert sorted(int(i) for b in batches for i in b["i"]) == everything
print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


@pytest.mark.skipif(
    resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 4096, reason="needs a hard limit >= 4096"
)
def test_many_shards_replay_under_a_low_soft_limit(many_shards: str) -> None:
    res = subprocess.run([sys.executable, "-c", READ, many_shards], preexec_fn=limited(256),
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert int(res.stdout.split()[-1]) > 1300  # raised from 256


@pytest.mark.parametrize("shuffle", ["--shuffle", "--no-shuffle"])
@pytest.mark.parametrize("limit", [(128, 0), (16, 0), (128, 110)], ids=["128", "16", "18 free"])
def test_a_low_hard_limit_replays_in_the_files_it_leaves(
    many_shards: str, shuffle: str, limit: tuple[int, int]
) -> None:
    """The loader kept 128 shards open at least (their maps too): a hard limit of 128, or 128
    with 100 descriptors held by the program, failed "too many open files" shuffled or not
    (the unshuffled pass it advised too, a probe). It keeps a quarter of what is free now."""
    soft, taken = limit
    # descriptors the command is given open (as a training program's sockets and files are)
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(taken)]
    try:
        res = snap_subprocess("bench", many_shards, "--batch-size", "50", shuffle, "--json",
                              preexec_fn=limited(soft, soft), pass_fds=held)  # fmt: skip
    finally:
        for fd in held:
            os.close(fd)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["records"] == 2 * SHARDS  # (two epochs, whole)


RUN_OUT = """
import os, resource, sys
import snapshot_cli as snap
resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
loader = snap.open(sys.argv[1]).loader(50, shuffle=sys.argv[2] == "shuffled")
held = []
try:
    while True:  # the program takes every descriptor left before the loader reads
        held.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    os.close(held.pop())  # (one left: Python's own)
try:
    for _ in loader:
        pass
except snap.StorageError as err:
    print(err)
"""


@pytest.mark.parametrize("shuffle", ["shuffled", "in order"])
def test_only_a_shuffled_pass_is_advised_to_be_unshuffled(many_shards: str, shuffle: str) -> None:
    res = subprocess.run([sys.executable, "-c", RUN_OUT, many_shards, shuffle],
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    said = res.stdout.strip()
    assert "could not be opened: too many open files (this process may have 128 open; its " \
           "hard limit is 128)" in said, said  # fmt: skip
    assert "ulimit -n" in said and "--inputs-per-task" in said, said
    shuffled = shuffle == "shuffled"
    assert ("an unshuffled pass (shuffle=False) opens the fewest" in said) is shuffled, said
    assert ("its shuffle window reads from" in said) is shuffled, said
    # (a smaller shuffle_buffer, which it advised, failed sooner: more units' files)
    assert "read with a smaller shuffle_buffer" not in said


def test_the_first_batch_of_many_small_shards_waits_for_few_of_them(many_shards: str) -> None:
    """The first window was sized in records alone (up to 2**20): a snapshot of one-record
    shards decoded every one of them before the first batch (20,000: 9.7 s). It holds the
    records of at most 256 shards now; a snapshot of larger shards keeps its first window
    (the plan of every other snapshot is unchanged)."""
    from snapshot_cli.readers.plan import EpochPlan

    for shuffle in (True, False):
        loader = snap.open(many_shards).loader(10, shuffle=shuffle, seed=3)
        first = EpochPlan(loader.blocks, loader.plan_options, 0).window(0)
        assert 10 <= len(first) <= 256  # a shard each here
        batches = iter(loader)
        assert len(next(batches)["i"]) == 10
        assert sum(len(b["i"]) for b in batches) + 10 == SHARDS  # and the epoch is whole
        loader.close()
    wide = snap.open(many_shards).loader(10, shuffle_buffer=SHARDS)
    assert wide.plan_options.first_window_rows == 256  # the ramp from 256 to the buffer


def test_a_snapshot_of_tiny_records_keeps_its_first_window(tmp_path: Path) -> None:
    """Record batches of 1,024 tiny records (the default), in shards of 40,000 records."""

    def preprocess(i: int) -> object:
        yield snap.Batch(
            i=np.arange(i * 40_000, (i + 1) * 40_000), x=np.zeros((40_000, 4), np.int8)
        )

    snap.create(preprocess, tmp_path / "s", inputs=range(40), workers=0, inputs_per_task=1)
    loader = snap.open(tmp_path / "s").loader(10)
    # 32 MiB of 16-byte records, at most 2**20: the ramp as it was
    assert loader.plan_options.first_window_rows == min(1 << 20, (32 << 20) // 16)


EXIT_SCRIPT = """
import os, sys, snapshot_cli as snap
loader = snap.open(sys.argv[1]).loader(64, seed=0)
for batch in loader:
    pass
os.kept = loader  # (as a library's module state may: freed as the modules are torn down)
"""


def test_a_loader_alive_at_interpreter_exit_closes_its_files_quietly(many_shards: str) -> None:
    """A loader that lived until the interpreter tore its modules down (a module-level loader
    in a script importing JAX and Flax) printed "Exception ignored in: Descriptor.__del__
    ... 'NoneType' object has no attribute 'close'" once per shard: ``os`` was gone."""
    res = subprocess.run([sys.executable, "-c", EXIT_SCRIPT, many_shards],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Exception ignored" not in res.stderr, res.stderr[-3000:]


SWEEP = """
import sys, snapshot_cli as snap
kept = []
try:
    for trial in range(50):  # (a sweep that keeps each trial's loader, as a list of results may)
        loader = snap.open(sys.argv[1]).loader(10, seed=trial)
        next(iter(loader))
        kept.append(loader)
except snap.StorageError as err:
    print(len(kept), err)
"""


def test_loaders_kept_alive_are_said_to_hold_the_shards(many_shards: str) -> None:
    """A sweep that kept each trial's loader ran out of open files in a later trial; the
    error said to raise the limit or write fewer shards, not that its own earlier loaders
    held them (a sweeps probe). It counts the shards this process holds open."""
    res = subprocess.run([sys.executable, "-c", SWEEP, many_shards], preexec_fn=limited(512, 512),
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    kept, said = res.stdout.split(" ", 1)
    assert int(kept) >= 1 and "too many open files" in said, said
    held = re.search(r"\. This process holds ([\d,]+) shard files open( \([^)]*\))?: a", said)
    assert held is not None, said
    assert 100 < int(held.group(1).replace(",", "")) < 512, said  # (a shard: one or two fds)
    assert "close those you are done with (a sweep's earlier trials" in said


HARD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (512, 512))
import snapshot_cli as snap
s = snap.open(sys.argv[1])
for options in ({"shuffle_buffer": 100}, {"shuffle_buffer": 100, "shuffle": False}, {}):
    ids = [int(i) for b in s.loader(64, epochs=2, **options) for i in b["id"]]
    assert sorted(ids) == sorted(list(range(len(s.shards))) * 2), options
print("ok")
"""


def test_a_read_group_holds_no_more_shards_open_than_the_readers_keep(tmp_path: Path) -> None:
    """A read thread decodes a group of a window's segments at once, and each segment's
    shard stays open until the group is done: a group of one-record shards (a unit of small
    windows: 1,300 segments, 162 a group) held past a hard limit of 512 open files, which
    the readers' own bound of 128 open shards keeps within (a probe of 5,000 shards failed
    now and then under 1,024). A group now spans at most a share of that bound."""

    def preprocess(i: int) -> object:
        yield {"id": np.int64(i)}

    out = str(tmp_path / "s")
    snap.create(preprocess, out, inputs=range(1300), workers=0, inputs_per_task=1,
                compression="none")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", HARD, out], capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


@settings(max_examples=200, deadline=None)
@given(
    shards=st.lists(st.integers(1, 5), min_size=0, max_size=40),
    size=st.integers(1, 30),
    most=st.integers(1, 8),
)
def test_groups_cover_every_segment_in_order_within_both_bounds(
    shards: list[int], size: int, most: int
) -> None:
    from snapshot_cli.readers.decode import groups
    from snapshot_cli.readers.plan import Segment

    shard_of = np.repeat(np.arange(len(shards)), shards)  # (each shard's blocks in a row)
    pairs = [(k, Segment(k, 0, 1)) for k in range(len(shard_of))]
    made = list(groups(pairs, shard_of, size, most))
    assert [p for g in made for p in g] == pairs and all(made)
    for group in made:
        assert len(group) <= size
        assert len({int(shard_of[seg.block]) for _, seg in group}) <= most
    # (each group as large as the bounds allow: the next segment would break one)
    for group, after in zip(made, made[1:], strict=False):
        spans = {int(shard_of[seg.block]) for _, seg in group}
        nxt = int(shard_of[after[0][1].block])
        assert len(group) == size or (nxt not in spans and len(spans) == most)


CYCLE_SWEEP = """
import gc, os, sys
import snapshot_cli as snap
gc.disable()  # (a numpy sweep may seldom call for a collection: none here)
s = snap.open(sys.argv[1])
class Trainer:  # README: "a trainer whose method is the map", dropped with its loader
    def __init__(self, seed):
        self.loader = s.loader(8, seed=seed, map=self.aug, shuffle_buffer=10**6)
    def aug(self, batch):
        return batch
for trial in range(12):
    trainer = Trainer(trial)
    for i, batch in enumerate(trainer.loader):
        if i == 3:
            break
    del trainer, batch
print(len(os.listdir("/proc/self/fd")))
"""


def test_a_sweep_of_loaders_only_a_cycle_keeps_survives_a_low_limit(many_shards: str) -> None:
    """A sweep whose trainer owns its loader's map (a cycle, freed by the collector only)
    ran out of descriptors at its 5th trial under ``ulimit -n 1024``: each dropped loader
    held its window's shard files and their maps (a probe). Where they run out, a collection
    frees those first. 12 trials of ~2 x 600 descriptors each under a limit of 2,048."""
    proc = subprocess.run(
        [sys.executable, "-c", CYCLE_SWEEP, many_shards], capture_output=True, text=True,
        timeout=300, check=False, preexec_fn=limited(2048, 2048),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout.strip()) < 2048
