"""Property test: whatever records a pipeline yields come back with the same dtype, shape, value."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import snapshot_cli as snap

DTYPES = [
    np.dtype(d)
    for d in ("bool", "int8", "uint8", "int32", "uint64", "float16", "float32", "float64")
]


@st.composite
def columns(draw: st.DrawFn) -> list[tuple[str, str, Any, tuple[int, ...]]]:
    kinds = draw(
        st.lists(
            st.sampled_from(["tensor", "ragged", "int", "float", "bool", "str", "bytes"]),
            min_size=1,
            max_size=5,
        )
    )
    cols = []
    for i, k in enumerate(kinds):
        dtype = draw(st.sampled_from(DTYPES))
        shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
        cols.append((f"c{i}_{k}", k, dtype, shape))
    return cols


@st.composite
def records(draw: st.DrawFn) -> list[dict[str, Any]]:
    cols = draw(columns())
    n = draw(st.integers(1, 30))
    out = []
    for _ in range(n):
        rec: dict[str, Any] = {}
        for name, k, dtype, shape in cols:
            if k == "tensor":
                rec[name] = draw(hnp.arrays(dtype, shape))
            elif k == "ragged":
                dims = tuple(draw(st.integers(0, 4)) for _ in shape)
                rec[name] = draw(hnp.arrays(dtype, dims))
            elif k == "int":
                rec[name] = draw(st.integers(-(2**63), 2**63 - 1))
            elif k == "float":
                rec[name] = draw(st.floats(allow_nan=True))
            elif k == "bool":
                rec[name] = draw(st.booleans())
            elif k == "str":
                rec[name] = draw(st.text(max_size=20))
            else:
                rec[name] = draw(st.binary(max_size=20))
        out.append(rec)
    return out


def read_back(path: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for batch in snap.open(path).iter_batches():
        n = len(next(iter(batch.values())))
        rows.extend({k: v[i] for k, v in batch.items()} for i in range(n))
    return rows


def assert_same(got: Any, want: Any) -> None:
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    elif isinstance(want, float):
        assert np.isnan(want) and np.isnan(got) or got == want
    else:
        assert got == want and type(got.item() if hasattr(got, "item") else got) is type(want)


def check_round_trip(recs: list[dict[str, Any]], codec: str, batch_rows: int, shard: int) -> None:
    path = f"memory://rt/{uuid.uuid4().hex}"

    def preprocess() -> Any:
        yield from recs

    ragged = frozenset(name for name in recs[0] if "_ragged" in name)
    snap.ragged(*ragged)(preprocess)
    info = snap.create(
        preprocess, path, workers=0, compression=codec, batch_rows=batch_rows, shard_size=shard
    )
    assert info.num_records == len(recs)
    back = read_back(path)
    assert len(back) == len(recs)
    for got, want in zip(back, recs, strict=True):
        assert got.keys() == want.keys()
        for key in want:
            assert_same(got[key], want[key])


@pytest.mark.parametrize("codec", ["zstd", "lz4", "none"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recs=records(), batch_rows=st.integers(1, 8), shard=st.integers(200, 20_000))
def test_round_trip(codec: str, recs: list[dict[str, Any]], batch_rows: int, shard: int) -> None:
    check_round_trip(recs, codec, batch_rows, shard)
