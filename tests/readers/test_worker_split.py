"""The worker split of the per-rank order: a rank's DataLoader workers read each record of its
part once, in whole batches, and a DataLoader's len is the batches it yields.

Workers were read as ranks, each part padded to the same length: 10 records, batches of 4
and 3 workers gave 12 records (0 and 1 twice), 500 over 3 workers 501. Tests of the plan
(pure, Hypothesis) and of real DataLoaders (fork workers, and one spawn case)."""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.errors import OptionError
from snapshot_cli.readers.plan import EpochPlan, PlanOptions
from snapshot_cli.readers.torch import SnapshotDataset
from tests.readers.conftest import dataloader_iteration
from tests.readers.test_plan import blocks_from

# torch suggests no more workers than cores (2 here): 3 is the point of several tests
MANY_WORKERS = pytest.mark.filterwarnings("ignore:This DataLoader will create")


def part_records(plan: EpochPlan) -> list[int]:
    """Every record of the plan's range, dropped ones too, in sequence order."""
    starts = np.concatenate([[0], np.cumsum(plan.blocks.rows)[:-1]])
    return [int(starts[s.block]) + i for k in range(plan.num_windows)
            for s in plan.window(k) for i in range(s.start, s.stop)]  # fmt: skip


layouts = st.lists(st.lists(st.integers(1, 30), min_size=1, max_size=5), min_size=1, max_size=8)


@settings(max_examples=250, deadline=None)
@given(
    layout=layouts,
    world=st.integers(1, 4),
    workers=st.integers(1, 6),
    batch=st.integers(1, 13),
    window=st.integers(1, 60),
    first=st.integers(0, 60),
    seed=st.integers(0, 2**40),
    epoch=st.integers(0, 100),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
)
def test_a_ranks_workers_read_its_part_once_in_whole_batches(
    layout: list[list[int]],
    world: int,
    workers: int,
    batch: int,
    window: int,
    first: int,
    seed: int,
    epoch: int,
    shuffle: bool,
    drop_last: bool,
) -> None:
    blocks = blocks_from(layout)
    for rank in range(world):
        o = PlanOptions(batch, shuffle, seed, rank, world, drop_last, window, first)
        whole = EpochPlan(blocks, o, epoch)
        plans = [
            EpochPlan(blocks, PlanOptions(batch, shuffle, seed, rank, world, drop_last, window,
                                          first, worker=w, workers=workers), epoch)
            for w in range(workers)
        ]  # fmt: skip
        got = [p.positions().tolist() for p in plans]
        counts = [p.num_batches for p in plans]
        # the rank's batches, shared out as evenly as whole batches go; none padded
        assert sum(counts) == whole.num_batches and max(counts) - min(counts) <= 1
        for w, (p, records) in enumerate(zip(plans, got, strict=True)):
            if w < workers - 1:  # whole batches: only the last worker's last may be partial
                assert len(records) == p.num_batches * batch
            else:
                assert (p.num_batches - 1) * batch < len(records) or not p.num_batches
        flat = [r for records in got for r in records]
        assert len(flat) == len(set(flat))  # each record once
        if drop_last:  # the rank's whole batches, of its part
            assert len(flat) == whole.num_batches * batch
            assert set(flat) <= set(part_records(whole))
        else:
            assert collections.Counter(flat) == collections.Counter(whole.positions().tolist())
        if not shuffle or workers == 1:  # in order (one worker: exactly the rank's order)
            assert flat == whole.positions().tolist()


def test_without_workers_the_order_is_as_before() -> None:
    """One worker (the default) plans exactly as a rank did: the orders of the plan before
    the worker split, pinned (a state saved before it resumes in the same records)."""
    blocks = blocks_from([[5, 3], [7], [4, 4, 2], [6]])
    before = {
        (False, 0): [27, 25, 26, 28, 30, 1, 4, 2, 3, 0, 15, 29, 17, 19, 18, 16],
        (False, 1): [21, 8, 22, 20, 24, 23, 9, 11, 13, 14, 10, 12, 25, 6, 7, 5],
        (True, 0): [27, 25, 26, 28, 30, 1, 4, 2, 3, 0, 15, 29],
        (True, 1): [20, 22, 21, 19, 23, 14, 8, 10, 12, 13, 9, 11],
    }
    for (drop_last, rank), order in before.items():
        for extra in ({}, {"worker": 0, "workers": 1}):
            o = PlanOptions(4, True, 7, rank, 2, drop_last, 8, 4, **extra)
            assert EpochPlan(blocks, o, 3).positions().tolist() == order


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"workers": 0}, "workers must be a positive integer, got 0"),
        ({"workers": True}, "workers must be a positive integer, got True"),
        ({"worker": 2, "workers": 2}, r"worker must be in \[0, workers=2\), got 2"),
        ({"worker": -1, "workers": 2}, r"worker must be in \[0, workers=2\), got -1"),
    ],
)
def test_the_worker_split_is_validated(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PlanOptions(batch_size=4, **kwargs)


# --- real DataLoaders ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> dict[int, str]:
    """Snapshots of ``n`` records with ids 0..n-1 in written order, in several shards and
    record batches."""
    out = {}
    for n in (10, 40, 97):
        path = tmp_path_factory.mktemp("split") / f"s{n}"

        def records(n: int = n) -> Any:
            for s in range(0, n, 16):
                yield snap.Batch(id=np.arange(s, min(n, s + 16), dtype=np.int64))

        snap.create(records, str(path), workers=0, batch_rows=7, shard_size="1KiB")
        out[n] = str(path)
    return out


def _items(dataset: Any, workers: int, context: str | None = None) -> tuple[int, list[list[int]]]:
    """A DataLoader's len and the ids of each item it gives in one epoch."""
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=None, num_workers=workers, multiprocessing_context=context
    )
    return len(loader), [item["id"].tolist() for item in loader]


CASES = [  # (records, batch_size, num_workers, world_size, drop_last, shuffle)
    (10, 4, 3, 1, False, False),  # the probe's case: 12 records, 0 and 1 twice
    (10, 4, 4, 1, False, True),  # more workers than batches: one reads none
    (97, 8, 3, 1, False, True),
    (97, 8, 2, 3, False, True),  # ranks padded (the last wraps), then workers, unpadded
    (97, 5, 2, 2, True, True),  # 9 batches a rank: 8 (4 for each of 4 "ranks")
    (97, 7, 3, 1, True, False),  # 13 batches: 12
    (40, 32, 2, 1, True, True),  # one batch for 2 workers: it was "no batch" (20 each)
]


@MANY_WORKERS
@pytest.mark.parametrize(("records", "batch", "workers", "world", "drop_last", "shuffle"), CASES)
def test_a_ranks_dataloader_workers_read_its_records_once(
    urls: dict[int, str],
    records: int,
    batch: int,
    workers: int,
    world: int,
    drop_last: bool,
    shuffle: bool,
) -> None:
    every: collections.Counter[int] = collections.Counter()
    for rank in range(world):
        options = {"batch_size": batch, "shuffle": shuffle, "seed": 5, "drop_last": drop_last,
                   "rank": rank, "world_size": world}  # fmt: skip
        size, items = _items(SnapshotDataset(urls[records], **options), workers)
        _, alone = _items(SnapshotDataset(urls[records], **options), 0)
        ids = [i for item in items for i in item]
        assert size == len(items) == len(alone)  # len: the batches it yields, as without
        assert len(ids) == len(set(ids))  # each of the rank's records once
        assert sum(len(item) < batch for item in items) <= (0 if drop_last else 1)
        rank_part = [i for item in alone for i in item]
        if drop_last and shuffle:  # its whole batches (which are dropped is the plan's)
            assert len(ids) == len(rank_part)
        else:
            assert sorted(ids) == sorted(rank_part)
        every.update(ids)
    if not drop_last:  # the epoch: every record, only the last rank's padding twice
        assert set(every) == set(range(records))
        assert sum(every.values()) == -(-records // world) * world


def test_a_spawned_workers_read_their_ranks_records_once(urls: dict[int, str]) -> None:
    """The same under spawn, whose workers get the dataset pickled."""
    dataset = SnapshotDataset(urls[97], batch_size=8, seed=2, rank=1, world_size=2)
    size, items = _items(dataset, 2, "spawn")
    ids = [i for item in items for i in item]
    assert size == len(items) == 7 and len(ids) == len(set(ids)) == 49
    assert sorted(ids) == sorted(i for item in _items(dataset, 0)[1] for i in item)


def test_without_workers_the_dataset_yields_the_plans_order(urls: dict[int, str]) -> None:
    """num_workers=0 yields the order of the plan with its default worker options (one
    worker: the rank's own)."""
    options = {"shuffle": True, "seed": 9, "rank": 1, "world_size": 2, "shuffle_buffer": 12}
    loader = snap.open(urls[97]).loader(8, **options)
    plan = EpochPlan(loader.blocks, loader.plan_options, 0)
    assert isinstance(loader.plan_options, PlanOptions) and loader.plan_options.workers == 1
    loader.close()
    _, items = _items(SnapshotDataset(urls[97], 8, **options), 0)
    assert [i for item in items for i in item] == plan.positions().tolist()


def _draw(batch: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    batch["draw"] = np.full(len(batch["id"]), rng.integers(1 << 62), np.int64)
    return batch


@MANY_WORKERS
def test_each_workers_map_has_a_generator_of_its_own(urls: dict[int, str]) -> None:
    """A map's rng is keyed by the reader's part (rank x workers + worker), not the rank:
    the workers of a rank, now one rank's loaders each, do not repeat each other's draws."""
    dataset = SnapshotDataset(urls[97], batch_size=4, seed=1, map=_draw)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=3)
    draws = [int(item["draw"][0]) for item in loader]
    assert len(draws) == 25 and len(set(draws)) == len(draws)


@MANY_WORKERS
def test_the_global_orders_workers_read_what_it_reads_without(urls: dict[int, str]) -> None:
    """The global order's workers are its parts (rank r's worker w of n reads part r n + w):
    the same records, its fill-up of the last global batch included, with or without."""
    options = {"global_batch_size": 12, "seed": 4, "rank": 0, "world_size": 1}
    size, items = _items(SnapshotDataset(urls[97], **options), 3)
    _, alone = _items(SnapshotDataset(urls[97], **options), 0)
    assert size == len(items) == 3 * len(alone)  # a slice of every step from each worker
    count = collections.Counter(i for item in items for i in item)
    assert count == collections.Counter(i for item in alone for i in item)
    assert sum(count.values()) == 9 * 12 and set(count) == set(range(97))


def test_every_order_gives_each_worker_its_share_of_the_read_threads(
    urls: dict[int, str],
) -> None:
    """Each DataLoader worker runs a loader of its own: from local disk, cores / workers
    read threads where left "auto" (the global order's workers took every core each)."""
    from snapshot_cli.cores import cores

    for options in ({"global_batch_size": 12}, {"batch_size": 8}):
        dataset = SnapshotDataset(urls[97], rank=0, world_size=1, **options)
        for worker in (0, 1):
            with dataset._new_loader(worker, 2) as loader:
                assert loader.options.num_parallel_reads == max(1, cores() // 2), options


@MANY_WORKERS
def test_a_rank_without_a_batch_is_said_in_ranks_whatever_the_workers(
    urls: dict[int, str],
) -> None:
    """drop_last=True with a rank's part smaller than a batch: the rank's problem, said in
    ranks by len and iteration alike (workers cannot help: they share the rank's batches)."""
    dataset = SnapshotDataset(urls[40], batch_size=32, drop_last=True, rank=0, world_size=2)
    for workers in (0, 2):
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers)
        with pytest.raises(OptionError, match=r"\(20 on each of 2 ranks\) holds no batch of 32"):
            len(loader)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
    refused = pytest.raises(Exception, match=r"\(20 on each of 2 ranks\) holds no batch of 32")
    with refused, dataloader_iteration(loader) as it:
        next(it)


def test_the_dataset_makes_its_loaders_with_every_option_loader_takes() -> None:
    """SnapshotDataset makes its workers' loaders from LoaderOptions (the worker split is no
    keyword of Snapshot.loader): every keyword of that call but the batch size and trace must
    be an option there, or the dataset would lose it."""
    import dataclasses

    from snapshot_cli.keywords import keywords_of
    from snapshot_cli.readers.options import LoaderOptions
    from snapshot_cli.readers.snapshot import Snapshot

    fields = {f.name for f in dataclasses.fields(LoaderOptions) if f.init}
    assert keywords_of(Snapshot.loader) - {"batch_size", "trace"} <= fields
    assert "worker_split" not in keywords_of(Snapshot.loader)
