"""Arrow columns to the numpy a batch holds (:func:`snapshot_cli.readers.convert.column_to_numpy`)
for the columns of variable width: ragged arrays of any rank, text, bytes, lists of text (and
the other Arrow types a yielded table may hold: times, structs); and the records a shuffled
batch takes out of a window's column (:func:`~snapshot_cli.readers.convert.take_rows`).

Each record of a ragged column is its own array in an object array, whatever the shapes: records
of equal shapes are not made one n-d array, and a record of zero values keeps its dtype and
shape. Columns sliced or taken out of a larger array (a batch of a window) give their own
records only, an empty slice too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snapshot_cli import arrays, schema
from snapshot_cli.readers import convert
from snapshot_cli.readers.convert import column_to_numpy, take_rows

DTYPES = [np.dtype(d) for d in ("bool", "int8", "uint16", "int32", "int64", "float16", "float64")]


def ragged_column(values: list[np.ndarray], dtype: np.dtype) -> pa.Array:
    """The column snap stores for these arrays (one rank): ``list<T>``, or for n-d arrays the
    struct of their flat values and shapes (:func:`snapshot_cli.schema.ragged_type`)."""
    t = pa.from_numpy_dtype(dtype)
    ndim = values[0].ndim
    flat = pa.array([v.reshape(-1) for v in values], type=pa.list_(t))
    if ndim == 1:
        return flat
    shapes = pa.array([list(v.shape) for v in values], type=pa.list_(pa.int32(), ndim))
    return pa.StructArray.from_arrays(
        [flat, shapes], fields=list(schema.ragged_type(t, ndim))
    )  # fmt: skip


@st.composite
def ragged(draw: st.DrawFn) -> tuple[list[np.ndarray], np.dtype]:
    dtype = draw(st.sampled_from(DTYPES))
    ndim = draw(st.integers(1, 3))
    same = draw(st.booleans())  # every record of one shape: nothing may broadcast
    first = tuple(draw(st.integers(0, 3)) for _ in range(ndim))
    n = draw(st.integers(1, 12))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    values = []
    for _ in range(n):
        shape = first if same else tuple(draw(st.integers(0, 3)) for _ in range(ndim))
        values.append((rng.random(shape) * 100).astype(dtype))
    return values, dtype


def check(got: np.ndarray, want: list[Any]) -> None:
    assert got.dtype == object and got.shape == (len(want),)
    for g, w in zip(got, want, strict=True):
        if isinstance(w, np.ndarray):
            assert isinstance(g, np.ndarray) and g.dtype == w.dtype and g.shape == w.shape
            assert np.array_equal(g, w)
        else:
            assert type(g) is type(w) and g == w


@settings(max_examples=200, deadline=None)
@given(ragged(), st.data())
def test_each_record_of_a_ragged_column_is_its_own_array(
    case: tuple[list[np.ndarray], np.dtype], data: st.DataObject
) -> None:
    values, dtype = case
    col = ragged_column(values, dtype)
    check(column_to_numpy(col), values)
    start = data.draw(st.integers(0, len(values)))
    stop = data.draw(st.integers(start, len(values)))
    check(column_to_numpy(col.slice(start, stop - start)), values[start:stop])
    picks = data.draw(st.lists(st.integers(0, len(values) - 1), max_size=8))
    check(column_to_numpy(col.take(pa.array(picks, pa.int64()))), [values[i] for i in picks])


@pytest.mark.parametrize("ndim", [1, 2])
def test_a_batch_of_a_ragged_column_converts_its_own_values_only(
    ndim: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch served in order is a slice of its window's column, whose list array holds the
    values of the whole window: bool values are unpacked (a copy), and unpacking all of them
    for each batch made a window of 200,000 records replay at 0.06 M records/s."""
    records = [np.ones((3,) * ndim, bool)] * 1000
    part = ragged_column(records, np.dtype(bool)).slice(500, 2)
    seen: list[int] = []
    original = arrays.to_numpy
    monkeypatch.setattr(arrays, "to_numpy", lambda a: (seen.append(len(a)), original(a))[1])
    check(column_to_numpy(part), records[500:502])
    assert seen and max(seen) <= 2 * 3**ndim  # (and 3 offsets, 2 shapes)


@pytest.mark.parametrize("kind", ["string", "binary"])
def test_text_and_bytes_are_object_arrays_of_str_and_bytes(kind: str) -> None:
    texts = ["", "a cat", "ünïcode ✓", "x" * 1000]
    items: list[Any] = texts if kind == "string" else [t.encode() for t in texts]
    col = pa.array(items, type=pa.string() if kind == "string" else pa.binary())
    check(column_to_numpy(col), items)
    check(column_to_numpy(col.slice(1, 2)), items[1:3])
    check(column_to_numpy(col.take(pa.array([3, 0, 3]))), [items[3], items[0], items[3]])


def test_lists_of_text_are_arrays_of_str_per_record() -> None:
    records = [["a", "bb"], [], ["ccc"], ["d", "e"]]
    col = pa.array(records, type=pa.list_(pa.string()))
    got = column_to_numpy(col.slice(1, 3))
    assert got.dtype == object and got.shape == (3,)
    assert [list(g) for g in got] == records[1:]
    assert all(isinstance(g, np.ndarray) and g.dtype == object for g in got)


@pytest.fixture(params=["compiled", "numpy"])
def take_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """take_rows through the compiled _ragged (what an install builds), or without it."""
    assert convert._ragged is not None  # built by `make test`'s install, never skipped
    if request.param == "numpy":
        monkeypatch.setattr(convert, "_ragged", None)
    return str(request.param)


@settings(  # take_path only picks the path: nothing to reset between examples
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ragged(), st.data())
def test_records_taken_from_a_ragged_column_are_arrows_take(
    take_path: str, case: tuple[list[np.ndarray], np.dtype], data: st.DataObject
) -> None:
    """A shuffled window's batch of a ragged column (a 1-d one of numbers gathered by the
    compiled _ragged or in numpy, not by Arrow's take): the records Arrow's take gives, out of
    a sliced column too, each a writable array of its own."""
    values, dtype = case
    col = ragged_column(values, dtype)
    start = data.draw(st.integers(0, len(values) - 1))
    part = col.slice(start)
    rows = np.array(
        data.draw(st.lists(st.integers(0, len(values) - start - 1), max_size=10)), np.int64
    )
    got = take_rows(part, rows)
    check(got, [values[start + i] for i in rows])
    check(got, list(column_to_numpy(part.take(pa.array(rows)))))
    assert all(g.flags.writeable for g in got)


def test_records_taken_from_other_columns_are_arrows_take() -> None:
    rows = np.array([1, 0, 1], np.int64)
    for col in (pa.array(["a", "b"]), pa.array([b"a", b"b"]), pa.array([[True], [False, True]]),
                pa.array([["a"], ["b", "c"]]), pa.array([1, 2])):  # fmt: skip
        want = column_to_numpy(col.take(pa.array(rows)))
        got = take_rows(col, rows)
        assert got.dtype == want.dtype and len(got) == 3, col.type
        for g, w in zip(got, want, strict=True):
            assert np.array_equal(g, w) if isinstance(w, np.ndarray) else g == w, col.type


TEXT_TYPES = [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()]


@settings(  # take_path only picks the path: nothing to reset between examples
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.sampled_from(TEXT_TYPES), st.lists(st.text(max_size=20), min_size=1, max_size=30),
       st.data())  # fmt: skip
def test_records_taken_from_a_text_column_are_arrows_take(
    take_path: str, t: pa.DataType, texts: list[str], data: st.DataObject
) -> None:
    """A shuffled window's batch of text or bytes (made by the compiled _ragged straight from
    the column's buffers, or Arrow's take and to_pylist): any text, of a sliced column, each
    record once or several times."""
    binary = pa.types.is_binary(t) or pa.types.is_large_binary(t)
    items: list[Any] = [x.encode() for x in texts] if binary else texts
    start = data.draw(st.integers(0, len(items) - 1))
    part = pa.array(items, t).slice(start)
    rows = np.array(data.draw(st.lists(st.integers(0, len(part) - 1), max_size=40)), np.int64)
    check(take_rows(part, rows), [items[start + i] for i in rows])


def test_other_arrow_columns_convert_as_arrows_to_numpy() -> None:
    """Lists of text, times (a zone's too) and structs of a yielded Arrow table: what Arrow's
    ``to_numpy`` makes of them, which imports pandas (snap does not)."""
    columns = [
        pa.array([["a", "bb"], [], ["ccc"], ["d"]]),
        pa.array([[b"a"], [b"b", b""], [], [b"x"]]),
        pa.array([1, 2, 3, 4], pa.timestamp("ms")),
        pa.array([1, 2, 3, 4], pa.timestamp("us", tz="Europe/Paris")),
        pa.array([1, 2, 3, 4], pa.duration("s")),
        pa.array([{"a": 1, "b": "x"}, {"a": 2, "b": "y"}, {"a": 3, "b": ""}, {"a": 4, "b": "z"}]),
    ]
    for col in columns:
        for part in (col, col.slice(1, 2), col.slice(4)):
            got, want = column_to_numpy(part), part.to_numpy(zero_copy_only=False)
            assert got.dtype == want.dtype and got.shape == want.shape, part.type
            for g, w in zip(got, want, strict=True):
                if isinstance(w, np.ndarray):
                    assert g.dtype == w.dtype and g.tolist() == w.tolist(), part.type
                else:
                    assert g == w, part.type


@settings(  # take_path only picks the path: nothing to reset between examples
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.sampled_from([pa.list_(pa.string()), pa.list_(pa.binary()), pa.large_list(pa.string())]),
    st.lists(st.lists(st.text(max_size=4), max_size=4), min_size=1, max_size=20),
    st.data(),
)
def test_records_taken_from_a_column_of_lists_of_text_are_arrows_take(
    take_path: str, t: pa.DataType, lists: list[list[str]], data: st.DataObject
) -> None:
    """Captions or tags of a shuffled batch (taken by the compiled _ragged item by item, or
    by Arrow's take): each record an object array of its own ``str`` or ``bytes``."""
    binary = pa.types.is_binary(t.value_type)
    records: list[Any] = [[x.encode() for x in v] for v in lists] if binary else lists
    start = data.draw(st.integers(0, len(records) - 1))
    part = pa.array(records, t).slice(start)
    rows = np.array(data.draw(st.lists(st.integers(0, len(part) - 1), max_size=30)), np.int64)
    got = take_rows(part, rows)
    assert got.dtype == object and got.shape == (len(rows),)
    for g, i in zip(got, rows, strict=True):
        assert isinstance(g, np.ndarray) and g.dtype == object
        assert g.tolist() == records[start + i]


@settings(  # take_path only picks the path: nothing to reset between examples
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.lists(st.booleans(), max_size=12), min_size=1, max_size=20), st.data())
def test_records_taken_from_a_column_of_ragged_bools_are_arrows_take(
    take_path: str, lists: list[list[bool]], data: st.DataObject
) -> None:
    """Bools are bits, taken each from its byte: any bits, of a column sliced and of values
    that are themselves a slice (their first bit anywhere in a byte)."""
    skip = data.draw(st.integers(0, 9))
    flat = [b for v in lists for b in v]
    values = pa.array([False] * skip + flat, pa.bool_()).slice(skip)
    offsets = np.zeros(len(lists) + 1, np.int32)
    np.cumsum([len(v) for v in lists], out=offsets[1:])
    col = pa.ListArray.from_arrays(pa.array(offsets), values)
    start = data.draw(st.integers(0, len(lists) - 1))
    part = col.slice(start)
    rows = np.array(data.draw(st.lists(st.integers(0, len(part) - 1), max_size=30)), np.int64)
    got = take_rows(part, rows)
    assert got.dtype == object and got.shape == (len(rows),)
    for g, i in zip(got, rows, strict=True):
        assert g.dtype == bool and g.tolist() == lists[start + i]
