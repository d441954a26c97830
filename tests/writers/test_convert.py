from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.errors import RecordError, SchemaMismatchError
from snapshot_cli.readers.convert import batch_to_numpy
from snapshot_cli.schema import format_type, kind, ragged_type
from snapshot_cli.writers.convert import Batch, conform, to_batches
from snapshot_cli.writers.records import RecordBuffer


def build(records: list[dict], ragged: frozenset[str] = frozenset()) -> pa.RecordBatch:
    buf = RecordBuffer(ragged)
    for r in records:
        buf.add(r)
    (batch,) = buf.take()
    return batch


def test_fixed_shape_arrays_become_tensors_and_come_back() -> None:
    imgs = [np.arange(24, dtype=np.uint8).reshape(2, 3, 4) + i for i in range(5)]
    batch = build([{"img": im, "y": i} for i, im in enumerate(imgs)])
    assert isinstance(batch.schema.field("img").type, pa.FixedShapeTensorType)
    assert format_type(batch.schema.field("img").type) == "uint8[2,3,4]"
    back = batch_to_numpy(batch)
    assert back["img"].shape == (5, 2, 3, 4) and back["img"].dtype == np.uint8
    np.testing.assert_array_equal(back["img"], np.stack(imgs))
    assert back["y"].dtype == np.int64


def test_varying_shapes_become_ragged_with_shape() -> None:
    arrays = [np.ones((i + 1, 2), np.float32) * i for i in range(4)]
    batch = build([{"boxes": a} for a in arrays])
    assert kind(batch.schema.field("boxes").type) == "ragged"
    back = batch_to_numpy(batch)["boxes"]
    for got, want in zip(back, arrays, strict=True):
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_declared_ragged_stays_ragged_when_uniform() -> None:
    batch = build([{"t": np.arange(3, dtype=np.int32)}] * 4, ragged=frozenset({"t"}))
    assert batch.schema.field("t").type == pa.list_(pa.int32())


def test_scalars_strings_bytes_bools() -> None:
    batch = build([{"i": 1, "f": 2.5, "b": True, "s": "é", "raw": b"\x00", "n": np.float16(1)}])
    types = {f.name: str(f.type) for f in batch.schema}
    assert types == {
        "i": "int64",
        "f": "double",
        "b": "bool",
        "s": "string",
        "raw": "binary",
        "n": "halffloat",
    }
    back = batch_to_numpy(batch)
    assert back["s"][0] == "é" and back["raw"][0] == b"\x00" and back["b"].dtype == bool


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([{"x": None}], "None"),
        ([{"x": object()}], "type object"),
        ([{"x": {"a": 1, "b": 2}}], r"type dict; .*flatten it into columns .*\(x_a, \.\.\.\)"),
        ([{"x": np.zeros(2, complex)}], "dtype complex128"),
        ([{"x": np.array([["a"]])}], "dtype <U1"),
        ([{}], "empty dict"),
        ([{1: 2}], "keys must be str"),
        ([{"x": 1}, {"y": 1}], "missing 'x'; unexpected 'y'"),
        ([{"x": 1}, {"x": "a"}], "column 'x' changed type.*int64 scalar before, str now"),
        ([{"x": 1}, {"x": 1.0}], "column 'x' changed type"),
        ([{"x": 2**64}], "outside the int64 range"),
        ([{"x": np.zeros(2)}, {"x": np.zeros((2, 2))}], "number of dimensions"),
        # one value of a pyarrow table's rows
        ([{"x": pa.scalar(5)}], r"type Int64Scalar; .*a pyarrow scalar: store v.as_py\(\)"),
        ([{"x": pa.array([1, 2])}], r"type Int64Array; .*store v.to_numpy\(\)"),
        ([{"x": pa.chunked_array([[1]])}], r"type ChunkedArray; .*store v.to_numpy\(\)"),
    ],
)
def test_bad_records_name_the_column(records: list[dict], message: str) -> None:
    with pytest.raises(RecordError, match=message):
        build(records)


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        (["a", 1], r"flat list of str"),  # text mixed with a number
        (np.array([["a", "b"]]), r"more than one dimension: make it a flat list of str"),
        (np.array([[b"a"]]), r"flat list of bytes"),
        (
            np.array([1, 2], dtype=object),
            r"one numeric dtype",
        ),  # (one holding None: test_text_arrays.py)
        (np.zeros(2, np.complex64), r"real and imaginary parts"),
        (np.datetime64("2024-01-01"), r"astype\('datetime64\[s\]'\)"),  # days
        (np.array(["2024-01-01"], "M8[s]"), r"one per record.*astype\('int64'\)"),
        (np.array([1], "timedelta64[s]"), r"astype\('int64'\)"),
        (np.zeros(2, [("a", "i4"), ("b", "f4")]), r"each field .* own column"),
        (np.zeros(2, np.longdouble), r"convert it to one of these"),
    ],
)
def test_every_dtype_a_column_cannot_hold_says_what_to_do(value: object, hint: str) -> None:
    if isinstance(value, np.ndarray) and value.dtype == np.float64:
        pytest.skip("long double is float64 on this platform")  # (not on x86-64 Linux)
    with pytest.raises(RecordError, match=rf"column 'x' has dtype .*: .*{hint}"):
        build([{"x": value}])


def test_an_empty_column_name_is_refused() -> None:
    """Every batch's first check (records, ``snap.Batch``, Arrow, DataFrames all end here)."""
    with pytest.raises(RecordError, match=r"a column name is empty \(''\) in \['', 'y'\]"):
        conform(build([{"": 1, "y": 2}]), None)


@given(st.text(min_size=1, max_size=6), st.characters(max_codepoint=0x9F), st.integers(0, 6))
def test_a_column_name_with_a_control_character_is_refused(name: str, c: str, at: int) -> None:
    """ "label\r" from a CSV with CRLF line ends could not be selected as "label"; a name
    holding a terminal escape or a newline was printed as it is by inspect and head."""
    bad = name[:at] + c + name[at:]
    if c >= " " and not c >= "\x7f":
        return  # a printable character: fine wherever it is
    with pytest.raises(RecordError, match=r"holds a control character; strip it"):
        conform(build([{bad: 1}]), None)
    printable = "".join(ch for ch in name if ch >= " " and not "\x7f" <= ch <= "\x9f")
    if printable:
        assert conform(build([{printable: 1}]), None).schema.names == [printable]


def test_later_batch_with_other_shape_is_a_mismatch_with_a_hint() -> None:
    first = build([{"img": np.zeros((2, 2), np.uint8)}])
    second = build([{"img": np.zeros((3, 3), np.uint8)}])
    with pytest.raises(SchemaMismatchError, match=r"uint8\[2,2\] before, uint8\[3,3\] now.*ragged"):
        conform(second, first.schema)


@pytest.mark.parametrize(
    ("first", "later"),
    [(pa.large_string(), pa.string()), (pa.binary(), pa.large_binary())],
)
def test_two_arrow_types_that_look_the_same_are_told_apart(
    first: pa.DataType, later: pa.DataType
) -> None:
    """A large_string then a string said "changed type: str before, str now"."""
    schema = pa.schema([("s", first)])
    later_batch = pa.record_batch([pa.array(["x"], later)], names=["s"])
    with pytest.raises(SchemaMismatchError) as exc:
        conform(later_batch, schema)
    assert f"(Arrow {first}) before" in str(exc.value)
    assert f"(Arrow {later}) now; yield one of them throughout" in str(exc.value)
    assert f"array.cast(pa.{first}())" in str(exc.value)


def test_ragged_target_makes_uniform_batch_ragged() -> None:
    first = build([{"t": np.arange(2)}, {"t": np.arange(3)}])
    buf = RecordBuffer()
    buf.add({"t": np.arange(4)}, first.schema)
    assert conform(buf.take()[0], first.schema).num_rows == 1


def test_batch_columns() -> None:
    batch = to_batches(
        Batch(img=np.zeros((4, 2, 2), np.float32), y=np.arange(4), s=["a", "b", "c", "d"]),
        None,
        frozenset(),
    )[0]
    assert format_type(batch.schema.field("img").type) == "float32[2,2]"
    assert batch.num_rows == 4
    with pytest.raises(RecordError, match="different lengths"):
        to_batches(Batch(a=np.zeros(3), b=np.zeros(4)), None, frozenset())
    with pytest.raises(RecordError, match="0-d array"):
        to_batches(Batch(a=np.array(1.0)), None, frozenset())


def test_arrow_batches_are_checked_and_reordered() -> None:
    schema = pa.schema([("a", pa.int64()), ("b", pa.string())])
    other_order = pa.record_batch({"b": ["x"], "a": [1]})
    assert conform(other_order, schema).schema.names == ["a", "b"]
    with pytest.raises(SchemaMismatchError, match="column 'a' changed type"):
        conform(pa.record_batch({"b": ["x"], "a": [1.5]}), schema)


@pytest.mark.parametrize(
    "column",
    [
        pa.array([1, None, 3]),
        pa.array([[1], [None], [2, 3]], pa.list_(pa.int32())),
        pa.array(["a", "b", None]),
    ],
)
@pytest.mark.parametrize("form", ["RecordBatch", "Table", "Batch", "Batch of a ChunkedArray"])
def test_nulls_in_a_yielded_arrow_batch_are_refused(
    tmp_path: Path, column: pa.Array, form: str
) -> None:
    """A `snap.Batch` with an Arrow column holding nulls was written and committed, and its
    shard then read as damaged ("holds 1 missing values, which snap does not write")."""
    batch = pa.RecordBatch.from_arrays([column], names=["c"])
    item = {
        "RecordBatch": batch,
        "Table": pa.Table.from_batches([batch]),
        "Batch": snap.Batch(c=column, i=np.arange(3)),
        "Batch of a ChunkedArray": snap.Batch(c=pa.chunked_array([column[:1], column[1:]])),
    }[form]

    def preprocess() -> Any:
        yield item

    with pytest.raises(snap.RecordError, match="column 'c' of a yielded .* holds 1 missing"):
        snap.create(preprocess, str(tmp_path / "s"), workers=0)
    assert not (tmp_path / "s" / "manifest.json").exists()


@pytest.mark.parametrize("form", ["Table", "Batch"])
def test_an_arrow_ragged_column_whose_shapes_lie_is_refused(tmp_path: Path, form: str) -> None:
    """An Arrow struct in snap's own n-d ragged encoding (``data``, ``shape``) whose shape
    does not hold its values was committed, and its shard then read as damaged."""
    data = pa.array([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0]], pa.list_(pa.float64()))
    shape = pa.FixedSizeListArray.from_arrays(pa.array([2, 2, 2, 2], pa.int32()), 2)
    fields = list(ragged_type(pa.float64(), 2))
    column = pa.StructArray.from_arrays([data, shape], fields=fields)
    item = pa.table({"r": column}) if form == "Table" else snap.Batch(r=column)

    def preprocess() -> Any:
        yield item

    with pytest.raises(snap.RecordError, match=r"'r': record 1 has shape \[2, 2\] but 3 values"):
        snap.create(preprocess, str(tmp_path / "s"), workers=0)
    assert not (tmp_path / "s" / "manifest.json").exists()


@pytest.mark.parametrize(
    ("first", "later", "message"),
    [
        (1, 2**70, "'v' has an int outside the int64 range"),
        ("ok", "caf\udce9", "'v' has a str that is not valid Unicode"),
        (1.5, 2, "'v' changed type between records: float64 scalar before, int64 scalar now"),
        (True, 1, "'v' changed type between records: bool scalar before, int64 scalar now"),
        ("a", b"a", "'v' changed type between records: str before, bytes now"),
    ],
)
def test_a_value_unlike_the_columns_first_is_checked_however_plain(
    first: Any, later: Any, message: str
) -> None:
    """Plain Python values like the column's first one take a short path: it keeps the
    checks that can fail for them."""
    buffer = RecordBuffer()
    buffer.add({"v": first})
    buffer.add({"v": first})
    with pytest.raises((RecordError, SchemaMismatchError), match=re.escape(message)):
        buffer.add({"v": later})


_NUMERIC = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
_NUMERIC += ["float16", "float32", "float64"]


@given(first=st.sampled_from(_NUMERIC), later=st.sampled_from(_NUMERIC), array=st.booleans())
def test_a_dtype_change_is_told_a_dtype_that_holds_both(
    first: str, later: str, array: bool
) -> None:
    """Every pair of numeric dtypes, as scalars or arrays: the message names a dtype, and
    converting both values to it, as it says, makes records the buffer takes."""

    def value(dtype: str) -> Any:
        return np.ones(3, dtype) if array else np.dtype(dtype).type(1)

    buffer = RecordBuffer()
    buffer.add({"v": value(first)})
    if first == later:
        buffer.add({"v": value(later)})
        return
    with pytest.raises(SchemaMismatchError) as exc:
        buffer.add({"v": value(later)})
    form = r"value\.astype\(np\.(\w+)\)" if array else r"np\.(\w+)\(value\)$"
    found = re.search(form, str(exc.value))
    assert found, str(exc.value)
    common = getattr(np, found.group(1))
    fixed = RecordBuffer()
    for dtype in (first, later):
        v = value(dtype)
        fixed.add({"v": v.astype(common) if array else common(v)})
    assert [b.num_rows for b in fixed.take()] == [2]


def test_a_dict_of_equal_lists_with_text_is_told_it_may_be_a_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A batched map's output ({"x": [...], "text": [...]}) yielded as one record: its text
    column was refused, with advice to yield a Batch. A list of text is a value now (a
    token classification's {"tokens": [...], "tags": [...]} is one record of lists), so
    it is stored as one record of lists, with a warning (once) that says how to yield the
    records it may hold."""
    from snapshot_cli.writers import advice

    monkeypatch.setattr(advice, "_said_columnwise", False)
    columns = {"x": [1, 2, 3], "text": ["a", "b", "c"]}
    with caplog.at_level("WARNING", "snapshot_cli"):
        one = snap.create(lambda: iter([columns]), str(tmp_path / "r"), workers=0)
    assert one.num_records == 1
    (said,) = [r.getMessage() for r in caplog.records if "column by column" in r.getMessage()]
    assert said.endswith(
        "; if this dict holds 3 records column by column (as a batched map returns), "
        "yield snapshot_cli.Batch(**columns) instead"
    )
    done = snap.create(lambda: iter([Batch(**columns)]), str(tmp_path / "s"), workers=0)
    assert done.num_records == 3
    assert [r["text"] for r in snap.open(tmp_path / "s").head(3)] == ["a", "b", "c"]
    # lists of other lengths, no text, or a type changed after the first record: no such guess
    monkeypatch.setattr(advice, "_said_columnwise", False)
    caplog.clear()
    with caplog.at_level("WARNING", "snapshot_cli"):
        for record in ({"x": [1, 2], "text": ["a", "b", "c"]}, {"x": [1, 2], "y": [3, 4]}):
            RecordBuffer().add(record)
    assert not caplog.records
    buffer = RecordBuffer()
    buffer.add({"x": 1})
    with pytest.raises(RecordError) as caught:
        buffer.add({"x": ["a", "b"]})
    assert "column by column" not in str(caught.value)


def test_a_ragged_list_column_is_not_sized_by_its_first_value() -> None:
    """A Batch column given as a list of arrays is copied into one block sized by its first
    value; one large first value of 100,000 tried to allocate 279 GiB."""
    col = [np.full(3_000_000, 7, np.uint8)] + [
        np.full(i % 5, i % 251, np.uint8) for i in range(99_999)
    ]
    (batch,) = to_batches(Batch(x=col), None, frozenset())
    assert kind(batch.schema.field("x").type) == "ragged"
    back = batch.column(0)
    assert len(back) == 100_000 and len(back[0].values) == 3_000_000
    assert [len(back[i].values) for i in (1, 2, 99_999)] == [0, 1, (99_998) % 5]


@pytest.mark.parametrize("kind", ["U", "S"])
def test_a_batch_column_of_2d_text_is_a_list_of_texts_a_record(tmp_path: Any, kind: str) -> None:
    """A 2-D column of numbers in a Batch is a row a record; one of text was refused as
    "more than one dimension", though each row is a record's flat list of texts."""
    tags = np.array([["cat", "animal"], ["car", "vehicle"], ["", "x"]]).astype(kind)
    snap.create(lambda: [snap.Batch(v=tags)], str(tmp_path / "s"), workers=0)
    rows = [
        list(v) for b in snap.open(str(tmp_path / "s")).loader(3, shuffle=False) for v in b["v"]
    ]
    assert rows == tags.tolist()
    with pytest.raises(RecordError, match="flat list of"):  # (a record's: 2-D)
        snap.create(lambda: [snap.Batch(v=tags[None])], str(tmp_path / "t"), workers=0)
