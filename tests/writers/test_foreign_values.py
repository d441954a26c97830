"""What preprocessing code in the wild yields besides numpy: torch, JAX and TensorFlow tensors,
PIL images, pandas DataFrames and Series, byte-swapped arrays. Each is stored as the numpy
array it converts to, or refused with the library's own reason, naming the column."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

import snapshot_cli as snap


def roundtrip(tmp_path: Path, *items: Any, workers: int = 0) -> list[dict[str, Any]]:
    def preprocess() -> Any:
        yield from items

    out = str(tmp_path / "out")
    snap.create(preprocess, out, workers=workers)
    return snap.open(out).head(100)


def test_torch_tensors_in_records_and_batches_are_stored_as_their_arrays(tmp_path: Path) -> None:
    image = torch.arange(12, dtype=torch.uint8).reshape(3, 2, 2)
    rows = roundtrip(
        tmp_path,
        {"image": image, "label": torch.tensor(3)},
        snap.Batch(image=torch.stack([image, image + 1]), label=torch.tensor([4, 5])),
    )
    assert [int(r["label"]) for r in rows] == [3, 4, 5]
    for row, expected in zip(rows, [image, image, image + 1], strict=True):
        assert row["image"].dtype == np.uint8
        np.testing.assert_array_equal(row["image"], expected.numpy())


def test_a_tensor_numpy_cannot_take_is_refused_with_torchs_reason(tmp_path: Path) -> None:
    weights = torch.ones(3, requires_grad=True)
    with pytest.raises(snap.RecordError, match=r"'w' has a Tensor .*requires grad.*detach"):
        roundtrip(tmp_path, {"w": weights})
    with pytest.raises(snap.RecordError, match=r"'w' has a Tensor .*BFloat16.*\(t.float\(\)\)"):
        roundtrip(tmp_path, {"w": torch.ones(3, dtype=torch.bfloat16)})  # (it said .numpy())
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.parametrize("wrap", [list, tuple])
def test_a_list_of_tensors_numpy_cannot_take_is_refused_naming_the_column(
    tmp_path: Path, wrap: Any
) -> None:
    """A list of boxes holding a tensor that needs grad: torch's RuntimeError passed through
    as "a bug in snap", naming no column."""
    boxes = wrap([torch.ones(4, requires_grad=True), torch.zeros(4)])
    with pytest.raises(snap.RecordError, match=r"'boxes' has a .*requires grad.*torch.stack"):
        roundtrip(tmp_path, {"boxes": boxes})
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_sparse_matrix_is_told_what_to_store(tmp_path: Path) -> None:
    """A TF-IDF row (scipy CSR) was told "lists with np.asarray", which makes an object."""
    import scipy.sparse

    row = scipy.sparse.csr_matrix(np.eye(3)[:1])
    with pytest.raises(snap.RecordError, match=r"type csr_matrix; .*store v.toarray\(\) \(dense\)"):
        roundtrip(tmp_path, {"tfidf": row})


TF_VALUES = """
import sys, tensorflow as tf, snapshot_cli as snap
for value in (tf.ragged.constant([[1, 2], [3]]), tf.sparse.from_dense(tf.eye(2))):
    try:
        snap.create(lambda: iter([{"v": value}]), sys.argv[1], workers=0)
    except snap.RecordError as err:
        print(err)
"""


def test_tensorflow_values_numpy_cannot_take_are_told_what_to_store(tmp_path: Path) -> None:
    """A RaggedTensor or SparseTensor was told "lists with np.asarray", which makes neither
    (TensorFlow in a subprocess, as in tests/readers/test_tf.py)."""
    res = subprocess.run([sys.executable, "-c", TF_VALUES, str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    ragged, sparse = res.stdout.strip().splitlines()
    assert "type RaggedTensor; " in ragged and "v.flat_values.numpy() and v.row_lengths()" in ragged
    assert "type SparseTensor; " in sparse and "tf.sparse.to_dense(v).numpy()" in sparse


def test_low_precision_arrays_are_told_how_to_store_them(tmp_path: Path) -> None:
    """JAX's bfloat16 (ml_dtypes, numpy kind "V") was told to store "each field of a
    structured array as its own column"; the bits stored as uint16 view back exactly. (A JAX
    array of it: test_jax_arrays.)"""
    import ml_dtypes

    x = np.array([1.5, -2.25, 3.0], dtype=ml_dtypes.bfloat16)
    for item in ({"x": x}, snap.Batch(x=np.stack([x, x]))):
        with pytest.raises(snap.RecordError, match=r"dtype bfloat16; .*v.view\(np.uint16\)"):
            roundtrip(tmp_path, item)
    rows = roundtrip(tmp_path, {"x": np.asarray(x).view(np.uint16)})
    np.testing.assert_array_equal(rows[0]["x"].view(np.asarray(x).dtype), np.asarray(x))


@pytest.mark.parametrize("name", ["float8_e5m2", "float8_e4m3fn", "int4", "float4_e2m1fn"])
def test_one_byte_types_of_ml_dtypes_are_told_their_width(tmp_path: Path, name: str) -> None:
    """float8_e5m2 has numpy kind "f" (the others "V"): it passed the dtype check and failed in
    pyarrow with "Unsupported numpy type 262"; and every hint said uint16, bfloat16's width."""
    import ml_dtypes

    x = np.array([1.5, -2.0, 0.5], dtype=getattr(ml_dtypes, name))
    for item in ({"x": x}, {"x": x[0]}, snap.Batch(x=np.stack([x, x]))):
        with pytest.raises(snap.RecordError, match=rf"dtype {name}; .*v.view\(np.uint8\)"):
            roundtrip(tmp_path, item)
    rows = roundtrip(tmp_path, {"x": x.view(np.uint8)})
    np.testing.assert_array_equal(rows[0]["x"].view(x.dtype), x)


JAX_VALUES = """
import sys, jax.numpy as jnp, snapshot_cli as snap
def preprocess():
    yield {"x": jnp.arange(4, dtype=jnp.float32), "n": jnp.int32(7)}
snap.create(preprocess, sys.argv[1], workers=0)
half = jnp.array([1.5, -2.25], dtype=jnp.bfloat16)
import jax
key = jax.random.key(0)  # (its hint was torch's, "t.detach().cpu().numpy()")
for item in ({"x": half}, snap.Batch(x=jnp.stack([half, half])), {"x": key}):
    try:
        snap.create(lambda: iter([item]), sys.argv[1] + "-bf16", workers=0)
    except snap.RecordError as err:
        print(err)
"""


def test_jax_arrays(tmp_path: Path) -> None:
    # JAX runs in a subprocess: imported in this one, it would make later fork()s (a torch
    # DataLoader's workers, in whichever test runs next here) warn, an error under pytest
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, "-c", JAX_VALUES, str(out)], capture_output=True,
                         text=True, timeout=120, env=dict(os.environ, JAX_PLATFORMS="cpu"),
                         check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr
    refused = res.stdout.splitlines()
    assert len(refused) == 3 and all("dtype bfloat16; " in r and "v.view(np.uint16)" in r
                                      for r in refused[:2]), res.stdout  # fmt: skip
    assert refused[2].endswith("; yield its bits: np.asarray(jax.random.key_data(key))")
    rows = snap.open(out).head()
    np.testing.assert_array_equal(rows[0]["x"], np.arange(4, dtype=np.float32))
    assert rows[0]["x"].dtype == np.float32 and rows[0]["n"] == 7


def test_pil_images_are_stored_as_height_width_channels(tmp_path: Path) -> None:
    pixels = np.random.default_rng(0).integers(0, 255, (5, 4, 3), dtype=np.uint8)
    gray = Image.fromarray(pixels[..., 0])
    rows = roundtrip(tmp_path, {"img": Image.fromarray(pixels), "gray": gray}, workers=1)
    np.testing.assert_array_equal(rows[0]["img"], pixels)
    np.testing.assert_array_equal(rows[0]["gray"], pixels[..., 0])


def test_a_dataframe_is_a_batch_of_its_columns_without_the_index(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {"id": [10, 11, 12], "text": ["a", "bb", "ccc"], "score": [0.5, 1.5, 2.5]},
        index=[7, 8, 9],
    )
    frame["kind"] = pd.Categorical(["x", "y", "x"])
    series = {"id": [13], "text": ["d"], "score": [3.5], "kind": ["z"]}
    batch = snap.Batch({name: pd.Series(values) for name, values in series.items()})
    rows = roundtrip(tmp_path, frame[frame.id > 10], batch)
    assert [r["id"] for r in rows] == [11, 12, 13]
    assert [r["text"] for r in rows] == ["bb", "ccc", "d"]
    assert [r["kind"] for r in rows] == ["y", "x", "z"]
    assert set(rows[0]) == {"id", "text", "score", "kind"}  # no index column


@pytest.mark.parametrize("library", ["pandas", "polars", "pyarrow"])
def test_a_table_as_a_records_value_is_refused_naming_the_column(
    tmp_path: Path, library: str
) -> None:
    """``{"boxes": pd.DataFrame({"cls_id": [2**53 + 1, 7], "score": [0.5, 0.9]})}`` was
    stored as a 2-D float64 array: the names dropped, the ids rounded."""
    import polars as pl
    import pyarrow as pa

    data = {"cls_id": [2**53 + 1, 7], "score": [0.5, 0.9]}
    table = {"pandas": pd.DataFrame, "polars": pl.DataFrame, "pyarrow": pa.table}[library](data)
    with pytest.raises(snap.RecordError) as caught:
        roundtrip(tmp_path, {"image_id": 1, "boxes": table})
    said = str(caught.value)
    assert f"column 'boxes' has a {type(table).__name__}, a table of named columns" in said
    assert "yield the table itself (each row a record)" in said, said


def test_a_dataframe_returned_not_yielded_is_one_batch(tmp_path: Path) -> None:
    def preprocess() -> Any:
        return pd.DataFrame({"a": [1, 2]})

    out = str(tmp_path / "out")
    snap.create(preprocess, out, workers=0)
    assert [r["a"] for r in snap.open(out).head(5)] == [1, 2]


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (pd.DataFrame({0: [1], 1: [2]}), r"column names that are not str: \[0, 1\]"),
        (pd.DataFrame([[1, 2]], columns=["a", "a"]), r"names \['a'\] more than once"),
        (
            pd.DataFrame({"a": pd.array([1, None], dtype="Int64")}),
            r"'a' of a .* holds 1 missing value \(NA\)",
        ),
        (
            pd.DataFrame([[1, 2]], columns=pd.MultiIndex.from_tuples([("a", "x"), ("a", "y")])),
            r"not str: \[\('a', 'x'\), \('a', 'y'\)\]; rename them \(df.columns = \['_'.join",
        ),
        (
            pd.DataFrame({"t": pd.period_range("2020-01", periods=1, freq="M")}),
            r"'t' has a value of type Period",
        ),
    ],
)
def test_a_dataframe_snap_cannot_store_is_refused_by_column(
    tmp_path: Path, frame: pd.DataFrame, message: str
) -> None:
    with pytest.raises(snap.RecordError, match=message):
        roundtrip(tmp_path, frame)


def test_byte_swapped_arrays_and_scalars_come_back_in_native_order(tmp_path: Path) -> None:
    values = np.arange(6, dtype=">i4").reshape(2, 3)
    rows = roundtrip(
        tmp_path,
        {"a": values[0], "s": np.float64(2.5).astype(">f8")},
        snap.Batch(a=values[1:], s=np.array([3.5], dtype=">f8")),
    )
    assert rows[0]["a"].dtype == np.dtype("=i4")
    np.testing.assert_array_equal(np.stack([r["a"] for r in rows]), values)
    assert [float(r["s"]) for r in rows] == [2.5, 3.5]


def test_a_list_of_records_yielded_whole_says_to_yield_from_it(tmp_path: Path) -> None:
    with pytest.raises(snap.RecordError, match=r"yielded a value of type list; .*`yield from`"):
        roundtrip(tmp_path, [{"a": 1}, {"a": 2}])


class _Point(NamedTuple):
    a: int
    b: float


@dataclasses.dataclass
class _Row:
    a: int
    b: float


def _not_records() -> list[tuple[str, Any, str, Callable[[Any], list[Any]] | None]]:
    """(kind, what a pipeline yields, the advice's words, the advice applied: what to yield)"""
    frame = pd.DataFrame({"a": [1, 2], "b": [0.5, 1.5]})
    return [
        ("namedtuple", _Point(1, 0.5), "record._asdict()", lambda x: [x._asdict()]),
        (
            "dataclass",
            _Row(1, 0.5),
            "dataclasses.asdict(record)",
            lambda x: [dataclasses.asdict(x)],
        ),
        ("series", next(frame.iterrows())[1], "row.to_dict()", lambda x: [x.to_dict()]),
        ("list", [{"a": 1}, {"a": 2}], "`yield from`", list),
        ("tuple", ({"a": 1},), "`yield from`", list),
        ("generator", ({"a": i} for i in range(2)), "`yield from` it", list),
        ("map", map(dict, [{"a": 1}]), "`yield from` it", list),
        ("none", None, "returns nothing", None),
        ("int", 5, "yield {'x': value}", lambda x: [{"x": x}]),
        ("str", "text", "yield {'x': value}", lambda x: [{"x": x}]),
        ("array", np.arange(3), "yield {'x': value}", lambda x: [{"x": x}]),
        ("tensor", torch.arange(3), "yield {'x': value}", lambda x: [{"x": x}]),
        ("numpy scalar", np.float32(2.5), "yield {'x': value}", lambda x: [{"x": x}]),
    ]


@pytest.mark.parametrize("kind", [k[0] for k in _not_records()])
def test_a_value_that_is_not_a_record_is_told_what_to_yield(tmp_path: Path, kind: str) -> None:
    _, item, words, advice = next(k for k in _not_records() if k[0] == kind)
    with pytest.raises(snap.RecordError) as err:
        roundtrip(tmp_path / "as_is", item)
    assert f"yielded a value of type {type(item).__name__}" in str(err.value)
    assert words in str(err.value)
    if advice is None:
        return
    fresh = next(k for k in _not_records() if k[0] == kind)[1]  # iterators are spent
    advised = advice(fresh)  # what the message says to yield is what snap takes
    assert len(roundtrip(tmp_path / "advised", *advised)) == len(advised)


MASKED = np.ma.masked_array([[1.0, 2.0], [3.0, 4.0]], mask=[[False, True], [False, False]])


@pytest.mark.parametrize(
    "item",
    [
        {"x": MASKED[0]},  # a record's value
        {"x": np.ma.masked},  # the masked constant
        snap.Batch(x=MASKED),  # a Batch's column
        snap.Batch(x=[MASKED[1], MASKED[0]]),  # a Batch's column of per-record values
    ],
    ids=["record", "constant", "batch", "batch-list"],
)
def test_a_masked_array_with_masked_values_is_refused(tmp_path: Path, item: Any) -> None:
    """numpy converts a masked array to its data, so the values hidden under the mask were
    stored as if they were real (2.0 here)."""
    with pytest.raises(snap.RecordError, match=r"column 'x' is a numpy masked array with 1 of"):
        roundtrip(tmp_path, item)
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_masked_array_with_nothing_masked_is_its_data(tmp_path: Path) -> None:
    rows = roundtrip(tmp_path, {"x": MASKED[1]}, snap.Batch(x=np.ma.masked_array([[5.0, 6.0]])))
    np.testing.assert_array_equal(np.stack([r["x"] for r in rows]), [[3.0, 4.0], [5.0, 6.0]])
