"""A value is stored as it was given or refused naming its column, never silently changed:
Python ints past int64 in a list (numpy makes a float64 of them), pandas' missing values in a
Series or array (numpy makes NaN or None of them); and what pandas users yield routinely is
taken: text Series and object arrays, frames filtered to no rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.writers.convert import Batch, to_batches
from snapshot_cli.writers.records import RecordBuffer

INT64 = (-(2**63), 2**63 - 1)
ints = st.one_of(
    st.integers(-3, 3),
    st.integers(*INT64),
    st.integers(2**63, 2**64 + 3),  # past int64 (uint64's, and past it)
    st.integers(-(2**64), -(2**63) - 1),
)


def rows(n: int) -> st.SearchStrategy[list[list[int]]]:
    return st.lists(st.lists(ints, min_size=n, max_size=n), min_size=1, max_size=3)


int_lists = st.one_of(
    st.lists(ints, min_size=1, max_size=6),
    st.integers(1, 3).flatmap(rows),
)


def leaves(value: Any) -> list[Any]:
    return [x for v in value for x in leaves(v)] if isinstance(value, list) else [value]


def stored_values(column: pa.Array) -> list[Any]:
    """The values an Arrow column holds, flattened (tensors and lists alike)."""
    if isinstance(column, pa.ExtensionArray):  # (a fixed-shape tensor)
        column = column.storage
    while pa.types.is_list(column.type) or pa.types.is_fixed_size_list(column.type):
        column = column.flatten()
    return column.to_pylist()


def stored_or_refused(build: Any, value: list[Any]) -> None:
    try:
        batches = build()
    except snap.RecordError as err:
        assert "'x'" in str(err)
        assert any(not INT64[0] <= v <= INT64[1] for v in leaves(value)), err
        return
    got = [v for b in batches for v in stored_values(b.column("x"))]
    assert got == leaves(value)
    assert all(type(v) is int for v in got)  # (1.8446744073709552e19 == 2**64 - 1 is False)


@settings(max_examples=60, deadline=None)
@given(int_lists)
def test_a_list_of_ints_in_a_record_is_stored_exactly_or_refused(value: list[Any]) -> None:
    def build() -> list[pa.RecordBatch]:
        buffer = RecordBuffer()
        buffer.add({"x": value})
        return buffer.take()

    stored_or_refused(build, value)


@settings(max_examples=60, deadline=None)
@given(int_lists)
def test_a_batch_column_of_int_lists_is_stored_exactly_or_refused(value: list[Any]) -> None:
    column = [value, value]  # two records, each the list

    stored_or_refused(lambda: to_batches(Batch(x=column), None, frozenset()), column)


NULLABLE = [
    *(f"{s}Int{w}" for s in ("", "U") for w in (8, 16, 32, 64)),
    "Float32",
    "Float64",
    "boolean",
    "string",
    "category",
    "datetime64[ns]",
    "timedelta64[ns]",
    "object",
]
A_VALUE = {"boolean": True, "string": "a", "category": "a", "object": "a"}


def with_missing(dtype: str) -> Any:
    value = A_VALUE.get(dtype, 1)
    if dtype.startswith(("datetime", "timedelta")):
        value = pd.Timestamp(0) if dtype.startswith("datetime") else pd.Timedelta(1)
    return pd.array([value, None], dtype=dtype)


@pytest.mark.parametrize("dtype", NULLABLE)
@pytest.mark.parametrize("container", ["array", "Series", "Index"])
def test_pandas_missing_values_are_refused_wherever_they_are_given(
    dtype: str, container: str
) -> None:
    values = with_missing(dtype)
    value = {"array": values, "Series": pd.Series(values), "Index": pd.Index(values)}[container]
    for build in (
        lambda: RecordBuffer().add({"x": value}),  # one record's value
        lambda: to_batches(Batch(x=value), None, frozenset()),  # a batch's column
        lambda: to_batches(pd.DataFrame({"x": values}), None, frozenset()),
    ):
        with pytest.raises(snap.RecordError, match=r"'x'.*1 missing value \(NA\).*fill"):
            build()


@pytest.mark.parametrize("dtype", [d for d in NULLABLE if "Int" in d or "Float" in d])
def test_pandas_nullable_numbers_without_missing_values_keep_their_values(
    tmp_path: Path, dtype: str
) -> None:
    values = pd.array([1, 2], dtype=dtype)

    def preprocess() -> Any:
        yield {"x": pd.Series(values), "i": 0}
        yield Batch(x=[pd.Series(values)], i=[1])

    snap.create(preprocess, str(tmp_path / "out"), workers=0)
    rows = snap.open(str(tmp_path / "out")).head(2)
    for row in rows:
        assert row["x"].dtype == values.to_numpy().dtype
        assert row["x"].tolist() == [1, 2]


@pytest.mark.parametrize(
    "value",
    [
        np.array(["a", "bc", ""], dtype=object),
        pd.Series(["a", "bc", ""]),
        pd.Series(["a", "bc", ""], dtype="string"),
        pd.DataFrame({"s": ["a", "bc", ""]})["s"].to_numpy(),
        np.array([b"a", b"", b"\x00"], dtype=object),
    ],
    ids=["object-array", "Series", "string-Series", "frame-values", "object-bytes"],
)
def test_a_1d_sequence_of_text_in_a_record_is_a_list_of_texts(tmp_path: Path, value: Any) -> None:
    def preprocess() -> Any:
        yield {"tags": value}

    snap.create(preprocess, str(tmp_path / "out"), workers=0)
    snapshot = snap.open(str(tmp_path / "out"))
    kind = pa.binary() if isinstance(value[0], bytes) else pa.string()
    assert snapshot.schema.field("tags").type == pa.list_(kind)
    assert list(snapshot.head(1)[0]["tags"]) == list(value)


def test_an_object_array_of_other_values_is_still_refused() -> None:
    with pytest.raises(snap.RecordError, match="'x' has dtype object"):
        RecordBuffer().add({"x": np.array(["a", 1], dtype=object)})


FRAMES = {
    "numbers": lambda: pd.DataFrame({"x": np.arange(3), "y": np.ones(3, np.float32)}),
    "object text": lambda: pd.DataFrame({"x": np.arange(3), "s": np.array(list("abc"), object)}),
    "pandas text": lambda: pd.DataFrame({"x": np.arange(3), "s": pd.array(list("abc"), "string")}),
    "lists": lambda: pd.DataFrame({"x": np.arange(3), "toks": [[1, 2], [], [3]]}),
    "bytes": lambda: pd.DataFrame({"x": np.arange(3), "b": [b"a", b"b", b"c"]}),
    "times": lambda: pd.DataFrame({"t": pd.date_range("2020", periods=3)}),
    "category": lambda: pd.DataFrame({"c": pd.Categorical(list("abc"))}),
}


@pytest.mark.parametrize("make", FRAMES.values(), ids=FRAMES.keys())
def test_a_frame_or_batch_filtered_to_no_rows_adds_no_records(tmp_path: Path, make: Any) -> None:
    @snap.ragged("toks")
    def preprocess(i: int) -> Any:
        frame = make()
        yield frame[frame.index > i]  # the last input's frame has no rows
        yield Batch(**{name: frame[name].to_numpy()[i + 1 :] for name in frame.columns})

    snap.create(preprocess, str(tmp_path / "out"), inputs=[0, 1, 2], workers=0)
    snapshot = snap.open(str(tmp_path / "out"))
    assert snapshot.num_records == 2 * (2 + 1 + 0)


@pytest.mark.parametrize(
    "item",
    [
        {"a\ud800b": 1},
        Batch(**{"a\udc80": [1, 2]}),  # (pandas 3 makes no DataFrame of such a name)
    ],
    ids=["record", "Batch"],
)
def test_a_column_name_that_is_not_unicode_text_is_refused_by_name(item: Any) -> None:
    with pytest.raises(snap.RecordError, match=r"column name .* not valid Unicode text"):
        if isinstance(item, dict) and not isinstance(item, Batch):
            RecordBuffer().add(item)
        else:
            to_batches(item, None, frozenset())


@settings(max_examples=40, deadline=None)
@given(
    text=st.text(max_size=6).map(lambda t: t + "\x00" * 2),
    data=st.binary(max_size=6).map(lambda b: b + b"\x00"),
)
def test_numpy_text_scalars_keep_their_trailing_nuls(text: str, data: bytes) -> None:
    """``np.bytes_(b"ab\\x00")`` came back as ``b"ab"``: ``.item()`` and ``str()`` drop a
    numpy text scalar's trailing NULs, which the scalar itself holds (a values probe)."""
    given = {"s": np.str_(text), "b": np.bytes_(data), "ls": [np.str_(text), np.str_("x")],
             "lb": [np.bytes_(data)]}  # fmt: skip
    assert len(given["s"]) == len(text) and len(given["b"]) == len(data)  # (numpy keeps them)
    buffer = RecordBuffer()
    buffer.add(given)
    (row,) = pa.Table.from_batches(buffer.take()).to_pylist()
    assert (row["s"], row["b"], row["ls"], row["lb"]) == (text, data, [text, "x"], [data])


texts = st.text(max_size=4).map(lambda t: t + "\x00" * 2)
datas = st.binary(max_size=4).map(lambda b: b + b"\x00")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(texts, datas, st.booleans(), st.booleans()), min_size=1, max_size=8))
def test_text_of_any_record_keeps_its_trailing_nuls(given: list[Any]) -> None:
    """Every record's numpy text scalar, not only the first's: the first record of a batch
    takes the general path, each one like it a fast path that called ``.item()`` (every
    record but a batch's first lost its NULs; a probe)."""
    buffer = RecordBuffer()
    for text, data, numpy_text, numpy_data in given:
        buffer.add({"s": np.str_(text) if numpy_text else text,
                    "b": np.bytes_(data) if numpy_data else data})  # fmt: skip
    stored = pa.Table.from_batches(buffer.take()).to_pylist()
    assert [(r["s"], r["b"]) for r in stored] == [(t, d) for t, d, _, _ in given]


@given(st.integers(-(2**70), -(2**63) - 1) | st.integers(2**63, 2**70))
def test_an_int_past_int64_is_refused_with_advice_that_fits_it(value: int) -> None:
    """A negative int below int64 was told to "use a numpy uint64 scalar", which holds no
    negative number (a values probe): uint64 is offered only for what it holds."""
    for values in ([value], [1, value]):  # (its first record's, and a later one's)
        buffer = RecordBuffer()
        with pytest.raises(snap.RecordError, match="outside the int64 range") as caught:
            for v in values:
                buffer.add({"x": v})
            buffer.take()
        said = str(caught.value)
        if "a positive one below 2**64: give it as a numpy uint64" not in said:  # (numpy's
            # overflow in a column of ints taken as they came says both: which is not known)
            assert ("np.uint64(n)" in said) == (0 < value < 2**64), said
            assert f"({value})" in said, said
        assert "float" in said and "text" in said
