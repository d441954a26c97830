"""``rank="auto"`` / ``world_size="auto"`` from the environment: every launcher's pair of
variables is taken when both are integers with 0 <= rank < world_size, and anything else
set is an OptionError naming the variables (a job whose ranks all read the whole snapshot,
or none of it, would not say so). Nothing set: rank 0 of 1."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.errors import OptionError
from snapshot_cli.readers import ranks

ALL_VARS = [v for pair in ranks._ENV for v in pair]


@contextlib.contextmanager
def launched_with(env: dict[str, str]) -> Iterator[None]:
    """Every launcher's variable unset but ``env`` (for Hypothesis: no monkeypatch), then
    put back as it was."""
    saved = {v: os.environ.pop(v, None) for v in ALL_VARS}
    os.environ.update(env)
    try:
        yield
    finally:
        for v in ALL_VARS:
            os.environ.pop(v, None)
            if saved[v] is not None:
                os.environ[v] = saved[v]  # type: ignore[assignment]


def numbers(tmp_path: Path, n: int, monkeypatch: pytest.MonkeyPatch) -> snap.Snapshot:
    """A snapshot of records 0..n-1, in a process where no launcher's variable is set."""
    snap.create(lambda: ({"i": i} for i in range(n)), str(tmp_path / "s"), workers=0)
    for v in ALL_VARS:
        monkeypatch.delenv(v, raising=False)
    return snap.open(tmp_path / "s")


value = st.one_of(
    st.integers(-3, 9).map(str),
    st.sampled_from(["", "a", "1.5", "0x2", " 2 ", "१"]),  # (int() takes " 2 " and "१")
)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), pair=st.sampled_from(ranks._ENV))
def test_a_launchers_variables_are_taken_or_refused_by_name(
    data: st.DataObject, pair: tuple[str, str]
) -> None:
    rank_var, size_var = pair
    env = {v: data.draw(value, label=v) for v in pair if data.draw(st.booleans(), label=f"set {v}")}
    with launched_with(env):
        try:
            got = ranks.detect()
        except OptionError as err:
            assert env and all(f"{v}=" in str(err) for v in env), (env, str(err))
            assert "give rank= and world_size=" in str(err)
            if len(env) == 2:
                try:
                    r, n = int(env[rank_var]), int(env[size_var])
                except ValueError:
                    return  # not integers: refused
                assert not 0 <= r < n  # integers out of range: refused
            else:
                assert rank_var == "RANK"  # one of torchrun's pair alone
            return
        if len(env) == 2:
            r, n = int(env[rank_var]), int(env[size_var])
            assert got == (r, n, rank_var) and 0 <= r < n
        else:
            assert got == (0, 1, "default") and (not env or rank_var != "RANK")


def test_the_loader_and_the_torch_dataset_say_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from snapshot_cli.readers.torch import SnapshotDataset

    s = numbers(tmp_path, 20, monkeypatch)
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "2")
    for make in (lambda: s.loader(4, rank="auto", world_size="auto"),
                 lambda: SnapshotDataset(s, batch_size=4)):  # fmt: skip
        with pytest.raises(OptionError, match=r"'auto' reads RANK='5' and WORLD_SIZE='2'"):
            make()
    monkeypatch.delenv("WORLD_SIZE")
    with pytest.raises(OptionError, match=r"found RANK='5' in the environment but no WORLD_SIZE"):
        s.loader(4, rank="auto", world_size=8)
    # a launcher's environment half set up when the dataset is made (Lightning's DDP child
    # has WORLD_SIZE before torch.distributed): said when it is iterated, if still so
    dataset = SnapshotDataset(s, batch_size=4)
    with pytest.raises(OptionError, match=r"found RANK='5' in the environment but no WORLD_SIZE"):
        next(iter(dataset))
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(OptionError, match=r"'auto' reads RANK='5' and WORLD_SIZE='2'"):
        next(iter(dataset))
    monkeypatch.setenv("RANK", "1")  # the launcher done: the dataset made before takes it
    assert (dataset.rank, dataset.world_size) == (1, 2)
    half = [int(i) for batch in dataset for i in batch["i"]]
    assert half == [int(i) for batch in s.loader(4, rank=1, world_size=2) for i in batch["i"]]
    assert len(s.loader(4, rank=1, world_size=2)) == 3  # given outright: no environment read


def test_a_slurm_batch_script_is_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """``sbatch --ntasks=4`` running ``python train.py`` itself (no ``srun``): the script's
    environment has SLURM_PROCID=0 and SLURM_NTASKS=4 but no step, and it is one process;
    reading it as rank 0 of 4 would train on a quarter of the snapshot without a word."""
    for v in ALL_VARS:
        monkeypatch.delenv(v, raising=False)
    batch_script = {"SLURM_JOB_ID": "77", "SLURM_PROCID": "0", "SLURM_NTASKS": "4",
                    "SLURM_NPROCS": "4", "SLURM_LOCALID": "0"}  # fmt: skip
    for name, text in batch_script.items():
        monkeypatch.setenv(name, text)
    assert ranks.detect() == (0, 1, "default")
    # the same job's tasks under `srun`: each has its step's size
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "4")
    assert ranks.detect() == (3, 4, "SLURM_PROCID")


@settings(max_examples=200, deadline=None)
@given(
    launched=st.tuples(st.integers(1, 5), st.data()),
    rank=st.sampled_from(["auto", 0, 1, 2, 3]),
    world_size=st.sampled_from(["auto", 1, 2, 3, 4]),
)
def test_auto_for_one_of_the_pair_reads_both_or_says_why_not(
    launched: tuple[int, st.DataObject], rank: object, world_size: object
) -> None:
    """``world_size="auto"`` alone had every rank read rank 0's part (its rank stayed 0), and
    ``rank="auto"`` alone rank 0 read the whole epoch and the others fail with "rank must be
    in [0, world_size=1)". Now "auto" for either reads both; the other left at its default
    is the one read, and given otherwise must agree, else an error naming both."""
    size, data = launched
    found = data.draw(st.integers(0, size - 1), label="RANK")
    with launched_with({"RANK": str(found), "WORLD_SIZE": str(size)}):
        if "auto" not in (rank, world_size):
            assert ranks.auto_pair(rank, world_size) == (rank, world_size)
            return
        agree = all(
            given in ("auto", default, read)
            for given, default, read in ((rank, 0, found), (world_size, 1, size))
        )
        if agree:
            assert ranks.resolve(rank, world_size) == (found, size)
        else:
            with pytest.raises(OptionError) as caught:
                ranks.resolve(rank, world_size)
            said = str(caught.value)
            assert said.startswith(f"rank={rank!r}, world_size={world_size!r}: 'auto' read ")
            assert f"rank {found} of {size} (from RANK and WORLD_SIZE)" in said
            assert "give both 'auto', or both as integers" in said


@pytest.mark.parametrize("given", [{"world_size": "auto"}, {"rank": "auto"}])
def test_the_ranks_of_a_job_given_auto_once_read_each_record_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: dict[str, Any]
) -> None:
    s = numbers(tmp_path, 36, monkeypatch)
    monkeypatch.setenv("WORLD_SIZE", "2")
    read = []
    for r in (0, 1):
        monkeypatch.setenv("RANK", str(r))
        read += [int(i) for b in s.loader(4, seed=0, **given) for i in b["i"]]
    assert sorted(read) == list(range(36))  # (each rank its half: it was both rank 0's)
