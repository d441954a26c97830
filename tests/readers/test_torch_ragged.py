"""A ragged column through the PyTorch adapters: a list of tensors, one per record, that are
views of one tensor holding the batch's values (writable, as numpy's arrays of the loader
are or not). Each record was a tensor of its own: ~1 us each to make, and a DataLoader's
workers handed each over in a shared-memory segment of its own, ~200 us a record (a probe
measured workers 45-100x slower than none on token ids)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from torch.utils.data import DataLoader

import snapshot_cli as snap
from snapshot_cli.readers.torch import SnapshotDataset
from snapshot_cli.readers.torch_tensors import to_tensors

DTYPES = [np.int32, np.int64, np.uint8, np.float32, np.float64, np.bool_]


@st.composite
def ragged_column(draw: st.DrawFn) -> tuple[np.ndarray, list[np.ndarray]]:
    """An object array of records of one dtype, 1-D or n-D, some empty, some in another byte
    order, reversed or read-only, as a loader or a map may give them; and their values."""
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    ndim = draw(st.integers(1, 3))
    shapes = st.lists(st.integers(0, 5), min_size=ndim, max_size=ndim).map(tuple)
    records = draw(st.lists(hnp.arrays(dtype, shapes), min_size=1, max_size=12))
    given_ = []
    for r in records:
        how = draw(st.sampled_from(["as is", "swapped", "reversed", "read-only"]))
        if how == "swapped" and dtype.itemsize > 1:
            r = r.astype(dtype.newbyteorder(">"))
        elif how == "reversed" and r.ndim == 1:
            r = r[::-1].copy()[::-1]
        elif how == "read-only":
            r = r.copy()
            r.flags.writeable = False
        given_.append(r)
    column = np.empty(len(given_), object)
    column[:] = given_ if ndim == 1 else [None] * len(given_)
    for i, r in enumerate(given_):
        column[i] = r
    return column, [np.asarray(r, dtype=dtype) for r in given_]


@settings(max_examples=60, deadline=None)
@given(ragged_column())
def test_a_ragged_column_is_views_of_one_writable_tensor(
    drawn: tuple[np.ndarray, list[np.ndarray]],
) -> None:
    column, values = drawn
    got = to_tensors({"x": column, "label": np.arange(len(values))})["x"]
    assert isinstance(got, list) and len(got) == len(values)
    for t, v in zip(got, values, strict=True):
        assert isinstance(t, torch.Tensor) and tuple(t.shape) == v.shape
        assert np.array_equal(t.numpy(), v, equal_nan=v.dtype.kind == "f")
        assert t.numpy().dtype == v.dtype.newbyteorder("=")
    assert len({t.untyped_storage().data_ptr() for t in got}) == 1
    before = [np.array(r) for r in column]
    for t in got:  # writable, each record its own part, and the loader's arrays untouched
        t.fill_(1)
    nan = values[0].dtype.kind == "f"
    assert all(np.array_equal(r, b, equal_nan=nan) for r, b in zip(column, before, strict=True))
    assert all(bool((t == 1).all()) for t in got)


def test_records_of_mixed_dtypes_each_get_their_own_tensor() -> None:
    """A map may return records of several dtypes in one column: each keeps its own."""
    column = np.empty(2, object)
    column[:] = [np.arange(3, dtype=np.int32), np.ones(2, np.float64)]
    got = to_tensors({"x": column})["x"]
    assert [t.dtype for t in got] == [torch.int32, torch.float64]
    assert [t.tolist() for t in got] == [[0, 1, 2], [1.0, 1.0]]


def _ragged_snapshot(path: Path, compression: str) -> dict[int, list[int]]:
    @snap.ragged("ids")
    def preprocess() -> Any:
        for i in range(300):
            yield {"ids": np.arange(i % 17, dtype=np.int32) + i, "label": i}

    snap.create(preprocess, str(path), workers=0, compression=compression, batch_rows=64)
    return {i: list(range(i, i + i % 17)) for i in range(300)}


@pytest.mark.parametrize("compression", ["none", "lz4"])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_dataloader_hands_a_ragged_column_over_as_views_of_one_tensor(
    tmp_path: Path, compression: str, workers: int
) -> None:
    want = _ragged_snapshot(tmp_path / "s", compression)
    for shuffle in (True, False):  # (in order, uncompressed: the loader's arrays read-only)
        dataset = SnapshotDataset(str(tmp_path / "s"), 32, seed=0, shuffle=shuffle)
        loader = DataLoader(dataset, batch_size=None, num_workers=workers)
        got: dict[int, list[int]] = {}
        for batch in loader:
            ids = batch["ids"]
            assert len({t.untyped_storage().data_ptr() for t in ids}) == 1
            for label, t in zip(batch["label"].tolist(), ids, strict=True):
                got[label] = t.tolist()
        assert got == want


def test_to_torch_gives_a_ragged_column_as_views_of_one_tensor(tmp_path: Path) -> None:
    want = _ragged_snapshot(tmp_path / "s", "none")
    with snap.open(str(tmp_path / "s")).loader(50, shuffle=False) as loader:
        got = {}
        for batch in loader.to_torch():
            assert len({t.untyped_storage().data_ptr() for t in batch["ids"]}) == 1
            batch["ids"][0].add_(0)  # (writable, though the loader's arrays were not)
            rows = [t.tolist() for t in batch["ids"]]
            got.update(zip(batch["label"].tolist(), rows, strict=True))
    assert got == want
