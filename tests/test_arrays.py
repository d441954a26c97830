"""arrays.py: numpy ↔ Arrow as pyarrow's own conversions do it, without importing pandas.

pyarrow's ``pa.array`` and ``Array.to_numpy`` import pandas when it is installed (0.5 s of CPU
in every create worker and before every loader's first batch); snap must not trigger that."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from snapshot_cli import arrays
from tests.conftest import REPO

# every dtype a snap column may have (schema.is_supported_dtype)
DTYPES = [np.dtype(t) for t in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
          "uint32", "uint64", "float16", "float32", "float64")]  # fmt: skip


@st.composite
def numpy_1d(draw: st.DrawFn) -> np.ndarray:
    dtype = draw(st.sampled_from(DTYPES))
    values = draw(hnp.arrays(dtype, st.integers(0, 70)))
    step = draw(st.sampled_from([1, 1, 2, -1]))  # strided and reversed views too
    return values[::step]


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@given(numpy_1d())
def test_from_numpy_builds_what_pa_array_builds(values: np.ndarray) -> None:
    built = arrays.from_numpy(values)
    expected = pa.array(values)
    assert built.type == expected.type
    assert built.null_count == 0
    assert built.equals(expected) or same(  # NaN != NaN: compare the bits instead
        built.to_numpy(zero_copy_only=False), expected.to_numpy(zero_copy_only=False)
    )


@given(numpy_1d(), st.data())
def test_to_numpy_reads_any_slice_as_pyarrow_does(values: np.ndarray, data: st.DataObject) -> None:
    arr = pa.array(values)
    start = data.draw(st.integers(0, len(values)))
    length = data.draw(st.integers(0, len(values) - start))
    part = arr.slice(start, length)
    assert same(arrays.to_numpy(part), part.to_numpy(zero_copy_only=False))
    assert same(arrays.to_numpy(arrays.from_numpy(values)), np.ascontiguousarray(values))


@given(st.lists(st.text(), max_size=40))
def test_strings_builds_what_pa_array_builds(values: list[str]) -> None:
    assert arrays.strings(values, pa.string()).equals(pa.array(values, pa.string()))


@given(st.lists(st.binary(), max_size=40))
def test_bytes_builds_what_pa_array_builds(values: list[bytes]) -> None:
    assert arrays.strings(values, pa.binary()).equals(pa.array(values, pa.binary()))


@pytest.mark.parametrize(
    "arr",
    [
        pa.array([1, None, 3], pa.int32()),  # nulls
        pa.array([1.5, None], pa.float64()),
        pa.array([True, None, False]),
        pa.array([0, 1], pa.timestamp("s", tz="UTC")),  # a time zone
        pa.array([0, 1], pa.date32()),  # not one of numpy's fixed-width dtypes
    ],
    ids=["int-nulls", "float-nulls", "bool-nulls", "tz", "date"],
)
def test_other_arrays_go_through_pyarrow(arr: pa.Array) -> None:
    assert same(arrays.to_numpy(arr), arr.to_numpy(zero_copy_only=False))


def test_other_dtypes_go_through_pyarrow() -> None:
    others = (np.arange(5, dtype=">i4"), np.array(["a"], object), np.array([1 + 2j]),
              np.array(["2020-01-01", "NaT"], "datetime64[s]"))  # fmt: skip
    for values in others:
        try:
            expected: pa.Array | type[Exception] = pa.array(values)
        except Exception as err:  # pyarrow refuses it: so does from_numpy, the same way
            expected = type(err)
        if isinstance(expected, pa.Array):
            assert arrays.from_numpy(values).equals(expected)
        else:
            with pytest.raises(expected):
                arrays.from_numpy(values)
    with pytest.raises(ValueError, match="1-d"):
        arrays.from_numpy(np.zeros((2, 2)))


def test_a_fixed_width_column_is_read_without_a_copy() -> None:
    values = np.arange(10, dtype=np.float32)
    arr = pa.array(values)
    view = arrays.to_numpy(arr.slice(3, 4))
    assert np.shares_memory(view, values)
    assert view.tolist() == [3.0, 4.0, 5.0, 6.0]


PIPELINE = '''
import sys
import numpy as np

def records(i):
    """Every kind of column, and whether this worker has imported pandas by now."""
    for j in range(3):
        yield {
            "pandas_loaded": "pandas" in sys.modules,
            "i": i * 10 + j, "f": float(j), "b": bool(j % 2),
            "image": np.full((2, 3), i, np.uint8),
            "ragged": np.arange(i + j, dtype=np.int16),
            "text": f"input {i}", "blob": bytes([i, j]),
            "tags": [f"t{i}", "x"][: 1 + j % 2], "blobs": [bytes([i])] * j,
            "when": np.datetime64("2024-01-01T00:00", "us") + j,
            "took": np.timedelta64(i, "ms"),
        }

def arrow(i):
    """Another library's Arrow types (large_list, large_string, list_view), read from a file."""
    import pyarrow as pa
    from snapshot_cli import arrays

    batch = pa.ipc.open_file(pa.memory_map(FOREIGN)).get_batch(0)
    loaded = arrays.from_numpy(np.array(["pandas" in sys.modules] * batch.num_rows))
    yield batch.append_column("pandas_loaded", loaded)

def batches(i):
    import snapshot_cli as snap

    yield snap.Batch(pandas_loaded=np.array(["pandas" in sys.modules] * 2),
                     i=np.array([i, i + 1]), x=np.zeros((2, 4), np.float32),
                     name=[f"a{i}", f"b{i}"])
'''

SCRIPT = """
import json, sys
import snapshot_cli as snap

out = {}
for name in ("records", "batches", "arrow"):
    for workers in (0, 1):
        path = f"{sys.argv[1]}/{name}-{workers}"
        snap.create(f"{sys.argv[1]}/pipeline.py:{name}", path, inputs=list(range(4)),
                    workers=workers, inputs_per_task=1)
        s = snap.open(path)
        seen = []
        for shuffle in (False, True):
            for batch in s.loader(batch_size=3, shuffle=shuffle, seed=1, drop_last=False):
                seen.extend(batch["pandas_loaded"].tolist())
        assert seen and all(type(v) is bool for v in seen), seen
        variable = ("ragged", "text", "blob", "name", "tags", "blobs", "when", "took", "big",
                    "word", "views")
        fixed = [c for c in s.schema.names if c not in variable]
        for batch in s.loader(batch_size=3, columns=fixed, processes=1, drop_last=False):
            seen.extend(batch["pandas_loaded"].tolist())
        out[f"{name}, workers={workers}"] = any(seen)
out["this process"] = "pandas" in sys.modules
print(json.dumps(out))
"""


def test_creating_and_replaying_never_imports_pandas(tmp_path: Path) -> None:
    # the test extras install pandas: without it this test would prove nothing
    assert importlib.util.find_spec("pandas") is not None, "pip install -e '.[test]'"
    foreign = tmp_path / "foreign.arrow"
    table = pa.table({
        "big": pa.array([[1, 2], [3], []], pa.large_list(pa.int32())),
        "word": pa.array(["a", "bc", ""], pa.large_string()),
        "views": pa.array([["x"], ["y", "z"], []], pa.list_view(pa.string())),
    })  # fmt: skip
    with pa.ipc.new_file(str(foreign), table.schema) as out:
        out.write_table(table)
    pipeline = textwrap.dedent(PIPELINE) + f"\nFOREIGN = {str(foreign)!r}\n"
    (tmp_path / "pipeline.py").write_text(pipeline)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    imported = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(imported) == 7
    assert not any(imported.values()), imported


TIME_DTYPES = [np.dtype(f"{kind}8[{unit}]") for kind in "Mm" for unit in ("s", "ms", "us", "ns")]


@given(st.sampled_from(TIME_DTYPES), st.lists(st.integers(-(2**62), 2**62), max_size=40),
       st.data())  # fmt: skip
def test_times_are_built_and_read_as_pyarrow_does(
    dtype: np.dtype, ints: list[int], data: st.DataObject
) -> None:
    """Timestamps and durations (a record's datetime64, a Batch's column) built from their
    int64 buffer and read back as one, as ``pa.array`` and ``to_numpy`` make them."""
    values = np.array(ints, np.int64).view(dtype)
    built = arrays.from_numpy(values)
    expected = pa.array(values)
    assert built.type == expected.type and built.equals(expected)
    start = data.draw(st.integers(0, len(values)))
    part = expected.slice(start)
    assert same(arrays.to_numpy(part), part.to_numpy(zero_copy_only=False))


@given(
    st.sampled_from([pa.string(), pa.binary()]),
    st.lists(st.lists(st.text(max_size=5), max_size=4), max_size=20),
)
def test_lists_of_text_build_what_pa_array_builds(t: pa.DataType, lists: list[list[str]]) -> None:
    values: list[Any] = lists if t == pa.string() else [[x.encode() for x in v] for v in lists]
    built = arrays.text_lists(values, t)
    expected = pa.array(values, pa.list_(t))
    assert built.type == expected.type and built.equals(expected)


_LEAVES = [pa.int64(), pa.float32(), pa.string(), pa.binary(), pa.date32(), pa.timestamp("ms")]
_LIST_KINDS = {"list": pa.list_, "large": pa.large_list, "view": pa.list_view}


@st.composite
def arrow_shape(draw: st.DrawFn, depth: int = 3) -> Any:
    """The shape of an Arrow type of any nesting kind, to be built with any nullabilities."""
    kinds = ["leaf"] if depth == 0 else ["leaf", *_LIST_KINDS, "fixed", "struct", "map"]
    kinds += ["union", "dict", "ree"] if depth else []
    kind = draw(st.sampled_from(kinds))
    if kind in ("leaf", "dict", "ree"):
        return (kind, draw(st.sampled_from(_LEAVES)))
    if kind == "map":
        return (kind, draw(st.sampled_from(_LEAVES)), draw(arrow_shape(depth - 1)))
    if kind in ("struct", "union"):
        return (kind, draw(st.lists(arrow_shape(depth - 1), min_size=1, max_size=3)))
    return (kind, draw(arrow_shape(depth - 1)))


def build(shape: Any, nullable: Any) -> pa.DataType:
    """The type of ``shape``, each child field's nullability drawn from ``nullable()``."""
    kind, rest = shape[0], shape[1:]

    def field(name: str, child: Any) -> pa.Field:
        return pa.field(name, build(child, nullable), nullable=nullable())

    if kind == "leaf":
        return rest[0]
    if kind == "dict":
        return pa.dictionary(pa.int32(), rest[0])
    if kind == "ree":
        return pa.run_end_encoded(pa.int32(), rest[0])
    if kind == "map":
        return pa.map_(rest[0], field("value", rest[1]))
    if kind == "struct":
        return pa.struct([field(f"f{i}", c) for i, c in enumerate(rest[0])])
    if kind == "union":
        return pa.union([field(f"u{i}", c) for i, c in enumerate(rest[0])], "dense")
    if kind == "fixed":
        return pa.list_(field("item", rest[0]), 2)
    return _LIST_KINDS[kind](field("item", rest[0]))


@given(arrow_shape(), st.lists(st.booleans(), min_size=64, max_size=64), st.integers(0, 63))
def test_all_nullable_ignores_only_nullability_at_every_depth_of_every_kind(
    shape: Any, flips: list[bool], start: int
) -> None:
    """A shard's type and its manifest's agree whatever the nullability of their child
    fields (a map's type made it raise AttributeError in `snap head`), and on nothing else."""
    drawn = iter(flips[start:] + flips[:start])
    a = build(shape, lambda: next(drawn, True))
    b = build(shape, lambda: True)
    assert arrays.all_nullable(a) == arrays.all_nullable(b) == b
    assert arrays.all_nullable(arrays.all_nullable(a)) == arrays.all_nullable(a)
    assert arrays.all_nullable(a) != arrays.all_nullable(pa.struct([pa.field("f", a)]))
