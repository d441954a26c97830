"""SnapshotDataset states and DataLoader workers: a per-rank state records the worker split it
was saved under and resumes only where that split is the same; a global-order state resumes
under any; ``len(DataLoader)`` says what iterating says; a rank's state in another rank says
what to do. Real DataLoaders, real worker processes (fork)."""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import pytest
import torch

import snapshot_cli as snap
from snapshot_cli.errors import OptionError
from snapshot_cli.readers.torch import SnapshotDataset
from tests.readers.conftest import dataloader_iteration
from tests.readers.test_elastic_torch import _items

RECORDS = 480
# torch suggests no more workers than cores (2 here): 3 is the point of the len tests
MANY_WORKERS = pytest.mark.filterwarnings("ignore:This DataLoader will create")


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("states") / "s"

    def records() -> Any:
        for s in range(0, RECORDS, 48):
            yield snap.Batch(id=np.arange(s, s + 48, dtype=np.int64))

    snap.create(records, str(path), workers=0, batch_rows=30, shard_size="8KiB")
    return str(path)


def _counts(*runs: list[list[int]]) -> collections.Counter[int]:
    return collections.Counter(i for run in runs for item in run for i in item)


def per_rank(url: str) -> Any:
    return SnapshotDataset(url, batch_size=16, seed=3, rank=0, world_size=1)


def test_a_per_rank_state_within_an_epoch_under_workers_is_refused_when_saved(url: str) -> None:
    """The tester's case: 10 items from 2 workers, a state at step 5, resumed with
    num_workers=0 as the refusal for workers advised, delivered some records twice and others
    never (3,000 records: 3,320 delivered, 570 twice, 250 never). Now state_dict says so, and
    what works; a state at step 0 (an epoch's start, the same in every split) is saved, and
    resumes without workers with every record once."""
    ds = per_rank(url)
    _items(ds, 2, 10)
    with pytest.raises(OptionError) as caught:
        ds.state_dict(epoch=0, step=5)
    said = str(caught.value)
    assert "num_workers=2" in said and "per-rank order" in said, said
    assert "global_batch_size=" in said and "num_workers=0" in said, said

    start = ds.state_dict(epoch=1, step=0)
    assert start["workers"] == 2
    again = per_rank(url)
    again.load_state_dict(start)
    rest = _items(again, 0)
    assert _counts(rest) == collections.Counter(range(RECORDS))
    fresh = per_rank(url)
    fresh.set_epoch(1)
    assert rest == _items(fresh, 0)


def test_a_per_rank_state_records_its_split_and_one_saved_under_workers_loads_nowhere(
    url: str,
) -> None:
    """A state saved without workers records ``workers`` 0 and resumes exactly; the same
    position saved under 2 workers (as a state of this snap would record it) is refused by
    load_state_dict, naming the split and what works: it resumes in no DataLoader."""
    ds = per_rank(url)
    first = _items(ds, 0)
    state = ds.state_dict(epoch=0, step=5)
    assert state["workers"] == 0
    again = per_rank(url)
    again.load_state_dict(state)
    assert _items(again, 0) == first[5:]

    under_workers = {**state, "workers": 2}
    with pytest.raises(OptionError, match=r"saved at step 5 of epoch 0 by a DataLoader with "
                       r"num_workers=2.*global_batch_size="):  # fmt: skip
        per_rank(url).load_state_dict(under_workers)
    with pytest.raises(OptionError, match="'workers' is 'two'"):
        per_rank(url).load_state_dict({**state, "workers": "two"})


def test_the_refusal_under_workers_advises_what_resumes(url: str) -> None:
    """A per-rank state saved without workers, iterated by a DataLoader with workers, is
    refused advising num_workers=0; followed, that delivers each remaining record once."""
    ds = per_rank(url)
    got = _items(ds, 0, 7)
    state = ds.state_dict(epoch=0, step=7)
    refused = per_rank(url)
    refused.load_state_dict(state)
    with pytest.raises(Exception, match=r"num_workers=2: resume with num_workers=0"):
        _items(refused, 2)
    advised = per_rank(url)
    advised.load_state_dict(state)
    assert _counts(got, _items(advised, 0)) == collections.Counter(range(RECORDS))


def test_the_split_saved_is_the_latest_iterations(url: str) -> None:
    """The dataset's latest DataLoader iteration decides: without workers after one with
    workers, a state within the epoch is saved (and resumes exactly); with workers after one
    without, it is refused."""
    ds = per_rank(url)
    _items(ds, 2, 4)
    ds.set_epoch(1)
    first = _items(ds, 0)
    state = ds.state_dict(epoch=1, step=3)
    assert state["workers"] == 0
    again = per_rank(url)
    again.load_state_dict(state)
    assert _items(again, 0) == first[3:]
    _items(ds, 2, 4)
    with pytest.raises(OptionError, match="num_workers=2"):
        ds.state_dict(epoch=3, step=2)


def test_a_global_order_state_resumes_across_worker_counts(url: str) -> None:
    """With global_batch_size a state taken under 2 workers (step = items // 2) records them
    and resumes without workers with exactly the remaining global batches (and 0 to 2)."""
    g = 16
    whole = [sorted(b["id"].tolist()) for b in snap.open(url).loader(global_batch_size=g, seed=4)]
    ds = SnapshotDataset(url, global_batch_size=g, seed=4, rank=0, world_size=1)
    items = _items(ds, 2, 6)
    assert [sorted(items[i] + items[i + 1]) for i in (0, 2, 4)] == whole[:3]
    state = ds.state_dict(epoch=0, step=3)
    assert state["workers"] == 2
    again = SnapshotDataset(url, global_batch_size=g, seed=4, rank=0, world_size=1)
    again.load_state_dict(state)
    assert [sorted(i) for i in _items(again, 0)] == whole[3:]

    inline = SnapshotDataset(url, global_batch_size=g, seed=4, rank=0, world_size=1)
    items = _items(inline, 0, 4)
    state = inline.state_dict(epoch=0, step=4)
    assert state["workers"] == 0
    split = SnapshotDataset(url, global_batch_size=g, seed=4, rank=0, world_size=1)
    split.load_state_dict(state)
    rest = _items(split, 2)
    assert [sorted(rest[i] + rest[i + 1]) for i in range(0, len(rest), 2)] == whole[4:]


@MANY_WORKERS
def test_len_of_a_dataloader_says_what_iterating_it_says(url: str) -> None:
    """len(DataLoader), which Lightning and Hugging Face's Trainer call first, called 3
    workers "world_size=3" and advised a world size; now it says what iterating says."""
    ds = SnapshotDataset(url, global_batch_size=64, rank=0, world_size=1)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=3)
    with pytest.raises(OptionError) as by_len:
        len(dl)
    said = str(by_len.value)
    assert "1 ranks x 3 DataLoader workers (3 parts)" in said and "num_workers" in said, said
    assert "world_size" not in said and "world size" not in said, said
    assert "one of [0, 1, 2, 4, 8, 16, 32, 64]" in said, said
    refused = pytest.raises(Exception, match=r"1 ranks x 3 DataLoader workers \(3 parts\)")
    with refused, dataloader_iteration(dl) as it:
        next(it)
    # ranks that do not split it without workers either: a world size is what to change
    three = SnapshotDataset(url, global_batch_size=64, rank=1, world_size=3)
    with pytest.raises(OptionError, match="nor over the 3 ranks alone: use a world size"):
        len(torch.utils.data.DataLoader(three, batch_size=None, num_workers=2))
    with pytest.raises(OptionError, match="not divisible by world_size=3"):
        next(iter(three))  # (no workers: the ranks are the world size)

    # and one that splits: len is the items the DataLoader gives
    ok = SnapshotDataset(url, batch_size=16, seed=1, rank=0, world_size=1)
    assert len(torch.utils.data.DataLoader(ok, batch_size=None, num_workers=2)) == len(
        _items(ok, 2)
    )


@MANY_WORKERS
def test_len_counts_the_ranks_batches_whatever_the_workers_share(url: str) -> None:
    """drop_last=True with a batch larger than a third of the records: 3 workers share the
    rank's 2 batches (one reads none; it was "no batch on each of 3 DataLoader workers"), and
    len says so; a rank's part without a batch is said in ranks, as iterating says it."""
    ds = SnapshotDataset(url, batch_size=200, drop_last=True, rank=0, world_size=1)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=3)
    items = _items(ds, 3)
    assert len(dl) == len(items) == 2 and sorted(len(i) for i in items) == [200, 200]
    assert len(_counts(items)) == 400  # each once
    three = SnapshotDataset(url, batch_size=200, drop_last=True, rank=0, world_size=3)
    dl = torch.utils.data.DataLoader(three, batch_size=None, num_workers=3)
    with pytest.raises(OptionError, match=r"\(160 on each of 3 ranks\) holds no batch of 200"):
        len(dl)


def test_a_ranks_state_in_another_rank_says_what_to_do(url: str) -> None:
    """Rank 0's per-rank state loaded by rank 1 was refused with "other rank: {'rank': 0} vs
    {'rank': 1}" alone: it now says to load each rank's own state, or global_batch_size=."""
    state = SnapshotDataset(url, batch_size=16, rank=0, world_size=2).state_dict(epoch=0, step=2)
    with pytest.raises(OptionError) as caught:
        SnapshotDataset(url, batch_size=16, rank=1, world_size=2).load_state_dict(state)
    said = str(caught.value)
    assert "other rank" in said and "load into each rank the state it saved" in said, said
    assert "global_batch_size=" in said, said
    loader_state = snap.open(url).loader(16, rank=0, world_size=2).state_dict()
    with pytest.raises(OptionError, match="each rank the state it saved.*global_batch_size="):
        snap.open(url).loader(16, rank=0, world_size=3).load_state_dict(loader_state)


def test_a_state_under_forkserver_workers_is_refused_too(url: str) -> None:
    """(The review's.) Workers recorded their split under their parent's pid, which under
    forkserver (Python 3.14's default) is the forkserver's: the state was saved as of no
    workers and resumed with records repeated and skipped."""
    ds = per_rank(url)
    _items(ds, 2, 10, "forkserver")
    with pytest.raises(OptionError, match="num_workers=2"):
        ds.state_dict(epoch=0, step=5)


def test_a_state_at_an_epochs_start_or_of_one_worker_resumes_in_any_split(url: str) -> None:
    """(The review's.) A step-0 state saved after 2 workers was refused in a DataLoader of 2
    workers, though an epoch's start is the same in every split; one worker reads the rank's
    records as the process itself does, and was refused as if it were many."""
    ds = per_rank(url)
    _items(ds, 2, 4)
    start = ds.state_dict(epoch=1, step=0)
    again = per_rank(url)
    again.load_state_dict(start)
    assert _counts(_items(again, 2)) == collections.Counter(range(RECORDS))
    one = per_rank(url)
    first = _items(one, 1, 6)
    state = one.state_dict(epoch=0, step=6)
    assert state["workers"] == 1
    resumed = per_rank(url)
    resumed.load_state_dict(state)
    assert _counts(first, _items(resumed, 0)) == collections.Counter(range(RECORDS))


def test_a_state_at_an_epochs_end_is_the_next_epochs_start(url: str) -> None:
    """``state_dict(e, len(dataloader))`` after a whole epoch under workers (the natural
    checkpoint) was refused as a state "within an epoch" (found by a probe): the end of an
    epoch is the start of the next, which resumes in any DataLoader."""
    ds = per_rank(url)
    whole = _items(ds, 2)  # (epoch 0, to its end)
    steps = len(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2))
    assert steps == len(whole) == RECORDS // 16
    state = ds.state_dict(epoch=0, step=steps)
    assert (state["epoch"], state["batch"]) == (1, 0)
    assert state == ds.state_dict(epoch=1, step=0)
    resumed = per_rank(url)
    resumed.load_state_dict(state)
    fresh = per_rank(url)
    fresh.set_epoch(1)
    assert _items(resumed, 2) == _items(fresh, 2)


@pytest.mark.parametrize("given", [{}, {"epoch": 0}, {"step": 3}])
def test_a_state_asked_without_its_place_says_what_to_give(url: str, given: dict[str, int]) -> None:
    """``ds.state_dict()``, as the loader and the adapters take it, was a TypeError naming
    ``_make_dataset_class.<locals>.SnapshotDataset.state_dict()`` (a probe)."""
    ds = SnapshotDataset(url, batch_size=16, seed=0)
    for i, _ in enumerate(torch.utils.data.DataLoader(ds, batch_size=None)):
        if i == 3:
            break
    with pytest.raises(OptionError, match=r"state_dict\(epoch=e, step=t\) needs the place"):
        ds.state_dict(**given)
    assert ds.state_dict(epoch=0, step=3)["batch"] == 3
