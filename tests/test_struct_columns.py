"""Structs named like snap's ragged layout (docs/format.md §5.3) that are not exactly it.

Only ``struct<data: list<T> not null, shape: fixed_size_list<int32>[d] not null>`` with a
numeric or bool ``T`` and ``d >= 2`` is a ragged column (arrays back). Every other struct,
however close (a COCO RLE mask's int64 size, a list of words, a float shape, a third field,
nullable fields, a list as shape), is a user's own: kind ``arrow``, stored as yielded and read
back as dicts, by ``head``, ``inspect``, ``verify`` and the loader alike.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli import schema as schema_mod
from snapshot_cli import stored_types
from snapshot_cli.cli import cli

NUMERIC = [pa.bool_(), pa.int8(), pa.uint16(), pa.int32(), pa.int64(), pa.uint64(),
           pa.float16(), pa.float32(), pa.float64()]  # fmt: skip
OTHER = [pa.string(), pa.binary(), pa.timestamp("us"), pa.decimal128(10, 2)]
SHAPE_TYPES = [pa.int32(), pa.int64(), pa.int8(), pa.uint32(), pa.float64()]
LISTS = {"list": pa.list_, "large_list": pa.large_list}


def exact(t: pa.DataType) -> bool:
    """The doc's rule, independently of snap's code: snap's ragged layout, field by field."""
    if not pa.types.is_struct(t) or [f.name for f in t] != ["data", "shape"]:
        return False
    data, shape = t.field(0), t.field(1)
    return (
        not data.nullable
        and not shape.nullable
        and pa.types.is_list(data.type)
        and data.type.value_field.nullable
        and data.type.value_type in NUMERIC
        and pa.types.is_fixed_size_list(shape.type)
        and shape.type.value_field.nullable
        and shape.type.value_type == pa.int32()
        and shape.type.list_size >= 2
    )


DEVIATIONS = ("values", "shape type", "shape list", "large data", "item not null", "order",
              "third field", "nullable data", "nullable shape", "one dimension")  # fmt: skip


@st.composite
def struct_columns(draw: st.DrawFn) -> pa.StructArray:
    """A struct column of 1-4 records: snap's ragged layout, or one with some of
    :data:`DEVIATIONS` from it, each record's data holding as many values as its shape's
    product."""
    off = draw(st.sets(st.sampled_from(DEVIATIONS), max_size=3))
    value_type = draw(st.sampled_from(OTHER + NUMERIC if "values" in off else NUMERIC))
    shape_type = draw(st.sampled_from(SHAPE_TYPES[1:])) if "shape type" in off else pa.int32()
    ndim = 1 if "one dimension" in off else draw(st.integers(2, 3))
    shape_list = draw(st.sampled_from(["list", "large_list"])) if "shape list" in off else "fixed"
    data_list = "large_list" if "large data" in off else "list"
    shapes = draw(st.lists(st.lists(st.integers(0, 3), min_size=ndim, max_size=ndim),
                           min_size=1, max_size=4))  # fmt: skip
    sizes = [math.prod(s) for s in shapes]
    values = _values(value_type, sum(sizes))
    offsets = pa.array(np.concatenate([[0], np.cumsum(sizes)]), pa.int32())
    item = pa.field("item", value_type, nullable="item not null" not in off)
    data = (pa.ListArray if data_list == "list" else pa.LargeListArray).from_arrays(
        offsets.cast(pa.int64()) if data_list == "large_list" else offsets, values,
        type=LISTS[data_list](item),
    )  # fmt: skip
    flat_shape = pa.array(np.array(shapes).reshape(-1)).cast(shape_type)
    if shape_list == "fixed":
        shape = pa.FixedSizeListArray.from_arrays(flat_shape, ndim)
    else:
        steps = pa.array(np.arange(len(shapes) + 1) * ndim, pa.int32())
        make = pa.ListArray if shape_list == "list" else pa.LargeListArray
        shape = make.from_arrays(steps if make is pa.ListArray else steps.cast(pa.int64()),
                                 flat_shape)  # fmt: skip
    children = [("data", data, "nullable data" in off), ("shape", shape, "nullable shape" in off)]
    if "order" in off:
        children.reverse()
    if "third field" in off:
        children.insert(draw(st.integers(0, 2)), ("note", pa.array(range(len(shapes))), False))
    fields = [pa.field(n, a.type, nullable=null) for n, a, null in children]
    return pa.StructArray.from_arrays([a for _, a, _ in children], fields=fields)


def _values(t: pa.DataType, n: int) -> pa.Array:
    if t == pa.bool_():
        return pa.array(np.arange(n) % 2 == 1)
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return pa.array(np.arange(n).astype(t.to_pandas_dtype()))
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return pa.array([f"w{i}" for i in range(n)]).cast(t)
    if pa.types.is_timestamp(t):
        return pa.array(np.arange(n)).cast(t)
    return pa.array([i / 4 for i in range(n)]).cast(t)  # (decimal128)


def _expected(column: pa.StructArray, ragged: bool) -> list[Any]:
    """What readers give for each record: an array of the record's shape, or the dict."""
    if not ragged:
        return column.to_pylist()
    return [np.array(r["data"], dtype=object).reshape(r["shape"]) for r in column.to_pylist()]


def _same(got: Any, want: Any, ragged: bool) -> bool:
    if ragged:
        return bool(got.shape == want.shape and (got.astype(object) == want).all())
    return bool(got == want)


def _cli(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.stdout + result.stderr
    return result.stdout


def check_round_trip(column: pa.StructArray, root: Path) -> None:
    """Create a snapshot of ``column`` (and an id); every reader gives the same records."""
    stored = stored_types.stored_type(column.type)
    ragged = exact(stored)
    assert (schema_mod.kind(stored) == "ragged") == ragged, stored
    table = pa.table({"id": pa.array(range(len(column)), pa.int64()), "s": column})

    def pipeline(i: int) -> Iterator[pa.Table]:
        yield table

    snap.create(pipeline, str(root), inputs=[0], workers=0, progress=False)
    want = _expected(column.cast(stored), ragged)
    s = snap.open(str(root))
    assert s.schema.field("s").type == stored
    for shuffle in (False, True):
        got: dict[int, Any] = {}
        for batch in s.loader(3, shuffle=shuffle, seed=1):
            got.update(zip(batch["id"].tolist(), batch["s"], strict=True))
        assert sorted(got) == list(range(len(want)))
        assert all(_same(got[i], want[i], ragged) for i in range(len(want))), (got, want)
    head = s.head(len(want))
    assert all(_same(r["s"], want[i], ragged) for i, r in enumerate(head))
    assert "ok" in _cli("verify", str(root))
    shown = json.loads(_cli("inspect", str(root), "--json"))["schema"][1]
    assert shown["kind"] == ("ragged" if ragged else "arrow"), shown
    assert len(json.loads(_cli("head", str(root), "-n", "9", "--json"))["records"]) == len(want)
    assert "record 0:" in _cli("head", str(root))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(struct_columns())
def test_a_struct_is_ragged_only_if_exactly_snaps_layout(column: pa.StructArray) -> None:
    event("ragged" if exact(stored_types.stored_type(column.type)) else "arrow")
    with tempfile.TemporaryDirectory() as tmp:
        check_round_trip(column, Path(tmp) / "s")


def _struct(data: pa.Array, shape: pa.Array, nullable: bool = True) -> pa.StructArray:
    fields = [pa.field("data", data.type, nullable), pa.field("shape", shape.type, nullable)]
    return pa.StructArray.from_arrays([data, shape], fields=fields)


REPORTED = {  # (the cases that failed: head's TypeError, commit's AssertionError, a refusal)
    "float shape": _struct(pa.array([[1, 2, 3, 4], [5]], pa.list_(pa.int32())),
                           pa.array([[2.0, 2.0], [1.0, 1.0]], pa.list_(pa.float64(), 2))),
    "text data": _struct(pa.array([["a", "b"], ["c"]], pa.list_(pa.string())),
                         pa.array([[1, 2], [1, 1]], pa.list_(pa.int32(), 2))),
    "RLE mask": _struct(pa.array([[3, 5, 2], [7]], pa.list_(pa.int64())),
                        pa.array([[4, 8], [2, 2]], pa.list_(pa.int64(), 2))),
    "int64 shape, not null": _struct(pa.array([[1.0, 2, 3, 4], [4]], pa.list_(pa.float32())),
                                     pa.array([[2, 2], [1, 1]], pa.list_(pa.int64(), 2)), False),
    "nullable fields": _struct(pa.array([[1.0, 2, 3, 4], [4]], pa.list_(pa.float32())),
                               pa.array([[2, 2], [1, 1]], pa.list_(pa.int32(), 2))),
    "one dimension": _struct(pa.array([[1, 2], [5]], pa.list_(pa.int32())),
                             pa.array([[1], [3]], pa.list_(pa.int32(), 1)), False),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(REPORTED))
def test_reported_structs_read_back_as_dicts(tmp_path: Path, name: str) -> None:
    column = REPORTED[name]
    assert schema_mod.kind(column.type) == "arrow"
    check_round_trip(column, tmp_path / "s")
    assert snap.open(str(tmp_path / "s")).head(1)[0]["s"] == column[0].as_py()


def test_snaps_own_layout_is_still_ragged(tmp_path: Path) -> None:
    column = schema_mod.ragged_array([np.ones((2, 3)), np.zeros((1, 0))], np.dtype(np.float32), 2)
    assert schema_mod.kind(column.type) == "ragged"
    check_round_trip(column, tmp_path / "s")
    got = snap.open(str(tmp_path / "s")).head(2)
    assert [r["s"].shape for r in got] == [(2, 3), (1, 0)]


def test_a_tensor_of_values_that_are_not_numbers_is_kind_arrow(tmp_path: Path) -> None:
    """§5.2's T is a number or bool: a fixed_shape_tensor of text is another writer's type,
    stored and read back as pyarrow converts it (it failed at commit: an AssertionError)."""
    t = pa.fixed_shape_tensor(pa.string(), [2])
    storage = pa.FixedSizeListArray.from_arrays(pa.array(["a", "b", "c", "d"]), 2)
    column = pa.ExtensionArray.from_storage(t, storage)
    assert schema_mod.describe_type(t) == {"kind": "arrow", "dtype": str(t), "shape": None}

    def pipeline(i: int) -> Iterator[pa.Table]:
        yield pa.table({"id": pa.array([0, 1]), "t": column})

    root = str(tmp_path / "s")
    snap.create(pipeline, root, inputs=[0], workers=0, progress=False)
    (batch,) = snap.open(root).loader(2, shuffle=False)
    assert [list(v) for v in batch["t"]] == [["a", "b"], ["c", "d"]]
    assert "ok" in _cli("verify", root)
    assert "fixed_shape_tensor" in _cli("inspect", root)


def test_a_struct_of_no_fields_reads_back(tmp_path: Path) -> None:
    """(The shuffled loader's window took a struct's first field: IndexError for none.)"""
    check_round_trip(pa.array([{}, {}, {}], pa.struct([])), tmp_path / "s")
