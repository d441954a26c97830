"""A record that breaks the rules is named by its place in what the pipeline yielded, wherever
it falls against the record batches snap cuts (records are buffered, so a type the task wrote
in an earlier batch is met only by a later one)."""

from __future__ import annotations

import datetime
import decimal
import enum
import fractions
import re
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.progress import ordinal
from snapshot_cli.writers.records import RecordBuffer


def good(k: int) -> dict[str, Any]:
    return {"id": k, "vec": np.full(3, k, np.float32), "text": f"r{k}"}


# Every way one record can differ from the ones before it, and the words that say how.
BREAKS: dict[str, tuple[Any, str]] = {
    "missing key": (lambda r: {"id": r["id"], "vec": r["vec"]}, "missing 'text'"),
    "extra key": (lambda r: {**r, "more": 1}, "unexpected 'more'"),
    "scalar type": (
        lambda r: {**r, "id": float(r["id"])},
        "one dtype: float(value) or np.float64(value)",
    ),
    "str for int": (lambda r: {**r, "id": "7"}, "column 'id' changed type"),
    "bytes for str": (lambda r: {**r, "text": b"x"}, "yield text as str throughout"),
    "array dtype": (
        lambda r: {**r, "vec": r["vec"].astype(np.float64)},
        "one dtype, e.g. value.astype(np.float64)",
    ),
    "array shape": (lambda r: {**r, "vec": np.zeros(4, np.float32)}, "column 'vec' changed"),
    "array ndim": (lambda r: {**r, "vec": np.zeros((3, 1), np.float32)}, "column 'vec' changed"),
    "scalar for array": (lambda r: {**r, "vec": 1.5}, "column 'vec' changed type"),
    "unsupported value": (lambda r: {**r, "id": None}, "column 'id' is None"),
}


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    kind=st.sampled_from(sorted(BREAKS)),
    at=st.integers(1, 40),
    batch_rows=st.sampled_from([1, 2, 3, 7, 16, 1024]),
    inputs=st.integers(1, 3),
)
def test_the_error_names_the_item_and_the_input_wherever_a_batch_ends(
    tmp_path_factory: pytest.TempPathFactory, kind: str, at: int, batch_rows: int, inputs: int
) -> None:
    """``at`` good records (over ``inputs`` inputs of one task), then a bad one: the message
    names the last input and the bad record's place among what that call yielded. (A shape
    change within the task's first record batch is no error: that column is ragged.)"""
    breaks, words = BREAKS[kind]
    per_input = -(-at // inputs)
    ragged = kind == "array shape" and per_input * inputs < batch_rows

    def preprocess(i: int) -> Any:
        for k in range(per_input):
            yield good(i * per_input + k)
        if i == inputs - 1:
            yield breaks(good(0))

    out = tmp_path_factory.mktemp("s") / "snap"
    options = {"workers": 0, "inputs_per_task": inputs, "batch_rows": batch_rows}
    if ragged:
        snap.create(preprocess, str(out), inputs=list(range(inputs)), **options)
        assert snap.open(str(out)).schema.field("vec").type == pa.list_(pa.float32())
        return
    with pytest.raises(snap.RecordError) as exc:
        snap.create(preprocess, str(out), inputs=list(range(inputs)), **options)
    message = str(exc.value)
    assert f"input {inputs - 1} (task 0), {ordinal(per_input + 1)} item it yielded: " in message
    assert words in message
    assert not (out / "manifest.json").exists()


def test_a_batch_unlike_the_records_before_it_is_named_too(tmp_path: Path) -> None:
    def preprocess() -> Any:
        yield good(0)
        yield good(1)
        yield snap.Batch(id=np.arange(2), vec=np.zeros((2, 3), np.float32))

    with pytest.raises(snap.SchemaMismatchError) as exc:
        snap.create(preprocess, str(tmp_path / "s"), workers=0)
    assert "the single call (no inputs), 3rd item it yielded: a batch" in str(exc.value)
    assert "(missing 'text')" in str(exc.value)


@pytest.mark.parametrize(
    ("n", "text"),
    [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"), (12, "12th"), (13, "13th"),
     (21, "21st"), (102, "102nd"), (111, "111th"), (5001, "5,001st")],
)  # fmt: skip
def test_ordinal(n: int, text: str) -> None:
    assert ordinal(n) == text


def test_numpy_text_scalars_and_arrays_of_one_text_per_record_are_text(tmp_path: Path) -> None:
    """Iterating a numpy string array gives ``np.str_`` items, a str's subclass: refused as
    "dtype <U3 ... join the strings", as if each were a list of words. A Batch column of
    such an array (one text per record) was refused the same way."""
    names = np.array(["cat", "dög", ""])
    raw = np.array([b"\x00a", b"b", b""])

    def preprocess() -> Any:
        for name, blob in zip(names, raw, strict=True):
            yield {"name": name, "blob": blob, "zero_d": np.array(name)}
        yield snap.Batch(name=names, blob=raw, zero_d=names)

    snap.create(preprocess, str(tmp_path / "s"), workers=0)
    s = snap.open(str(tmp_path / "s"))
    assert [str(f.type) for f in s.schema] == ["string", "binary", "string"]
    rows = s.head(6)
    assert [r["name"] for r in rows] == ["cat", "dög", ""] * 2
    assert [r["zero_d"] for r in rows] == ["cat", "dög", ""] * 2
    assert [r["blob"] for r in rows] == [b"\x00a", b"b", b""] * 2
    with pytest.raises(snap.RecordError, match=r"column 'words' has dtype <U5.*a flat list of"):
        snap.create(lambda: iter([{"words": np.array([["hello", "world"]])}]),
                    str(tmp_path / "t"), workers=0)  # fmt: skip


def forms_of(v: list[Any]) -> list[Any]:
    """The ways a pipeline gives a list of text: a list, a tuple, a 1-D numpy array (not for
    none, nor where numpy would drop a value's trailing NULs)."""
    forms: list[Any] = [list, tuple]
    if v and not any(x.endswith("\0" if isinstance(x, str) else b"\0") for x in v):
        forms.append(np.array)
    return forms


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.data(),
    kind=st.sampled_from(["str", "bytes"]),
    cut=st.integers(1, 5),
)
def test_a_list_of_text_per_record_is_stored_as_one(
    tmp_path: Path, data: st.DataObject, kind: str, cut: int
) -> None:
    """Several captions or tags per record (``["a dog", "a cat"]``, a 1-D numpy array of
    text, a tuple; none at all: ``[]``) were refused ("join the strings") though a yielded
    Arrow table's list<string> column was stored: a record's are stored the same way and
    replayed as the lists they were, whatever their order and where batches are cut."""
    element = st.text(max_size=5) if kind == "str" else st.binary(max_size=5)
    lists = data.draw(st.lists(st.lists(element, max_size=4), min_size=1, max_size=12))
    given = [data.draw(st.sampled_from(forms_of(v)), label="form")(v) for v in lists]
    out = tmp_path / "s"

    def preprocess() -> Any:
        for i, v in enumerate(given):
            yield {"tags": v, "i": i}

    if not any(lists):  # nothing gives the column a type: empty lists are float64 arrays
        return
    snap.create(preprocess, str(out), workers=0, batch_rows=cut, overwrite=True)
    s = snap.open(str(out))
    element_type = pa.string() if kind == "str" else pa.binary()
    assert s.schema.field("tags").type == pa.list_(element_type)
    got = {int(i): [*t] for b in s.loader(5) for i, t in zip(b["i"], b["tags"], strict=True)}
    assert [got[i] for i in range(len(lists))] == lists


class _Colour(enum.Enum):
    RED = 1


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        (decimal.Decimal("1.5"), "store it as a float (float(v)), or as text"),
        (fractions.Fraction(1, 3), "store it as a float (float(v)), or as text"),
        (datetime.date(2020, 1, 2), "store it as a time (np.datetime64(v, 's')), a number"),
        (datetime.time(3), "store it as a number (seconds since midnight)"),
        (_Colour.RED, "store v.value or v.name"),
        (uuid.UUID(int=7), "store str(v) or v.bytes"),
        (Path("/a/b"), "store str(v))"),
        ({3, 1}, "store sorted(v) as an array"),
        (iter([1, 2]), "make it a list first (list(v))"),
        (object(), "convert it to one of these; lists with np.asarray"),
    ],
)
def test_a_value_of_another_type_is_told_what_to_store(value: Any, hint: str) -> None:
    """The hint was "convert lists with np.asarray" for every type, a Path or a date too."""
    buffer = RecordBuffer()
    with pytest.raises(
        snap.RecordError, match=rf"column 'v' has a value of type \w+; .*\({re.escape(hint)}"
    ):
        buffer.add({"v": value})


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    dtype=st.sampled_from([np.int64, np.int32, np.float32, np.uint8]),
    trail=st.sampled_from([(), (4,)]),
    cut=st.integers(1, 6),
)
def test_an_empty_list_takes_its_columns_dtype(
    data: st.DataObject, dtype: type, trail: tuple[int, ...], cut: int
) -> None:
    """``[]`` (an image without boxes, without labels) beside ``[3, 7]``: numpy makes an empty
    list a float64 array of shape (0,), which changed the column's type ("float64 array of
    shape (0,) before, int64 now"). It takes the column's dtype and trailing dimensions, from
    the values before it, the type the task wrote in an earlier record batch (the buffer is
    taken every ``cut`` records) or the first typed value after it."""
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=14), label="sizes")
    if not any(sizes):
        sizes[data.draw(st.integers(0, len(sizes) - 1), label="typed")] = 2
    values = [np.arange(n * int(np.prod(trail)), dtype=dtype).reshape(n, *trail) for n in sizes]
    given = [
        data.draw(st.sampled_from([[], ()]), label="empty")
        if n == 0
        else data.draw(st.sampled_from([v, v.tolist()] if dtype is np.int64 else [v]), label="v")
        for n, v in zip(sizes, values, strict=True)
    ]
    buffer = RecordBuffer(frozenset({"v"}), capacity=(cut, 1 << 20))  # @snap.ragged("v")
    schema: pa.Schema | None = None
    got: list[np.ndarray] = []
    typed = False
    for i, value in enumerate(given):
        buffer.add({"v": value}, schema)
        typed = typed or sizes[i] > 0
        if buffer.rows == cut or i == len(given) - 1:
            if not typed:
                continue  # nothing typed the column yet: it waits (until the task ends)
            for batch in buffer.take():
                schema = schema or batch.schema
                assert batch.schema == schema  # one type for the column in every batch
                got += snap_values(batch.column(0), dtype, len(trail) + 1)
    assert len(got) == len(values)
    for g, v in zip(got, values, strict=True):
        assert g.dtype == np.dtype(dtype) and g.shape == v.shape and np.array_equal(g, v)


def snap_values(column: pa.Array, dtype: type, ndim: int) -> list[np.ndarray]:
    from snapshot_cli import schema as schema_mod

    if ndim == 1:
        return [np.asarray(v.values.to_numpy(zero_copy_only=False), dtype) for v in column]
    data = column.field(schema_mod.RAGGED_DATA)
    shape = column.field(schema_mod.RAGGED_SHAPE)
    return [
        np.asarray(d.values.to_numpy(zero_copy_only=False), dtype).reshape(s.as_py())
        for d, s in zip(data, shape, strict=True)
    ]


def test_a_column_of_only_empty_lists_and_one_typed_later_says_why(tmp_path: Path) -> None:
    """A task whose records all had ``[]`` stored float64 (numpy's choice: there was nothing
    else), and a later task's int64 differed: the error says where the float64 came from."""

    @snap.ragged("labels")
    def labels(i: int) -> Any:
        return [{"labels": [] if i < 2 else [i, i + 1]}]

    said = r"If the float64 comes from empty lists: \[\] has no type.*dtype=np\.int64\)"
    with pytest.raises(snap.SchemaMismatchError, match=said):
        snap.create(labels, str(tmp_path / "s"), inputs=range(4), inputs_per_task=2, workers=0)
    snap.create(labels, str(tmp_path / "t"), inputs=range(4), inputs_per_task=4, workers=0)
    got = [b["labels"] for b in snap.open(tmp_path / "t").loader(4, shuffle=False)][0]
    assert [a.tolist() for a in got] == [[], [], [2, 3], [3, 4]]
    assert all(a.dtype == np.int64 for a in got)


def test_an_empty_list_after_a_batch_takes_the_type_the_task_wrote(tmp_path: Path) -> None:
    """No record before it in the task, but a batch: the empty list takes the type the task
    wrote (a ragged column's dtype and number of dimensions)."""

    @snap.ragged("labels", "boxes")
    def preprocess() -> Any:
        boxes = [np.ones((1, 4), np.float32), np.ones((2, 4), np.float32)]
        yield snap.Batch(labels=[np.array([1, 2]), np.array([3])], boxes=boxes)
        yield {"labels": [], "boxes": []}

    snap.create(preprocess, str(tmp_path / "s"), workers=0)
    *_, last = snap.open(tmp_path / "s").head(3)
    assert last["labels"].dtype == np.int64 and last["labels"].shape == (0,)
    assert last["boxes"].dtype == np.float32 and last["boxes"].ndim == 2


@pytest.mark.parametrize("given", [list, tuple])
def test_a_list_of_dicts_is_told_to_become_columns(given: type) -> None:
    """A detection dataset's annotations, ``[{"bbox": [...], "category_id": 3}, ...]``, as one
    value: numpy made it an object array, refused as "dtype object ... one numeric dtype",
    which does not say what to do with dicts."""
    annotations = given([{"bbox": [1, 2, 3, 4], "category_id": 3}, {"bbox": [5, 6, 7, 8]}])
    with pytest.raises(snap.RecordError) as caught:
        RecordBuffer().add({"image": np.zeros(3), "annotations": annotations})
    said = str(caught.value)
    assert "column 'annotations' has a list of 2 dicts" in said, said
    assert "annotations_bbox=np.array([d['bbox'] for d in annotations])" in said, said
    assert "@snapshot_cli.ragged" in said and "dtype object" not in said


@settings(max_examples=40, deadline=None)
@given(
    record_bytes=st.integers(1, 1 << 16),
    records=st.integers(1, 300),
    capacity_bytes=st.sampled_from([1 << 20, 1 << 30, 64 << 30, 1 << 50]),
)
def test_a_large_batch_capacity_is_not_allocated_before_records_need_it(
    record_bytes: int, records: int, capacity_bytes: int
) -> None:
    """``--batch-bytes 64GiB --batch-rows 10000000``: a task's first record allocated the
    whole buffer (64 GiB: "Unable to allocate", called a bug in snap in a worker), however
    few records it had. The column's block grows as records come, and holds them all."""
    from snapshot_cli.writers.records import FIRST_BLOCK_BYTES

    buffer = RecordBuffer(capacity=(10**9, capacity_bytes))
    for n in range(records):
        buffer.add({"v": np.full(record_bytes, n % 251, np.uint8)})
    assert buffer.columns is not None
    block = buffer.columns["v"].block
    assert block is not None
    assert block.nbytes <= max(FIRST_BLOCK_BYTES + record_bytes, 2 * records * record_bytes)
    (batch,) = buffer.take()
    values = batch.column(0).to_pylist()
    assert [v[0] for v in values] == [n % 251 for n in range(records)]
    assert {len(v) for v in values} == {record_bytes}
