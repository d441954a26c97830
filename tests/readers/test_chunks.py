"""A window's column of variable width (text, bytes, ragged arrays, lists of text) joined into
chunks (:class:`snapshot_cli.readers.convert.Chunks`): Arrow counts such values with 32-bit
offsets, and one array of a window of several GiB of text failed to join ("offset overflow",
found with ``shuffle_buffer="4GiB"`` over 4.7 GB of text). However the parts are chunked, a
batch in order and a shuffled batch hold the records the one joined array gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli import schema
from snapshot_cli.readers import convert
from snapshot_cli.readers.convert import Chunks, column_to_numpy, take_rows

from .conftest import numbered_snapshot


def same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == object and got.shape == want.shape
    for g, w in zip(got, want, strict=True):
        assert type(g) is type(w)
        if isinstance(w, np.ndarray):
            assert g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w)
        else:
            assert g == w


def column(kind: str, n: int, seed: int) -> pa.Array:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 6, n).tolist()
    if kind == "text":
        return pa.array(["é" * k for k in sizes])
    if kind == "bytes":
        return pa.array([b"\x00" * k for k in sizes])
    if kind == "ragged":
        return pa.array([list(range(k)) for k in sizes], pa.list_(pa.int32()))
    if kind == "bool ragged":
        return pa.array([[True] * k for k in sizes], pa.list_(pa.bool_()))
    return pa.array([["a"] * k for k in sizes], pa.list_(pa.string()))  # lists of text


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["text", "bytes", "ragged", "bool ragged", "lists of text"]),
    st.lists(st.integers(1, 30), min_size=1, max_size=8),  # the parts' records
    st.integers(1, 400),  # CHUNK_BYTES
    st.data(),
)
def test_chunked_parts_read_as_the_joined_column(
    kind: str, sizes: list[int], chunk_bytes: int, data: st.DataObject
) -> None:
    whole = column(kind, sum(sizes), data.draw(st.integers(0, 2**32 - 1)))
    parts, start = [], 0
    for size in sizes:
        parts.append(whole.slice(start, size))
        start += size
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(convert, "CHUNK_BYTES", chunk_bytes)
        chunks = Chunks(parts)
    assert len(chunks) == len(whole)
    a = data.draw(st.integers(0, len(whole)))
    b = data.draw(st.integers(a, len(whole)))
    same(chunks.slice(a, b), column_to_numpy(whole.slice(a, b - a)))
    rows = np.array(data.draw(st.lists(st.integers(0, len(whole) - 1), max_size=40)), np.int64)
    same(chunks.take(rows), take_rows(whole, rows))


def test_a_column_of_no_parts_is_refused() -> None:
    with pytest.raises(ValueError, match="no arrays"):
        Chunks([])


def batches(path: str, shuffle: bool) -> list[dict[str, Any]]:
    return list(snap.open(path).loader(7, shuffle=shuffle, seed=3, shuffle_buffer=60))


@pytest.mark.parametrize("shuffle", [True, False])
def test_a_window_of_several_chunks_serves_the_same_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shuffle: bool
) -> None:
    """The loader over a window chunked every few hundred bytes (as a window of several GiB
    of lists of text is every GiB; text and tokens are taken from their parts as they are,
    test_ragged_parts.py) gives the batches it gives with one chunk per column."""
    path = numbered_snapshot(
        tmp_path,
        160,
        '{"text": "w" * (n % 7), "tokens": np.arange(n % 5, dtype=np.int32), "label": n, '
        '"tags": ["t"] * (n % 3)}',
        "2KiB",
    )
    want = batches(path, shuffle)
    made: list[int] = []
    init = Chunks.__init__

    def counted(self: Chunks, parts: list[pa.Array]) -> None:
        init(self, parts)
        if self.parts is None:  # (joined)
            made.append(len(self.chunks))

    monkeypatch.setattr(Chunks, "__init__", counted)
    monkeypatch.setattr(convert, "CHUNK_BYTES", 300)
    got = batches(path, shuffle)
    assert made and max(made) > 1  # the windows were chunked
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(g["label"], w["label"])
        same(g["text"], w["text"])
        same(g["tokens"], w["tokens"])
        same(g["tags"], w["tags"])


def test_lists_of_bools_count_their_values_not_their_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bools are packed eight to a byte, and Arrow's 32-bit offsets count values: a window of
    ragged bools holds more values than bytes, and its chunks are cut by its values."""
    part = pa.array([[True] * 100] * 2, pa.list_(pa.bool_()))  # 200 values, ~40 bytes
    assert part.nbytes < 100
    monkeypatch.setattr(convert, "CHUNK_BYTES", 300)
    assert len(Chunks([part] * 6).chunks) == 6
    shapes = pa.array([[10, 10]] * 2, pa.list_(pa.int32(), 2))  # 2-d records: a struct
    fields = list(schema.ragged_type(pa.bool_(), 2))
    nd = pa.StructArray.from_arrays([part, shapes], fields=fields)
    assert len(Chunks([nd] * 6).chunks) == 6
