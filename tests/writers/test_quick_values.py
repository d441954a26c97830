"""Ragged arrays, lists of text, times and records of many numbers are taken by quick paths
(:mod:`snapshot_cli.writers.quick`) that store exactly what the general path stores: the
same record batches (schema, values, the sizes that cut them) and the same messages for a
value refused. The general path is had by turning the quick ones off."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli import schema as schema_mod
from snapshot_cli.writers import convert, quick, records
from snapshot_cli.writers.records import ColumnBuilder, RecordBuffer

DTYPES = [np.dtype(t) for t in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                                "uint32", "uint64", "float16", "float32", "float64")]  # fmt: skip


@contextlib.contextmanager
def general_path() -> Iterator[None]:
    """Every value through :func:`values.normalise` and :func:`values.classify`, a ragged
    column built by :func:`schema.ragged_array`: the writer before its quick paths."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(quick, "array_fits", lambda value: False)
        mp.setattr(quick, "text_list", lambda value, cls: None)
        mp.setattr(quick, "plan", lambda record, builders: None)
        mp.setattr(quick, "ragged_column", lambda col, target: None)
        mp.setattr(quick, "ragged_array", schema_mod.ragged_array)
        yield


def outcome(items: list[dict[str, Any]], capacity: tuple[int, int] = (7, 1 << 20)) -> Any:
    """What a buffer makes of ``items``: the record batches (serialised) cut where a task's
    writer cuts them (every ``capacity`` records or bytes), its size after each record, or
    the error (type and message) and where."""
    buffer, sizes, out = RecordBuffer(capacity=capacity), [], []
    try:
        for record in items:
            buffer.add(record)
            sizes.append((buffer.rows, buffer.nbytes))
            if buffer.rows >= capacity[0] or buffer.nbytes >= capacity[1]:
                out += [(b.schema, b.serialize().to_pybytes()) for b in buffer.take()]
        if buffer.rows:
            out += [(b.schema, b.serialize().to_pybytes()) for b in buffer.take()]
    except snap.RecordError as err:
        return ("error", type(err), str(err), len(sizes))
    return out, sizes


def both(items: list[dict[str, Any]], **kw: Any) -> Any:
    quick_way = outcome(items, **kw)
    with general_path():
        general = outcome(items, **kw)
    assert quick_way == general
    return quick_way


def batch_outcome(columns: dict[str, Any], schema: pa.Schema | None, ragged: frozenset) -> Any:
    try:
        built = convert.batch_from_columns(columns, schema, ragged)
    except snap.RecordError as err:
        return ("error", type(err), str(err))
    return [(b.schema, b.serialize().to_pybytes()) for b in built]


def shapes(ndim: int) -> st.SearchStrategy[tuple[int, ...]]:
    return st.tuples(*[st.integers(0, 4)] * ndim)


@st.composite
def ragged_records(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Records of a ragged array (any dtype, 1-3 dims, zero dimensions, empty lists) and an
    id; at times one of another dtype or ndim, a str, or a list of numbers among them."""
    dtype, ndim = draw(st.sampled_from(DTYPES)), draw(st.integers(1, 3))
    out = []
    for k in range(draw(st.integers(1, 20))):
        shape = draw(shapes(ndim))
        value: Any = (np.arange(int(np.prod(shape))) % 7).astype(dtype).reshape(shape)
        odd = draw(st.integers(0, 30))
        if odd == 0:
            value = value.astype(draw(st.sampled_from(DTYPES)))
        elif odd == 1:
            value = np.zeros(draw(shapes(draw(st.integers(1, 3)))), dtype)
        elif odd == 2:
            value = "a str"
        elif odd == 3:
            value = []
        elif odd == 4:
            value = value.tolist()
        elif odd == 5:
            value = np.asfortranarray(value) if ndim > 1 else value[::-1]
        out.append({"x": value, "id": k})
    return out


@settings(max_examples=150, deadline=None)
@given(ragged_records())
def test_ragged_records_are_stored_as_the_general_path_stores_them(
    items: list[dict[str, Any]],
) -> None:
    both(items)
    both(items, capacity=(1024, 64))  # (cut by bytes: the sizes counted)


@settings(max_examples=100, deadline=None)
@given(ragged_records(), st.booleans(), st.booleans())
def test_ragged_batch_columns_are_built_as_the_general_path_builds_them(
    items: list[dict[str, Any]], declared: bool, typed: bool
) -> None:
    columns = {"x": [r["x"] for r in items], "id": np.arange(len(items))}
    ragged = frozenset({"x"}) if declared else frozenset()
    schema = None
    if typed:  # a later batch of a task: checked against what it wrote
        first = batch_outcome({"x": columns["x"][:1] * 2, "id": np.arange(2)}, None, ragged)
        schema = first[0][0] if isinstance(first, list) else None
    got = batch_outcome(columns, schema, ragged)
    with general_path():
        assert got == batch_outcome(columns, schema, ragged)


TEXTS = st.one_of(
    st.text(max_size=6),  # empty, non-ASCII
    st.sampled_from(["", "caption", "légende", "标题", "\ud800 lone", "e\u0301"]),
)


@st.composite
def text_records(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Records of a list (or tuple) of str, empty or not; at times bytes among them, a
    np.str_, a lone surrogate, a str instead of a list."""
    out = []
    for k in range(draw(st.integers(1, 20))):
        value: Any = draw(st.lists(TEXTS, max_size=5))
        odd = draw(st.integers(0, 20))
        if odd == 0 and value:
            value[0] = value[0].encode("utf-8", "surrogatepass")
        elif odd == 1 and value:
            value[-1] = np.str_(value[-1])
        elif odd == 2:
            value = tuple(value)
        elif odd == 3:
            value = "a caption"
        elif odd == 4:
            value = [v.encode("utf-8", "surrogatepass") for v in value]
        out.append({"captions": value, "id": k})
    return out


@settings(max_examples=150, deadline=None)
@given(text_records())
def test_lists_of_text_are_stored_as_the_general_path_stores_them(
    items: list[dict[str, Any]],
) -> None:
    both(items)
    both(items, capacity=(1024, 40))
    columns = {"captions": [r["captions"] for r in items], "id": np.arange(len(items))}
    got = batch_outcome(columns, None, frozenset())
    with general_path():
        assert got == batch_outcome(columns, None, frozenset())


NUMBERS = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
           np.uint64, np.float16, np.float32, np.float64, bool, float, int]  # fmt: skip


@st.composite
def number_records(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Records of numpy scalars of every dtype, Python numbers and a time of one unit (NaT
    at times); at times a value of another type, an int past int64, or another key order."""
    kinds = draw(st.lists(st.sampled_from(NUMBERS), min_size=1, max_size=6))
    unit = draw(st.sampled_from(["s", "ms", "us", "ns"]))
    out = []
    for k in range(draw(st.integers(1, 20))):
        record: dict[str, Any] = {f"c{i}": kind(k % 2) for i, kind in enumerate(kinds)}
        record["t"] = np.datetime64(k, unit)
        odd = draw(st.integers(0, 25))
        if odd == 0:
            record["t"] = np.datetime64("NaT", unit)
        elif odd == 1:
            record["c0"] = draw(st.sampled_from(NUMBERS))(1)
        elif odd == 2:
            record["c0"] = 2**64
        elif odd == 3:
            record = dict(reversed(record.items()))
        elif odd == 4:
            record["t"] = np.timedelta64(k, unit)
        out.append(record)
    return out


@settings(max_examples=150, deadline=None)
@given(number_records())
def test_records_of_numbers_and_times_are_stored_as_the_general_path_stores_them(
    items: list[dict[str, Any]],
) -> None:
    both(items)


# messages of values refused, as they were (each case also in the properties above)


def added(values: list[Any]) -> str:
    buffer = RecordBuffer()
    with pytest.raises(snap.RecordError) as err:
        for value in values:
            buffer.add({"x": value})
    return str(err.value)


def test_a_ragged_value_of_another_dtype_or_ndim_is_refused_as_before() -> None:
    arrays = [np.zeros(3, np.int32), np.zeros(5, np.int32)]
    assert added([*arrays, np.zeros(2, np.int64)]) == (
        "column 'x' changed type between records: int32 array of shape (3,) before, int64 "
        "array of shape (2,) now; give every record's array one dtype, e.g. "
        "value.astype(np.int64)"
    )
    assert added([*arrays, np.zeros((2, 2), np.int32)]) == (
        "column 'x' changed number of dimensions between records: shape (3,) before, (2, 2) "
        "now (ragged columns must keep the same ndim)"
    )
    assert added([*arrays, "tokens"]).startswith(
        "column 'x' changed type between records: int32 array of shape (3,) before, str now"
    )


def test_a_missing_time_is_refused_as_before() -> None:
    times = [np.datetime64(1, "ms"), np.datetime64(2, "ms"), np.datetime64("NaT", "ms")]
    assert added(times) == (
        "column 'x' holds 1 missing time (NaT); snap columns have no missing values: fill "
        "them or leave those records out"
    )


# the quick paths are taken (each of these counts failed before them)


def counting(mp: pytest.MonkeyPatch, module: Any, name: str) -> list[Any]:
    calls: list[Any] = []
    real = getattr(module, name)
    mp.setattr(module, name, lambda *a: calls.append(a) or real(*a))
    return calls


def test_ragged_arrays_and_text_lists_skip_the_general_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Records of a ragged array and a list of captions: each column's first two values
    are classified (the second makes the column ragged), none after them, and the column's
    type is looked at once, not for every value (a 2-D Batch spent 45% of its time there)."""
    general = counting(monkeypatch, records, "normalise")
    kinds = counting(monkeypatch, schema_mod, "kind")
    typed = pa.schema([("x", schema_mod.ragged_type(pa.int32(), 2)),
                       ("captions", pa.list_(pa.string()))])  # fmt: skip
    buffer = RecordBuffer()
    for k in range(500):
        buffer.add({"x": np.zeros((k % 5, 2), np.int32), "captions": ["a", "b"][: k % 3]}, typed)
    buffer.take()
    assert len(general) <= 4
    assert len(kinds) <= 4


def test_a_batch_of_ragged_arrays_is_built_in_one_go(monkeypatch: pytest.MonkeyPatch) -> None:
    appended = counting(monkeypatch, ColumnBuilder, "append")
    boxes = [np.ones((k % 4, 4), np.float32) for k in range(1000)]
    (batch,) = convert.batch_from_columns({"boxes": boxes}, None, frozenset())
    assert appended == []
    assert batch.column(0).type == schema_mod.ragged_type(pa.float32(), 2)


def test_records_of_numbers_like_the_first_skip_their_builders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """100 float32 columns a record: the first record's values are checked, then records
    of the same keys and types are appended as they are (0.25 us a value before)."""
    appended = counting(monkeypatch, ColumnBuilder, "append")
    xs = np.arange(100, dtype=np.float32)
    buffer = RecordBuffer(capacity=(1 << 20, 1 << 30))
    for k in range(50):
        buffer.add({f"c{j}": xs[j] + k for j in range(100)} | {"id": k})
    assert len(appended) == 101 + 49  # the first record's values, then the ids (int64 range)
    (batch,) = buffer.take()
    assert batch.column("c7").to_pylist() == [7.0 + k for k in range(50)]


def test_the_shards_written_are_those_of_the_general_path(tmp_path: Path) -> None:
    """A create of every shape: shard files byte-identical with the quick paths and without."""

    def make(item: int) -> Iterator[Any]:
        rng = np.random.default_rng(item)
        for k in range(300):
            yield {"tokens": rng.integers(0, 9, k % 13).astype(np.int32),
                   "boxes": rng.random((k % 5, 4), dtype=np.float32),
                   "captions": ["caption", "légende"][: k % 3], "t": np.datetime64(k, "us"),
                   "x": np.float32(k), "id": k}  # fmt: skip
        yield snap.Batch(tokens=[np.arange(k, dtype=np.int32) for k in range(9)],
                         boxes=[np.ones((k, 4), np.float32) for k in range(9)],
                         captions=[["a"] * (k % 2) for k in range(9)],
                         t=np.arange(9).astype("datetime64[us]"),
                         x=np.zeros(9, np.float32), id=np.arange(9))  # fmt: skip

    def shards(path: Path) -> list[bytes]:
        snap.create(make, path, inputs=[0, 1], workers=0, progress=False, batch_rows=64)
        return [p.read_bytes() for p in sorted((path / "shards").iterdir())]

    fast = shards(tmp_path / "quick")
    with general_path():
        assert shards(tmp_path / "general") == fast
