"""Every Arrow encoding of the same values is stored as one type (snapshot_cli/stored_types.py).

A yielded Table, RecordBatch, Batch of Arrow arrays, or another library's table (the Arrow
PyCapsule interface: polars, DuckDB) may bring text as ``large_string`` or ``string_view``,
lists as ``large_list`` or ``list_view``, a dictionary, run-end encoding, or an embedding as
a fixed-size list. These were stored as they came: a fixed-size list of floats came back as
one array per record (an object array) instead of an ``(n, k)`` array, a task yielding
``string_view`` and one yielding ``string`` disagreed on the schema, a ``list_view`` was cast
by pyarrow into an invalid array, and a polars DataFrame was refused. Hypothesis draws the
values, their encoding, the slice and chunks and the way they are yielded; every record
reads back as it was, in the type the plain encoding is stored as.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli import arrays
from snapshot_cli.schema import tensor_array
from snapshot_cli.stored_types import stored_type


@pytest.mark.parametrize(
    ("given_type", "stored"),
    [
        (pa.dictionary(pa.int8(), pa.string()), pa.string()),
        (pa.list_(pa.dictionary(pa.int32(), pa.int64())), pa.list_(pa.int64())),
        (pa.large_list(pa.dictionary(pa.int32(), pa.binary())), pa.list_(pa.binary())),
        (pa.list_(pa.dictionary(pa.int16(), pa.string()), 3), pa.list_(pa.string(), 3)),
        (
            pa.struct([("a", pa.dictionary(pa.int8(), pa.string())), ("b", pa.int8())]),
            pa.struct([("a", pa.string()), ("b", pa.int8())]),
        ),
        (
            pa.map_(pa.string(), pa.dictionary(pa.int8(), pa.float32())),
            pa.map_(pa.string(), pa.float32()),
        ),
        (pa.fixed_shape_tensor(pa.uint8(), [2, 2]), pa.fixed_shape_tensor(pa.uint8(), [2, 2])),
        (pa.string(), pa.string()),
        (pa.large_string(), pa.string()),
        (pa.string_view(), pa.string()),
        (pa.dictionary(pa.int8(), pa.large_string()), pa.string()),
        (pa.large_binary(), pa.binary()),
        (pa.binary_view(), pa.binary()),
        (pa.list_view(pa.float32()), pa.list_(pa.float32())),
        (pa.large_list_view(pa.large_string()), pa.list_(pa.string())),
        (pa.run_end_encoded(pa.int32(), pa.int64()), pa.int64()),
        (pa.run_end_encoded(pa.int16(), pa.string_view()), pa.string()),
        # a fixed-size list of numbers is a tensor; nested, of the nested shape
        (pa.list_(pa.float32(), 4), pa.fixed_shape_tensor(pa.float32(), [4])),
        (pa.list_(pa.list_(pa.int8(), 3), 2), pa.fixed_shape_tensor(pa.int8(), [2, 3])),
        (pa.list_(pa.bool_(), 2), pa.fixed_shape_tensor(pa.bool_(), [2])),
        # ... not of text, not of size 0, not inside another type
        (pa.list_(pa.string(), 2), pa.list_(pa.string(), 2)),
        (pa.list_(pa.float32(), 0), pa.list_(pa.float32(), 0)),
        (pa.list_(pa.list_(pa.float32(), 2)), pa.list_(pa.list_(pa.float32(), 2))),
        (
            pa.struct([("e", pa.list_(pa.float32(), 2)), ("s", pa.string_view())]),
            pa.struct([("e", pa.list_(pa.float32(), 2)), ("s", pa.string())]),
        ),
    ],
)
def test_each_encoding_is_stored_as_one_type(given_type: pa.DataType, stored: pa.DataType) -> None:
    assert stored_type(given_type) == stored
    assert stored_type(stored) == stored  # what is stored stays as it is


# --- the values, encoded every way Arrow has ------------------------------------------------


def _text(values: list[str], how: str) -> pa.Array:
    if how == "dictionary":
        return pa.array(values, pa.string()).dictionary_encode()
    if how == "run-end":
        return pc.run_end_encode(pa.array(values, pa.large_string()))
    return pa.array(values, {"plain": pa.string(), "large": pa.large_string(),
                             "view": pa.string_view()}[how])  # fmt: skip


def _bytes(values: list[bytes], how: str) -> pa.Array:
    if how == "dictionary":
        return pa.array(values, pa.binary()).dictionary_encode()
    t = {"plain": pa.binary(), "large": pa.large_binary(), "view": pa.binary_view()}
    return pa.array(values, t.get(how, pa.large_binary()))


def _ragged(values: list[list[int]], how: str) -> pa.Array:
    if how in ("view", "run-end"):
        # a list view whose lists lie in the values in reverse order (what views allow)
        sizes = [len(v) for v in values]
        flat = [x for v in reversed(values) for x in v]
        ends = np.cumsum([0, *reversed(sizes)])
        offsets = [int(ends[len(values) - 1 - i]) for i in range(len(values))]
        view = pa.ListViewArray.from_arrays(
            pa.array(offsets, pa.int32()), pa.array(sizes, pa.int32()), pa.array(flat, pa.int16())
        )
        assert view.to_pylist() == values
        return view
    if how == "dictionary":  # the values of the lists dictionary-encoded
        flat = pa.array([x for v in values for x in v], pa.int16()).dictionary_encode()
        offsets = pa.array(np.cumsum([0, *map(len, values)]), pa.int32())
        return pa.ListArray.from_arrays(offsets, flat)
    t = {"plain": pa.list_(pa.int16()), "large": pa.large_list(pa.int16())}[how]
    return pa.array(values, t)


def _tensor(values: np.ndarray, how: str) -> pa.Array:
    n, a, b = values.shape
    if how == "plain":  # as snap stores a numpy array
        return tensor_array(values)
    if how == "dictionary":  # an Arrow tensor whose dimensions have names
        t = pa.fixed_shape_tensor(pa.float32(), [a, b], dim_names=["h", "w"])
        return pa.ExtensionArray.from_storage(t, tensor_array(values).storage)
    if how == "run-end":  # an Arrow tensor laid out transposed (a permutation): its values
        # in (n, b, a) order, its logical shape (a, b)
        physical = np.ascontiguousarray(values.transpose(0, 2, 1))
        tensor = pa.FixedShapeTensorArray.from_numpy_ndarray(physical.transpose(0, 2, 1))
        assert list(tensor.type.permutation) == [1, 0]
        np.testing.assert_array_equal(tensor.to_numpy_ndarray(), values)
        return tensor
    if how == "large":  # nested fixed-size lists, built from the flat values
        inner = pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), b)
        return pa.FixedSizeListArray.from_arrays(inner, a)
    return pa.array(values.tolist(), pa.list_(pa.list_(pa.float32(), b), a))  # from Python


def _numbers(values: list[int], how: str) -> pa.Array:
    if how == "run-end":
        return pc.run_end_encode(pa.array(values, pa.int64()))
    if how == "dictionary":
        return pa.array(values, pa.int64()).dictionary_encode()
    return pa.array(values, pa.int64())


HOWS = ["plain", "large", "view", "dictionary", "run-end"]


class Exported:
    """Another library's table: only the Arrow PyCapsule interface (as polars and DuckDB have)."""

    def __init__(self, table: pa.Table) -> None:
        self._table = table

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self._table.__arrow_c_stream__(requested_schema)


class ExportedBatch:
    """One record batch through the PyCapsule interface (``__arrow_c_array__``)."""

    def __init__(self, batch: pa.RecordBatch) -> None:
        self._batch = batch

    def __arrow_c_array__(self, requested_schema: Any = None) -> Any:
        return self._batch.__arrow_c_array__(requested_schema)


def _yields(table: pa.Table, way: str, cuts: list[int]) -> list[Any]:
    """``table`` as a pipeline yields it: whole, as record batches of the given cuts, as one
    ``snap.Batch`` of chunked columns, or through the PyCapsule interface."""
    pieces = [
        table.slice(a, b - a) for a, b in zip([0, *cuts], [*cuts, table.num_rows], strict=True)
    ]
    pieces = [p for p in pieces if p.num_rows]
    if way == "Table":
        return [pa.concat_tables(pieces)] if pieces else []  # one Table of several chunks
    if way == "RecordBatch":
        return [b for p in pieces for b in p.to_batches()]
    if way == "Batch":
        return [snap.Batch({n: table.column(n) for n in table.column_names})]
    if way == "exported stream":
        return [Exported(p) for p in pieces]
    return [ExportedBatch(b) for p in pieces for b in p.combine_chunks().to_batches()]


WAYS = ["Table", "RecordBatch", "Batch", "exported stream", "exported batch"]

_words = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6)


@st.composite
def tables(draw: st.DrawFn) -> tuple[dict[str, Any], pa.Table]:
    n = draw(st.integers(1, 30))
    text = draw(st.lists(_words, min_size=n, max_size=n))
    blobs = draw(st.lists(st.binary(max_size=5), min_size=n, max_size=n))
    ragged = draw(st.lists(st.lists(st.integers(-300, 300), max_size=4), min_size=n, max_size=n))
    ints = draw(st.lists(st.integers(-5, 5), min_size=n, max_size=n))  # runs for run-end
    dense = np.arange(n * 6, dtype=np.float32).reshape(n, 2, 3) * draw(st.sampled_from([1, -0.5]))
    hows = {c: draw(st.sampled_from(HOWS)) for c in ("text", "blob", "ragged", "tensor", "int")}
    table = pa.table(
        {
            "text": _text(text, hows["text"]),
            "blob": _bytes(blobs, hows["blob"]),
            "ragged": _ragged(ragged, hows["ragged"]),
            "tensor": _tensor(dense, hows["tensor"]),
            "int": _numbers(ints, hows["int"]),
        }
    )
    values = {"text": text, "blob": blobs, "ragged": ragged, "tensor": dense, "int": ints}
    return values, table


STORED = pa.schema(
    [
        ("text", pa.string()),
        ("blob", pa.binary()),
        ("ragged", pa.list_(pa.int16())),
        ("tensor", pa.fixed_shape_tensor(pa.float32(), [2, 3])),
        ("int", pa.int64()),
    ]
)


def _read_back(out: str) -> dict[str, Any]:
    s = snap.open(out)
    batch = next(iter(s.loader(batch_size=10_000, shuffle=False)))
    return batch


def _check(out: str, values: dict[str, Any], rows: slice) -> None:
    s = snap.open(out)
    assert s.manifest.schema == STORED  # one type whatever the encoding
    got = _read_back(out)
    assert list(got["text"]) == values["text"][rows]
    assert list(got["blob"]) == values["blob"][rows]
    assert [list(v) for v in got["ragged"]] == values["ragged"][rows]
    assert got["tensor"].shape == values["tensor"][rows].shape  # one (n, 2, 3) array
    np.testing.assert_array_equal(got["tensor"], values["tensor"][rows])
    assert list(got["int"]) == values["int"][rows]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    drawn=tables(),
    way=st.sampled_from(WAYS),
    window=st.tuples(st.integers(0, 5), st.integers(0, 5)),
    cuts=st.lists(st.integers(1, 29), max_size=3),
)
def test_every_encoding_reads_back_as_yielded_in_the_stored_type(
    tmp_path_factory: pytest.TempPathFactory,
    drawn: tuple[dict[str, Any], pa.Table],
    way: str,
    window: tuple[int, int],
    cuts: list[int],
) -> None:
    values, table = drawn
    start = min(window[0], table.num_rows - 1)
    stop = max(start + 1, table.num_rows - window[1])
    sliced = table.slice(start, stop - start)  # offsets into every buffer
    cuts = sorted({c for c in cuts if 0 < c < sliced.num_rows})
    items = _yields(sliced, way, cuts)

    def preprocess() -> Any:
        yield from items

    out = str(tmp_path_factory.mktemp("enc") / "s")
    snap.create(preprocess, out, workers=0)
    _check(out, values, slice(start, stop))


def test_tasks_yielding_other_encodings_agree(tmp_path: Path) -> None:
    """Records, a Batch of numpy arrays, and Arrow tables of views, large types and
    fixed-size lists, one kind per task: one schema, every record back."""
    n = 4
    dense = np.arange(n * 6, dtype=np.float32).reshape(n, 2, 3)
    text = [f"w{i}" for i in range(n)]
    ragged = [list(range(i)) for i in range(n)]

    def preprocess(kind: int) -> Any:
        if kind == 0:  # records, as numpy and Python give them
            for i in range(n):
                yield {"text": text[i], "ragged": np.array(ragged[i], np.int16), "tensor": dense[i]}
        elif kind == 1:
            yield snap.Batch(
                text=np.array(text), ragged=[np.array(r, np.int16) for r in ragged], tensor=dense
            )
        else:
            how = HOWS[kind - 2]
            yield Exported(
                pa.table(
                    {
                        "text": _text(text, how),
                        "ragged": _ragged(ragged, how),
                        "tensor": _tensor(dense, how),
                    }
                )
            )

    out = str(tmp_path / "s")
    snap.ragged("ragged")(preprocess)
    snap.create(preprocess, out, inputs=list(range(2 + len(HOWS))), workers=0)
    s = snap.open(out)
    assert s.manifest.schema == pa.schema(
        [f for f in STORED if f.name in ("text", "ragged", "tensor")]
    )
    got = _read_back(out)
    assert list(got["text"]) == text * (2 + len(HOWS))
    assert [list(v) for v in got["ragged"]] == ragged * (2 + len(HOWS))
    np.testing.assert_array_equal(got["tensor"], np.concatenate([dense] * (2 + len(HOWS))))


@pytest.mark.parametrize(
    ("make", "column"),
    [
        (lambda: pa.array([[1.0], None], pa.list_view(pa.float32())), "c"),
        (lambda: pa.array([[1.0, None], [2.0, 3.0]], pa.list_(pa.float32(), 2)), "c"),
        (lambda: pa.array([[1.0, 2.0], None], pa.list_(pa.float32(), 2)), "c"),
        (  # a null list inside a fixed-size list: flattened, its values vanish
            lambda: pa.FixedSizeListArray.from_arrays(
                pa.array([[1.0, 2.0], None, [5.0, 6.0], [7.0, 8.0]], pa.list_(pa.float32(), 2)),
                2,
            ),
            "c",
        ),
        (lambda: pc.run_end_encode(pa.array([1, None, None], pa.int64())), "c"),
        (lambda: pa.array(["a", None], pa.string_view()), "c"),
        (lambda: pa.array(["a", None]).dictionary_encode(), "c"),
    ],
)
def test_nulls_in_any_encoding_are_refused(
    tmp_path: Path, make: Callable[[], pa.Array], column: str
) -> None:
    table = pa.table({column: make()})

    def preprocess() -> Any:
        yield Exported(table)

    with pytest.raises(snap.RecordError, match=rf"column '{column}' of a yielded .* missing value"):
        snap.create(preprocess, str(tmp_path / "s"), workers=0)
    assert not (tmp_path / "s" / "manifest.json").exists()


def test_a_non_table_export_is_refused_naming_what_to_yield(tmp_path: Path) -> None:
    class Column:  # a polars Series exports one array, not a table
        def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
            return pa.chunked_array([pa.array([1, 2])]).__arrow_c_stream__(requested_schema)

    def preprocess() -> Any:
        yield Column()

    with pytest.raises(
        snap.RecordError, match=r"yielded a value of type Column; .*its Arrow data is not a table"
    ):
        snap.create(preprocess, str(tmp_path / "s"), workers=0)


LIMIT = 600


def test_large_offsets_past_32_bits_are_split_across_record_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``large_string`` or ``large_list`` column may hold more than one 32-bit array can
    (the limit lowered to 600 bytes here): its rows are split, every record read back."""
    monkeypatch.setattr(arrays, "MAX_OFFSET", LIMIT, raising=False)
    words = [chr(65 + i % 26) * (i % 40) for i in range(300)]  # ~5,900 bytes in all
    lists = [list(range(i % 30)) for i in range(300)]
    table = pa.table(
        {
            "text": pa.array(words, pa.large_string()),
            "ragged": pa.array(lists, pa.large_list(pa.int8())),
        }
    )

    def preprocess() -> Any:
        yield table

    out = tmp_path / "s"
    snap.create(preprocess, str(out), workers=0)
    got = _read_back(str(out))
    assert list(got["text"]) == words
    assert [list(v) for v in got["ragged"]] == lists
    batches = 0
    for shard in sorted((out / "shards").glob("*.arrow")):
        with ipc.open_file(str(shard)) as reader:
            for i in range(reader.num_record_batches):
                batch = reader.get_batch(i)
                batches += 1
                assert pc.sum(pc.binary_length(batch.column("text"))).as_py() <= LIMIT
                assert len(batch.column("ragged").flatten()) <= LIMIT
    assert batches >= 10


def test_a_task_kept_from_an_earlier_snap_is_told_apart_from_a_type_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Earlier snaps stored a yielded ``large_string`` as it came; grown now, the kept task's
    type and the new task's differ though the values do not: the error says so and what to
    do, not "yield one of them throughout" (which the pipeline cannot)."""
    import snapshot_cli.stored_types as stored_types

    def preprocess(i: int) -> Any:
        yield pa.table({"text": pa.array([f"w{i}"], pa.large_string())})

    out = str(tmp_path / "s")
    real = stored_types.stored_type
    monkeypatch.setattr(  # the earlier snap: large types stored as they came
        stored_types,
        "stored_type",
        lambda t, top=True: t if pa.types.is_large_string(t) else real(t, top),
    )
    snap.create(preprocess, out, inputs=[1, 2], workers=0)
    assert snap.open(out).manifest.schema.field("text").type == pa.large_string()
    monkeypatch.setattr(stored_types, "stored_type", real)
    with pytest.raises(snap.SchemaMismatchError) as err:
        snap.create(preprocess, out, inputs=[1, 2, 3], workers=0)
    message = str(err.value)
    assert "column 'text' was stored as large_string by " in message
    assert "as string by " in message
    assert "written by two versions of snap" in message
    assert "--overwrite" in message
    snap.create(preprocess, out, inputs=[1, 2, 3], workers=0, overwrite=True)
    assert list(_read_back(out)["text"]) == ["w1", "w2", "w3"]


def test_one_value_past_32_bits_is_refused_naming_its_column(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(arrays, "MAX_OFFSET", LIMIT, raising=False)
    words = ["a" * 10] * 50 + ["b" * (LIMIT + 1)] + ["c" * 10] * 50

    def preprocess() -> Any:
        yield pa.table({"text": pa.array(words, pa.large_string())})

    with pytest.raises(snap.RecordError, match=r"column 'text' of a yielded Table .* 601 bytes"):
        snap.create(preprocess, str(tmp_path / "s"), workers=0)
    assert not (tmp_path / "s" / "manifest.json").exists()


def test_a_transposed_tensor_an_earlier_snap_stored_is_not_read_in_the_wrong_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Earlier snaps kept a yielded tensor's permutation and the loader read its values in
    their stored order: (n, 4, 3) where (n, 3, 4) was yielded. Such a snapshot is refused by
    the loader with what to do; head shows the values in their logical order."""
    import snapshot_cli.stored_types as stored_types

    values = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    physical = np.ascontiguousarray(values.transpose(0, 2, 1))
    tensor = pa.FixedShapeTensorArray.from_numpy_ndarray(physical.transpose(0, 2, 1))

    def preprocess() -> Any:
        yield pa.table({"t": tensor, "i": pa.array([0, 1])})

    out = str(tmp_path / "s")
    monkeypatch.setattr(stored_types, "stored_batches", lambda batch, yielded: [batch])
    snap.create(preprocess, out, workers=0)  # as the earlier snap did
    monkeypatch.undo()
    s = snap.open(out)
    assert stored_types.is_transposed(s.manifest.schema.field("t").type)
    with pytest.raises(snap.OptionError, match=r"column 't' holds tensors stored transposed"):
        s.loader(2)
    assert [b["i"].tolist() for b in s.loader(2, columns=["i"], shuffle=False)] == [[0, 1]]
    np.testing.assert_array_equal(np.stack([r["t"] for r in s.head(2)]), values)
    snap.create(preprocess, out, workers=0, overwrite=True)  # as the error says
    np.testing.assert_array_equal(_read_back(out)["t"], values)
