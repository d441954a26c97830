"""SnapshotDataset epochs in a torch DataLoader: every iteration is a new epoch, even when
each one starts new worker processes from the parent's copy of the dataset (which has not
seen the earlier epochs), and ``set_epoch`` still decides when it is called."""

from __future__ import annotations

import copy
import gc
import itertools
import os
import pickle
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

import snapshot_cli as snap
from snapshot_cli.errors import OptionError
from snapshot_cli.readers import epochs as epochs_mod
from snapshot_cli.readers.loader import Loader
from snapshot_cli.readers.options import LoaderOptions
from snapshot_cli.readers.torch import SnapshotDataset
from tests.readers.conftest import numbered_snapshot

RECORDS = 120
BATCH = 8
SEED = 4


@pytest.fixture(scope="module")
def snapshot_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    record = '{"label": np.int64(n), "x": np.full(3, k, np.float32)}'
    return numbered_snapshot(tmp_path_factory.mktemp("epochs"), RECORDS, record, "2KiB")


def _labels(batches: Iterable[Any]) -> list[int]:
    return [int(x) for b in batches for x in np.asarray(b["label"])]


def _expected(url: str, epoch: int, workers: int = 2) -> list[int]:
    """What a DataLoader with ``workers`` workers yields in ``epoch``, from plain loaders.

    Worker w reads its share of the rank's batches (the plan's worker split, a loader option
    only SnapshotDataset sets); the DataLoader takes one batch from each worker in turn, from
    those not done yet (the first workers may have a batch fewer).
    """
    parts = []
    for w in range(workers):
        options = LoaderOptions(seed=SEED, worker_split=(w, workers))
        loader = Loader(snap.open(url), BATCH, options)
        loader.set_epoch(epoch)
        parts.append([np.asarray(b["label"]).tolist() for b in loader])
    turns = itertools.zip_longest(*parts)
    return [int(x) for turn in turns for batch in turn if batch is not None for x in batch]


@pytest.fixture(scope="module")
def expected(snapshot_url: str) -> dict[int, list[int]]:
    return {e: _expected(snapshot_url, e) for e in (0, 1, 2, 5, 6)}


def _dataloader(dataset: Any, **options: Any) -> Any:
    return torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2, **options)


def _check_epochs(orders: list[list[int]], expected: dict[int, list[int]]) -> None:
    for epoch, order in enumerate(orders):
        assert sorted(order) == list(range(RECORDS))  # complete, and disjoint across workers
        assert order == expected[epoch]  # what set_epoch(epoch) gives
    assert len({tuple(o) for o in orders}) == len(orders)  # a fresh shuffle every epoch


@pytest.mark.parametrize("persistent", [False, True], ids=["new-workers", "persistent"])
def test_each_dataloader_iteration_is_the_next_epoch(
    snapshot_url: str, expected: dict[int, list[int]], persistent: bool
) -> None:
    dataset = SnapshotDataset(snapshot_url, batch_size=BATCH, seed=SEED)
    dl = _dataloader(dataset, persistent_workers=persistent)
    _check_epochs([_labels(dl) for _ in range(3)], expected)


def test_a_new_dataloader_with_the_same_generator_seed_is_the_next_epoch(
    snapshot_url: str, expected: dict[int, list[int]]
) -> None:
    # every iteration then has the same base seed: the workers' own counts tell them apart
    dataset = SnapshotDataset(snapshot_url, batch_size=BATCH, seed=SEED)
    orders = []
    for _ in range(3):
        dl = _dataloader(dataset, generator=torch.Generator().manual_seed(0))
        orders.append(_labels(dl))
    _check_epochs(orders, expected)


@pytest.mark.slow
def test_each_iteration_is_the_next_epoch_with_spawned_workers(
    snapshot_url: str, expected: dict[int, list[int]]
) -> None:
    # spawn pickles the dataset for each worker: the copy names the parent's counter. Two
    # epochs, not three: each spawned worker imports torch again (seconds per epoch).
    dataset = SnapshotDataset(snapshot_url, batch_size=BATCH, seed=SEED)
    dl = _dataloader(dataset, multiprocessing_context="spawn")
    _check_epochs([_labels(dl) for _ in range(2)], expected)


def test_explicit_set_epoch_decides_and_later_iterations_count_on(
    snapshot_url: str, expected: dict[int, list[int]]
) -> None:
    dataset = SnapshotDataset(snapshot_url, batch_size=BATCH, seed=SEED)
    dl = _dataloader(dataset)
    dataset.set_epoch(5)
    assert _labels(dl) == expected[5]
    assert _labels(dl) == expected[6]  # no set_epoch: the next one
    dataset.set_epoch(1)
    assert _labels(dl) == expected[1]
    dataset.set_epoch(1)
    assert _labels(dl) == expected[1]  # asked for again: the same order again


def test_set_epoch_reaches_persistent_workers(
    snapshot_url: str, expected: dict[int, list[int]]
) -> None:
    dataset = SnapshotDataset(snapshot_url, batch_size=BATCH, seed=SEED)
    dl = _dataloader(dataset, persistent_workers=True)
    assert _labels(dl) == expected[0]
    dataset.set_epoch(5)
    assert _labels(dl) == expected[5]
    dataset.set_epoch(2)
    assert _labels(dl) == expected[2]


def test_a_break_ends_the_epoch(snapshot_url: str, expected: dict[int, list[int]]) -> None:
    # a DataLoader iteration cannot be resumed (workers have read ahead): the next is new
    dataset = SnapshotDataset(snapshot_url, batch_size=BATCH, seed=SEED)
    dl = _dataloader(dataset)
    for batch in dl:
        assert int(batch["label"][0]) == expected[0][0]
        break
    assert _labels(dl) == expected[1]


def test_a_break_ends_the_epoch_without_workers_too(snapshot_url: str) -> None:
    """With ``num_workers=0`` the iteration after a break went on with the rest of the
    epoch (the loader's own way), where with workers it is the next epoch, as README says:
    the same training loop saw other batches with and without workers."""
    dataset = SnapshotDataset(snapshot_url, batch_size=BATCH, seed=SEED)
    dl = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=0)
    plain = snap.open(snapshot_url).loader(BATCH, seed=SEED)
    for epoch in range(3):
        plain.set_epoch(epoch)
        expected = [np.asarray(b["label"]).tolist() for b in plain]
        for i, batch in enumerate(dl):
            assert batch["label"].tolist() == expected[i]
            if i == 2 + epoch:  # a loop that takes so many steps an epoch
                break
    dataset.set_epoch(1)  # and set_epoch still decides
    plain.set_epoch(1)
    assert _labels(dl) == _labels(plain)


def test_main_process_passes_then_workers(snapshot_url: str) -> None:
    dataset = SnapshotDataset(snapshot_url, batch_size=BATCH, seed=SEED)
    first, second = _labels(dataset), _labels(dataset)  # num_workers=0: the loader counts
    whole = snap.open(snapshot_url).loader(BATCH, seed=SEED, epochs=2)
    assert first + second == _labels(whole)
    # the forked workers inherit the parent's loader (for the whole snapshot): not reused
    assert sorted(_labels(_dataloader(dataset))) == list(range(RECORDS))


def test_the_counter_directory_goes_with_the_dataset(snapshot_url: str) -> None:
    dataset = SnapshotDataset(snapshot_url, batch_size=BATCH, seed=SEED)
    counter_dir = dataset._epochs.dir
    assert os.path.isdir(counter_dir)
    dl = _dataloader(dataset)
    assert len(_labels(dl)) == RECORDS
    assert os.path.isdir(counter_dir)  # the workers' copies, gone now, did not remove it
    del dl, dataset
    gc.collect()
    assert not os.path.exists(counter_dir)


def test_bad_epoch(snapshot_url: str) -> None:
    dataset = SnapshotDataset(snapshot_url, batch_size=BATCH)
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(OptionError, match="epoch must be an integer >= 0"):
            dataset.set_epoch(bad)  # type: ignore[arg-type]
    dataset.set_epoch(np.int64(3))  # type: ignore[arg-type]
    assert dataset.epoch == 3


# --- the counter and the fallback, in this process ----------------------------------------


def test_counter_numbers_iterations_by_base_seed_and_repeat() -> None:
    counter = epochs_mod.EpochCounter()
    # iteration 0: base seed 100, two workers; iteration 1: base seed 7
    assert [counter.register(100, 0)[0], counter.register(100, 1)[0]] == [0, 0]
    assert [counter.register(7, 1)[0], counter.register(7, 0)[0]] == [1, 1]
    # persistent workers keep their base seed: each pass of a worker is the next
    assert [counter.register(7, 0)[0], counter.register(7, 1)[0]] == [2, 2]
    counter.restart(10, process=os.getppid())  # (the workers' parent: this one's here)
    assert [counter.register(7, 1)[0], counter.register(7, 0)[0]] == [10, 10]
    assert counter.register(55, 0)[0] == 11


def test_each_process_iterating_counts_its_own_epochs() -> None:
    """The trials of a sweep given one dataset pickled counted each other's iterations (the
    second trial's first epoch was 2, the parent's next 6): the order of a seed hung on
    which trial ran first."""
    counter = epochs_mod.EpochCounter()
    one, two = 2**22 + 1, 2**22 + 2  # (pids no process has here)

    def epoch(seed: int, process: int) -> int:
        return counter.register(seed, 0, process=process)[0]

    assert [epoch(5, one), epoch(6, one)] == [0, 1]
    assert [epoch(5, two), epoch(8, two)] == [0, 1]
    assert counter.register(9, 0, epoch=4, process=2**22 + 3)[0] == 4  # its copy's epoch first
    counter.restart(7, process=two)
    assert [epoch(1, two), epoch(3, one)] == [7, 2]


def test_a_copy_in_the_owners_process_counts_for_itself() -> None:
    counter = epochs_mod.EpochCounter()
    copied = copy.deepcopy(counter)
    assert copied.dir != counter.dir and os.path.isdir(copied.dir)
    assert counter.register(1, 0)[0] == 0 and counter.register(2, 0)[0] == 1
    assert copied.register(1, 0)[0] == 0
    elsewhere = pickle.loads(pickle.dumps(counter))  # as a spawned worker has it...
    assert elsewhere.dir != counter.dir  # ...but here, in the owner: a counter of its own
    gone = copied.dir
    del copied
    gc.collect()
    assert not os.path.exists(gone) and os.path.isdir(counter.dir)


def test_counter_forgets_old_iterations() -> None:
    counter = epochs_mod.EpochCounter()
    n = counter.KEEP + 10
    assert [counter.register(seed, 0)[0] for seed in range(n)] == list(range(n))
    assert counter.register(n - 1, 1)[0] == n - 1  # a late worker of a recent iteration


def test_without_a_counter_a_worker_warns_once(
    snapshot_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(epochs_mod, "fcntl", None)
    monkeypatch.setattr(epochs_mod, "_warned_cannot_count", False)
    dataset = SnapshotDataset(snapshot_url, batch_size=BATCH, seed=SEED)
    assert dataset._epochs is None
    info = SimpleNamespace(id=0, num_workers=2, seed=9)  # as worker 0 of a DataLoader sees
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: info)
    with pytest.warns(UserWarning, match=r"set_epoch\(epoch\).*persistent_workers=True"):
        _labels(dataset)
    _labels(dataset)  # once: filterwarnings=error would fail this


def test_explicit_epochs_do_not_warn_without_a_counter(
    snapshot_url: str, monkeypatch: pytest.MonkeyPatch, expected: dict[int, list[int]]
) -> None:
    monkeypatch.setattr(epochs_mod, "fcntl", None)
    monkeypatch.setattr(epochs_mod, "_warned_cannot_count", False)
    dataset = SnapshotDataset(snapshot_url, batch_size=BATCH, seed=SEED)
    orders = []
    for epoch in range(2):
        dataset.set_epoch(epoch)
        orders.append(_labels(_dataloader(dataset)))
    assert orders == [expected[0], expected[1]]


def test_each_worker_takes_its_share_of_the_auto_buffer_and_cores(snapshot_url: str) -> None:
    """A DataLoader worker's loader (here part 1 of 4, as for 4 workers) gets a quarter of the
    default shuffle buffer and of the read threads; options given stay as given, and the
    main process's loader (num_workers=0) keeps the whole."""
    cores = os.cpu_count() or 1
    dataset = SnapshotDataset(snapshot_url, batch_size=BATCH, seed=SEED)
    worker = dataset._part_loader(1, 4)
    assert worker.options.shuffle_buffer == "64MiB"
    assert worker.stats()["settings"]["parallel_reads"] == max(1, cores // 4)
    main = dataset._part_loader(0, 1)
    assert main.options.shuffle_buffer == "auto" and main.options.num_parallel_reads == "auto"
    given = SnapshotDataset(snapshot_url, batch_size=BATCH, shuffle_buffer=50,
                            num_parallel_reads=3)._part_loader(1, 4)  # fmt: skip
    assert given.options.shuffle_buffer == 50 and given.options.num_parallel_reads == 3
    ordered = SnapshotDataset(snapshot_url, batch_size=BATCH, shuffle=False)._part_loader(1, 4)
    assert ordered.options.shuffle_buffer == "auto"  # in order, windows are small anyway
    # the global order's windows are every part's share already, whatever the parts
    global_order = SnapshotDataset(snapshot_url, global_batch_size=BATCH, seed=SEED)
    assert global_order._part_loader(1, 4).options.shuffle_buffer == "auto"


def _trial(dataset: Any) -> list[list[int]]:
    """A sweep's trial given the dataset pickled: two epochs of a DataLoader over it. Its
    workers fork, as in a Ray Tune trial (in a process spawned by multiprocessing, spawn
    is the default, and each worker would import torch again: ~20 CPU-s of the test;
    spawned workers have a test of their own above)."""
    dl = _dataloader(dataset, multiprocessing_context="fork")
    return [_labels(dl), _labels(dl)]


@pytest.mark.slow
def test_trials_given_one_dataset_each_count_their_own_epochs(
    snapshot_url: str, expected: dict[int, list[int]]
) -> None:
    """One ``SnapshotDataset`` sent to two trials, each a process of its own (as Ray
    Tune's ``with_parameters`` does): the second trial's epochs were 2 and 3 and the
    parent's next 4, so a seed's order hung on which trial ran first (two trials show it:
    each is a spawned process importing torch, ~4 CPU-s)."""
    import concurrent.futures
    import multiprocessing

    dataset = SnapshotDataset(snapshot_url, batch_size=BATCH, seed=SEED)
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=spawn, max_tasks_per_child=1) as pool:
        trials = [pool.submit(_trial, dataset).result() for _ in range(2)]
    for orders in trials:
        assert orders == [expected[0], expected[1]]
    assert _labels(_dataloader(dataset)) == expected[0]  # the parent's own first epoch


def _batches(url: str, epoch: int, workers: int = 2) -> list[tuple[int, ...]]:
    """The batches (as label tuples) the ``workers`` of a DataLoader yield in ``epoch``."""
    out = []
    for w in range(workers):
        loader = Loader(snap.open(url), BATCH, LoaderOptions(seed=SEED, worker_split=(w, workers)))
        loader.set_epoch(epoch)
        out.extend(tuple(np.asarray(b["label"]).tolist()) for b in loader)
    return sorted(out)


@pytest.mark.parametrize("persistent", [False, True], ids=["new-workers", "persistent"])
def test_an_iteration_of_several_epochs_is_followed_by_the_next_ones(
    snapshot_url: str, persistent: bool
) -> None:
    """``epochs=2``: each DataLoader iteration runs two epochs, and the next starts two
    later, as without workers; with workers the next started one later, replaying the
    last epoch of the one before (found by a probe)."""
    dataset = SnapshotDataset(snapshot_url, batch_size=BATCH, seed=SEED, epochs=2)
    dl = _dataloader(dataset, persistent_workers=persistent)
    for first in (0, 2, 4):
        got = sorted(tuple(np.asarray(b["label"]).tolist()) for b in dl)
        want = sorted(_batches(snapshot_url, first) + _batches(snapshot_url, first + 1))
        assert got == want, first
    dataset.set_epoch(1)  # (set_epoch: the next iteration starts there)
    got = sorted(tuple(np.asarray(b["label"]).tolist()) for b in dl)
    assert got == sorted(_batches(snapshot_url, 1) + _batches(snapshot_url, 2))


def test_two_dataloaders_without_workers_over_one_dataset_say_what_to_do(
    snapshot_url: str,
) -> None:
    """A second DataLoader over the same dataset (a metrics pass inside the training loop)
    superseded the first's pass, which said "this pass over the loader was superseded ...
    iterate the loader again" of a loader the user never made (found by a probe)."""
    from snapshot_cli.readers.torch_workers import DATASET_SUPERSEDED

    dataset = SnapshotDataset(snapshot_url, batch_size=BATCH, seed=SEED)
    train = torch.utils.data.DataLoader(dataset, batch_size=None)
    probe = torch.utils.data.DataLoader(dataset, batch_size=None)
    it = iter(train)
    next(it)
    next(iter(probe))
    with pytest.raises(RuntimeError) as err:
        next(it)
    assert str(err.value) == DATASET_SUPERSEDED
    assert "a SnapshotDataset of its own" in DATASET_SUPERSEDED
    own = SnapshotDataset(snapshot_url, batch_size=BATCH, seed=SEED)  # (what it advises)
    first, second = iter(torch.utils.data.DataLoader(dataset, batch_size=None)), iter(own)
    assert len([next(first), next(second), *first]) == RECORDS // BATCH + 1
