"""Mixtures, samples and states at their edges (a probe's findings): weights given in
proportion to the sizes deliver every record, however floats spell them; weights near the
float maximum mix; a path given where a list goes, a numpy fraction, and states past an
epoch's end or with epochs and steps that are no counts are said plainly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.errors import OptionError
from snapshot_cli.readers.elastic import GlobalOptions
from snapshot_cli.readers.mix import _counts


def _make(root: Path, name: str, n: int, tag: int) -> str:
    snap.create(lambda: iter([snap.Batch(id=tag * 1000 + np.arange(n))]), str(root / name),
                workers=0, batch_rows=4)  # fmt: skip
    return str(root / name)


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[int, str]:
    root = tmp_path_factory.mktemp("edges")
    return {n: _make(root, f"s{n}", n, tag) for tag, n in enumerate((2, 3, 5, 10, 40), 1)}


@given(
    sizes=st.lists(st.integers(1, 10**6), min_size=1, max_size=8),
    spelling=st.sampled_from(["share", "percent", "tenths", "scaled"]),
    scale=st.floats(1e-300, 1e300),
)
@example(sizes=[2, 3], spelling="tenths", scale=1.0)  # 0.2 and 0.30000000000000004
@example(sizes=[1, 10], spelling="percent", scale=1.0)  # 100/11 and 1000/11
def test_weights_in_proportion_to_the_sizes_take_every_record(
    sizes: list[int], spelling: str, scale: float
) -> None:
    total = sum(sizes)
    weights = {
        "share": [n / total for n in sizes],
        "percent": [100 * n / total for n in sizes],
        "tenths": [n * 0.1 for n in sizes],
        "scaled": [n * scale for n in sizes],
    }[spelling]
    assert _counts(weights, sizes, None) == sizes


SIZED_WEIGHTS = st.lists(st.tuples(st.integers(1, 10**5), st.floats(0, 1e308)), min_size=1)


@given(SIZED_WEIGHTS.filter(lambda pairs: any(w > 0 for _, w in pairs)))
def test_no_source_repeats_a_record_in_the_longest_epoch(pairs: list[tuple[int, float]]) -> None:
    sizes, weights = [n for n, _ in pairs], [w for _, w in pairs]
    counts = _counts(weights, sizes, None)
    assert all(c <= n for c, n in zip(counts, sizes, strict=True))
    assert all(c == 0 for c, w in zip(counts, weights, strict=True) if w == 0)
    assert sum(counts) >= 1


def test_proportional_float_weights_deliver_each_record_once(sources: dict[int, str]) -> None:
    mixed = snap.mix([sources[2], sources[3]], weights=[2 * 0.1, 3 * 0.1])
    ids = [i for b in mixed.loader(global_batch_size=1, seed=0) for i in b["id"].tolist()]
    assert sorted(ids) == [1000, 1001, 2000, 2001, 2002]  # was 4: one of s3's lost


def test_weights_near_the_float_maximum_mix_in_their_proportions(sources: dict[int, str]) -> None:
    mixed = snap.mix([sources[5], sources[10]], weights=[1e308, 1e308])  # (fsum overflowed)
    assert mixed.counts == [5, 5]
    assert snap.mix([sources[5], sources[10]], [1e308, 1e308], epoch_records=4).counts == [2, 2]


@pytest.mark.parametrize("given_as", ["str", "path", "snapshot"])
def test_one_snapshot_where_a_list_goes_is_said(sources: dict[int, str], given_as: str) -> None:
    one: Any = {"str": sources[5], "path": Path(sources[5]), "snapshot": snap.open(sources[5])}
    with pytest.raises(OptionError, match="snapshots must be a list .* snap.open\\(url\\)"):
        snap.mix(one[given_as])  # ("/ is not a snapshot": a str was read letter by letter)


@pytest.mark.parametrize("fraction", [np.float32(0.5), np.float16(0.5), np.float64(0.5)])
def test_a_numpy_fraction_samples(sources: dict[int, str], fraction: Any) -> None:
    assert snap.open(sources[10]).sample(fraction=fraction).counts == [5]


def _taken(loader: snap.Loader) -> list[int]:
    return [i for b in loader for i in b["id"].tolist()]


def test_a_state_past_the_epochs_end_is_refused(sources: dict[int, str]) -> None:
    s = snap.open(sources[40])
    loader = s.loader(4, seed=1)
    assert loader.batches_per_epoch() == 10
    state = loader.state_dict()
    end = s.loader(4, seed=1)
    end.load_state_dict(dict(state, batch=10))  # an epoch's end is a place: nothing is left
    assert _taken(end) == []
    for batch in (11, 10**9):  # (each resumed to an empty epoch without a word)
        with pytest.raises(OptionError, match=f"batch {batch} of epoch 0, past the end .* 10 b"):
            s.loader(4, seed=1).load_state_dict(dict(state, batch=batch))
    middle = s.loader(4, seed=1)
    middle.load_state_dict(dict(state, batch=9))
    assert len(_taken(middle)) == 4


def test_a_global_state_past_the_epochs_end_is_refused(sources: dict[int, str]) -> None:
    mixed = snap.mix([sources[5], sources[10]])
    state = mixed.loader(global_batch_size=3).state_dict()
    with pytest.raises(OptionError, match="batch 6 of epoch 0, past the end .* 5 batches here"):
        mixed.loader(global_batch_size=3).load_state_dict(dict(state, batch=6))


@pytest.mark.parametrize(
    ("epoch", "step", "said"),
    [
        (-1, 0, "epoch=...\\) must be an integer >= 0, got -1"),  # (saved, then failed to load)
        (1.5, 0, "epoch=...\\) must be an integer >= 0, got 1.5"),  # (was floored to 1)
        (True, 0, "epoch=...\\) must be an integer >= 0, got True"),  # (was epoch 1)
        (0, -2, "step=...\\) must be an integer >= 0, got -2"),
        (0, 11, "batch 11 of epoch 0, past the end of an epoch, which has 10 batches"),
        (0, 10**6, "step = items received // num_workers"),
    ],
)
def test_a_dataset_state_that_names_no_place_is_refused_when_made(
    sources: dict[int, str], epoch: Any, step: Any, said: str
) -> None:
    from snapshot_cli.readers.torch import SnapshotDataset

    dataset = SnapshotDataset(sources[40], global_batch_size=4)
    with pytest.raises(OptionError, match=said):
        dataset.state_dict(epoch=epoch, step=step)


def test_a_dataset_state_of_numpy_and_torch_counts_is_made(sources: dict[int, str]) -> None:
    import torch

    from snapshot_cli.readers.torch import SnapshotDataset

    dataset = SnapshotDataset(sources[40], global_batch_size=4)
    state = dataset.state_dict(epoch=np.int64(1), step=torch.tensor(9))
    assert (state["epoch"], state["batch"]) == (1, 9)
    assert type(state["epoch"]) is int and type(state["batch"]) is int
    done = dataset.state_dict(epoch=np.int64(1), step=torch.tensor(10))  # (the epoch's end:
    assert (done["epoch"], done["batch"]) == (2, 0)  # the next one's start)


def test_a_column_only_some_mixed_snapshots_have_is_named_with_them(tmp_path: Path) -> None:
    """It said "column 'extra' is not in ['train']": as if 'train' were a list of columns."""
    snap.create(lambda: iter([snap.Batch(id=np.arange(4))]), str(tmp_path / "a"), workers=0)
    snap.create(lambda: iter([snap.Batch(id=np.arange(4), extra=np.ones(4))]),
                str(tmp_path / "b"), workers=0)  # fmt: skip
    mixed = snap.mix([snap.open(tmp_path / "a"), snap.open(tmp_path / "b")], names=["train", "x"])
    said = r"column 'extra' is missing from the mixed snapshot 'train' \(a mixture reads the "
    with pytest.raises(OptionError, match=said + r"columns all of them have; their columns: "):
        mixed.loader(4, columns=["id", "extra"])
    assert sorted(next(iter(mixed.loader(4, columns=["id"])))) == ["id"]


def test_a_mixture_has_the_schema_its_loader_reads(tmp_path: Path) -> None:
    """A Mixture had no .schema, which a snapshot and a sample have (a probe's loop read
    source.schema to build its model's inputs)."""
    snap.create(lambda: iter([snap.Batch(id=np.arange(4), a=np.zeros((4, 2), np.float32))]),
                str(tmp_path / "a"), workers=0)  # fmt: skip
    snap.create(lambda: iter([snap.Batch(b=np.ones(4), a=np.ones((4, 2), np.float32),
                                         id=np.arange(4))]),
                str(tmp_path / "b"), workers=0)  # fmt: skip
    mixed = snap.mix([str(tmp_path / "a"), str(tmp_path / "b")])
    assert mixed.schema.names == ["id", "a"]  # the first's order, only the columns both have
    assert mixed.schema == snap.open(tmp_path / "a").schema
    assert sorted(next(iter(mixed.loader(4)))) == sorted(mixed.schema.names)
    snap.create(lambda: iter([snap.Batch(id=np.arange(4.0))]), str(tmp_path / "c"), workers=0)
    with pytest.raises(OptionError, match="column 'id' has different types"):
        assert not snap.mix([str(tmp_path / "a"), str(tmp_path / "c")]).schema


def test_an_empty_snapshot_given_a_weight_is_named(sources: dict[int, str], tmp_path: Path) -> None:
    """It said "snapshots [1] have no records": an index, where the unweighted error names."""
    snap.create(lambda: iter([]), str(tmp_path / "empty"), workers=0)
    empty = str(tmp_path / "empty")
    with pytest.raises(OptionError, match=f"^'{empty}' holds no records but a weight above 0"):
        snap.mix([sources[10], empty], weights=[0.5, 0.5])
    with pytest.raises(OptionError, match="^'e' holds no records"):
        snap.mix([sources[10], empty], weights=[0.5, 0.5], names=["t", "e"])
    assert snap.mix([sources[10], empty], weights=[1, 0]).num_records == 10


@pytest.mark.parametrize(
    ("g", "said"),
    [(100, "1, 2, 4, 5, 10, 20, 25, 50, 100,"), (7, "1, 7,"),
     (4096, "1, 2, 4, 8, 16, 32, 64, 128, 256, 512, ..., 4096,")],
)  # fmt: skip
def test_a_world_size_that_does_not_divide_the_batch_lists_those_that_do(g: int, said: str) -> None:
    """The list stopped at 64 with "...": for 100 that hid the one divisor left, 100."""
    with pytest.raises(ValueError, match=f"use a world size among {said} or another"):
        GlobalOptions(global_batch_size=g, counts=(10_000,), world_size=3)


def test_the_loader_says_it_too(sources: dict[int, str]) -> None:
    with pytest.raises(OptionError, match="among 1, 2, 4, 5, 8, 10, 20, 40, or another"):
        snap.open(sources[40]).loader(global_batch_size=40, world_size=3, rank=0)
