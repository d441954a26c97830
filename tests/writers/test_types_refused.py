"""What create refuses before it commits a snapshot that nothing could read, and the advice
its errors give (writers/convert.py, stored_types.py, writers/params.py, schema.py).

- An Arrow column no reader can hand back was stored, ``verify`` said ok, then ``head``,
  ``bench`` and the loader failed with pyarrow's ArrowNotImplementedError (a union), or gave
  pandas objects (an interval as ``DateOffset``, a nanosecond time in a struct as
  ``Timestamp``) or plain integers (a nanosecond time in a map). Hypothesis draws nested Arrow
  types: each is refused at create, naming the column, or read back by every reader path as
  numpy and Python values of its type.
- A param that is not valid Unicode (a shell's ``é`` under ``LC_ALL=C``, a lone surrogate in
  ``params=``) was kept in manifest.json, which every command then refused.
- A task whose values of a column were all ``[]`` stored float64, and the error told the user
  to make integer labels float (``value.astype(np.float64)``).
- ml_dtypes' int4 was told to widen to float32; ``processes=N`` refused a time column as not
  "fixed-width".
"""

from __future__ import annotations

import datetime
import decimal
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli import mismatch
from snapshot_cli import schema as schema_mod
from snapshot_cli.errors import RecordError
from snapshot_cli.readers.convert import column_to_numpy, take_rows
from snapshot_cli.writers.convert import to_batches
from snapshot_cli.writers.params import check_params
from tests.conftest import REPO

N = 3


def union(dense: bool) -> pa.Array:
    kinds = pa.array([0, 1, 0], pa.int8())
    if dense:
        offsets = pa.array([0, 0, 1], pa.int32())
        return pa.UnionArray.from_dense(kinds, offsets, [pa.array([1, 2]), pa.array(["a"])])
    return pa.UnionArray.from_sparse(kinds, [pa.array([1, 2, 3]), pa.array(["a", "b", "c"])])


def times_of_day(whole_us: bool) -> pa.Array:
    ns = np.array([3_000_000_000, 4_000_000_000, 5_000_000_000 + (0 if whole_us else 1)])
    return pa.array(ns).cast(pa.time64("ns"))


def nanoseconds(kind: str) -> pa.Array:
    return pa.array((np.array([1, 2, 3]) * 1_000_001).astype(f"{kind}8[ns]"))


def as_list(values: pa.Array) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(range(len(values) + 1), pa.int32()), values)


def in_struct(values: pa.Array) -> pa.Array:
    return pa.StructArray.from_arrays([values], names=["t"])


def in_map(values: pa.Array) -> pa.Array:
    keys = pa.array([f"k{i}" for i in range(len(values))])
    return pa.MapArray.from_arrays(pa.array(range(len(values) + 1), pa.int32()), keys, values)


MDN = pa.array([pa.MonthDayNano([1, 2, 3])] * N, pa.month_day_nano_interval())
FSB = pa.array([b"ab", b"cd", b"ef"], pa.binary(2))

# (column, what the error says of it) for each kind a reader could not hand back
REFUSED: dict[str, tuple[pa.Array, str]] = {
    "sparse union": (union(False), r"holds a union: numpy has no array .*one column per type"),
    "dense union": (union(True), r"holds a union: .*one column per type"),
    "list of a union": (as_list(union(False)), r"holds a union at \[\] \(sparse_union"),
    "struct of a union": (in_struct(union(True)), r"holds a union at \.t \(dense_union"),
    "interval": (MDN, r"holds an interval, .*DateOffset.*pa\.duration\('ns'\)"),
    "list of intervals": (as_list(MDN), r"an interval at \[\].*months, days and nanoseconds"),
    "ns timestamp in a struct": (
        in_struct(nanoseconds("M")),
        r"nanosecond times at \.t \(timestamp\[ns\]\) in a struct or map.*pa\.timestamp\('us'\)",
    ),
    "ns duration in a map": (
        in_map(nanoseconds("m")),
        r"nanosecond times at \{value\} \(duration\[ns\]\).*pa\.duration\('us'\)",
    ),
    "ns timestamp in a struct in a list": (
        as_list(in_struct(nanoseconds("M"))),
        r"nanosecond times at \[\]\.t .*a column of their own",
    ),
    "time of day with ns": (times_of_day(False), r"times of day with nanoseconds .*time64\('us'\)"),
    "list of decimal32": (
        as_list(pa.array([decimal.Decimal("1.5")] * N, pa.decimal32(5, 2))),
        r"lists of decimal32\(5, 2\), .*pa\.decimal128\(5, 2\)",
    ),
    "list of fixed-size binary": (as_list(FSB), r"lists of fixed_size_binary\[2\].*pa\.binary\(\)"),
}


def write(tmp_path: Path, *items: Any, **options: Any) -> str:
    def preprocess() -> Any:
        yield from items

    out = str(tmp_path / "s")
    snap.create(preprocess, out, workers=0, **options)
    return out


@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_create_refuses_a_column_no_reader_could_give_back(tmp_path: Path, kind: str) -> None:
    column, said = REFUSED[kind]
    table = pa.table({"i": pa.array(range(N)), "c": column})
    with pytest.raises(snap.RecordError, match=rf"column 'c' of a yielded Table \(.*{said}"):
        write(tmp_path, table)
    assert not (tmp_path / "s" / "manifest.json").exists()
    with pytest.raises(snap.RecordError, match=r"column 'c' of a yielded Batch"):
        write(tmp_path, snap.Batch(i=np.arange(N), c=column))  # an Arrow array in a Batch


@pytest.mark.parametrize(
    "column",
    [
        times_of_day(True),  # polars' Time: time64[ns], whole microseconds
        in_struct(pa.array([datetime.datetime(2020, 1, i) for i in (1, 2, 3)], pa.timestamp("us"))),
        as_list(nanoseconds("M")),  # a list of them: numpy's datetime64[ns]
        in_struct(as_list(FSB)),  # a struct's values are Python's: bytes
        pa.array([decimal.Decimal("1.5")] * N, pa.decimal32(5, 2)),
    ],
    ids=["whole-us times of day", "us timestamp in a struct", "list of ns", "struct", "decimal32"],
)
def test_what_readers_give_back_is_kept(tmp_path: Path, column: pa.Array) -> None:
    out = write(tmp_path, pa.table({"c": column}))
    rows = snap.open(out).head(N)
    assert len(rows) == N
    assert not any(type(v).__module__.startswith("pandas") for v in _leaves(rows[0]["c"]))


def test_the_users_union_table_is_refused_by_the_command_line(tmp_path: Path) -> None:
    """The report's pipeline, as a real process: exit 1, the column named, no traceback."""
    (tmp_path / "p.py").write_text(
        textwrap.dedent(
            """
            import pyarrow as pa
            def f():
                u = pa.UnionArray.from_sparse(
                    pa.array([0, 1, 0], pa.int8()),
                    [pa.array([1, 2, 3]), pa.array(["a", "b", "c"])],
                )
                yield pa.table({"u": u, "i": pa.array([0, 1, 2])})
            """
        )
    )
    res = subprocess.run(
        [sys.executable, "-m", "snapshot_cli", "create", "p.py:f", "s1", "--workers", "0"],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(REPO)),  # (this checkout's snap)
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 1, res.stderr
    assert "column 'u' of a yielded Table" in res.stderr and "one column per type" in res.stderr
    assert "Traceback" not in res.stderr and "a bug in snap" not in res.stderr
    assert not (tmp_path / "s1" / "manifest.json").exists()


def test_a_pandas_arrow_column_is_taken_as_arrow_data(tmp_path: Path) -> None:
    """A DataFrame column of ``pd.ArrowDtype``: an interval raised pandas' bare
    NotImplementedError ("a bug in snap" at the command line); a decimal was refused."""
    import pandas as pd

    frame = pd.DataFrame({"c": pd.Series(MDN, dtype=pd.ArrowDtype(MDN.type))})
    with pytest.raises(snap.RecordError, match=r"column 'c' of a yielded DataFrame .*interval"):
        write(tmp_path, frame)
    money = pa.array([decimal.Decimal("1.25")] * N, pa.decimal128(5, 2))
    out = write(tmp_path, pd.DataFrame({"c": pd.Series(money, dtype=pd.ArrowDtype(money.type))}))
    assert [r["c"] for r in snap.open(out).head(N)] == [decimal.Decimal("1.25")] * N


def test_a_polars_time_with_nanoseconds_is_refused_and_one_without_kept(tmp_path: Path) -> None:
    import polars as pl

    whole = pl.DataFrame({"t": [datetime.time(1, 2, 3, 4)]})
    out = write(tmp_path, whole)
    assert snap.open(out).head(1)[0]["t"] == datetime.time(1, 2, 3, 4)
    fine = pl.DataFrame({"t": pl.Series([3_723_000_004_001]).cast(pl.Time)})  # 01:02:03.000004001
    with pytest.raises(snap.RecordError, match=r"column 't' .*times of day with nanoseconds"):
        write(tmp_path, fine, overwrite=True)


# --- every nested Arrow type: refused, or read back as numpy and Python values -------------

LEAVES: dict[str, Callable[[], pa.Array]] = {
    "bool": lambda: pa.array([True, False, True]),
    "int8": lambda: pa.array([1, -2, 3], pa.int8()),
    "float16": lambda: pa.array(np.array([1, 2, 3], np.float16)),
    "float64": lambda: pa.array([1.5, float("nan"), 3.0]),
    "decimal128": lambda: pa.array([decimal.Decimal("1.25")] * N, pa.decimal128(5, 2)),
    "decimal32": lambda: pa.array([decimal.Decimal("1.25")] * N, pa.decimal32(5, 2)),
    "decimal64": lambda: pa.array([decimal.Decimal("1.25")] * N, pa.decimal64(5, 2)),
    "date32": lambda: pa.array([datetime.date(2020, 1, i) for i in (1, 2, 3)], pa.date32()),
    "date64": lambda: pa.array([datetime.date(2020, 1, i) for i in (1, 2, 3)], pa.date64()),
    "time32": lambda: pa.array([datetime.time(1, 2, i) for i in (1, 2, 3)], pa.time32("ms")),
    "time64us": lambda: pa.array([datetime.time(1, 2, 3, i) for i in (1, 2, 3)], pa.time64("us")),
    "time64ns whole": lambda: times_of_day(True),
    "time64ns": lambda: times_of_day(False),
    "timestamp us": lambda: pa.array(np.array([1, 2, 3], "M8[us]")),
    "timestamp ns": lambda: nanoseconds("M"),
    "timestamp ns zoned": lambda: nanoseconds("M").cast(pa.timestamp("ns", "Europe/Paris")),
    "duration s": lambda: pa.array(np.array([1, 2, 3], "m8[s]")),
    "duration ns": lambda: nanoseconds("m"),
    "interval": lambda: MDN,
    "string": lambda: pa.array(["a", "bé", ""]),
    "large_string": lambda: pa.array(["a", "b", "c"], pa.large_string()),
    "string_view": lambda: pa.array(["x", "y", "z"], pa.string_view()),
    "binary": lambda: pa.array([b"a", b"", b"c"]),
    "binary_view": lambda: pa.array([b"q", b"r", b"s"], pa.binary_view()),
    "fixed_size_binary": lambda: FSB,
    "sparse union": lambda: union(False),
    "dense union": lambda: union(True),
    "uuid": lambda: pa.ExtensionArray.from_storage(
        pa.uuid(), pa.array([bytes(range(i, i + 16)) for i in range(N)], pa.binary(16))
    ),
    "bool8": lambda: pa.ExtensionArray.from_storage(pa.bool8(), pa.array([1, 0, 1], pa.int8())),
    "json": lambda: pa.ExtensionArray.from_storage(pa.json_(), pa.array(['{"a": 1}', "[2]", "3"])),
}


def wrapped(kind: str, values: pa.Array) -> pa.Array:
    n = len(values)
    if kind == "list":
        return as_list(values)
    if kind == "large_list":
        return pa.LargeListArray.from_arrays(pa.array(range(n + 1), pa.int64()), values)
    if kind == "list_view":
        sizes = pa.array([1] * n, pa.int32())
        return pa.ListViewArray.from_arrays(pa.array(range(n), pa.int32()), sizes, values)
    if kind == "fixed_size_list":
        return pa.FixedSizeListArray.from_arrays(values, 1)
    if kind == "struct":
        return pa.StructArray.from_arrays([values, pa.array(range(n))], names=["f", "g"])
    if kind == "map":
        return in_map(values)
    if kind == "run_end_encoded":  # (as pc.run_end_encode makes it, of any value type)
        return pa.RunEndEncodedArray.from_arrays(pa.array(range(1, n + 1), pa.int32()), values)
    assert kind == "dictionary", kind
    return pa.DictionaryArray.from_arrays(pa.array(range(n), pa.int32()), values)


CONTAINERS = ["list", "large_list", "list_view", "fixed_size_list", "struct", "map"]
PLAIN = [k for k in LEAVES if not k.endswith("union") and k not in ("uuid", "bool8", "json")]


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, np.ndarray) and value.dtype == object:
        return [x for v in value.reshape(-1) for x in _leaves(v)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _leaves(v)]
    return [value]


def conforms(t: pa.DataType, value: Any, at: str = "c") -> None:
    """``value`` is a numpy or Python value of Arrow type ``t`` (no pandas object, no
    integer where a time was)."""
    assert not type(value).__module__.startswith("pandas"), (at, t, type(value))
    if isinstance(t, pa.BaseExtensionType) and not isinstance(t, pa.FixedShapeTensorType):
        return  # (its storage's, or the extension's own Python type)
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        assert isinstance(value, (datetime.date, np.datetime64)), (at, t, value)
    elif pa.types.is_duration(t):
        assert isinstance(value, (datetime.timedelta, np.timedelta64)), (at, t, value)
    elif pa.types.is_time(t):
        assert isinstance(value, datetime.time), (at, t, value)
    elif pa.types.is_decimal(t):
        assert isinstance(value, decimal.Decimal), (at, t, value)
    elif pa.types.is_struct(t):
        assert isinstance(value, dict), (at, t, value)
        for field in t:
            conforms(field.type, value[field.name], f"{at}.{field.name}")
    elif pa.types.is_map(t):
        for k, v in value:
            conforms(t.key_type, k, f"{at}{{key}}")
            conforms(t.item_type, v, f"{at}{{value}}")
    elif pa.types.is_list(t) or pa.types.is_fixed_size_list(t):
        assert isinstance(value, (list, np.ndarray)), (at, t, value)
        items = list(value.reshape(-1)) if isinstance(value, np.ndarray) else value
        for v in items:  # (numpy's scalars: an object array would make ns times ints)
            conforms(t.value_type, v, f"{at}[]")
    elif isinstance(t, pa.FixedShapeTensorType):
        assert isinstance(value, np.ndarray) and value.dtype.kind in "biuf", (at, t, value)
    elif pa.types.is_string(t):
        assert isinstance(value, str), (at, t, value)
    elif pa.types.is_binary(t) or pa.types.is_fixed_size_binary(t):
        assert isinstance(value, bytes), (at, t, value)
    else:
        assert pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t), t
        assert isinstance(value, (bool, int, float, np.bool_, np.number)), (at, t, value)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    leaf=st.sampled_from(sorted(LEAVES)),
    chain=st.lists(st.sampled_from(CONTAINERS), max_size=3),
    encoding=st.sampled_from(["plain", "dictionary", "run_end_encoded"]),
    rows=st.permutations(range(N)),
)
def test_every_arrow_type_is_refused_or_read_back_as_its_values(
    leaf: str, chain: list[str], encoding: str, rows: list[int]
) -> None:
    column = LEAVES[leaf]()
    if encoding != "plain" and leaf in PLAIN:  # (a pandas categorical: decoded when stored)
        column = wrapped(encoding, column)  # (run-end encoded lists were stored, not read)
    for kind in chain:
        column = wrapped(kind, column)
    try:
        (batch,) = to_batches(pa.table({"c": column}), None, frozenset())
    except RecordError as err:
        assert "column 'c' of a yielded Table" in str(err)
        return
    stored = batch.column(0)
    for got in (column_to_numpy(stored), take_rows(stored, np.array(rows))):
        assert len(got) == N
        for value in got:
            conforms(stored.type, value)


# --- params the manifest cannot keep ------------------------------------------------------

KEPT_TEXT = st.characters(codec="utf-8", exclude_characters="\x00")  # (a manifest keeps)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(KEPT_TEXT, max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(KEPT_TEXT, max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


def _with_surrogate(value: Any, data: st.DataObject) -> Any:
    """``value`` with one str in it (a key or a value, at any depth) holding a lone surrogate."""
    bad = "caf\udce9"
    if isinstance(value, list) and value and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(value) - 1))
        return [*value[:i], _with_surrogate(value[i], data), *value[i + 1 :]]
    if isinstance(value, dict) and value and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(sorted(value)))
        if data.draw(st.booleans()):  # the key itself
            return {**{k: v for k, v in value.items() if k != key}, bad: value[key]}
        return {**value, key: _with_surrogate(value[key], data)}
    if isinstance(value, list):
        return [*value, bad]
    if isinstance(value, dict):
        return {**value, "k": bad}
    return bad


@given(value=json_values, data=st.data())
def test_a_param_holding_text_utf8_cannot_encode_is_refused_naming_it(
    value: Any, data: st.DataObject
) -> None:
    assert check_params({"p": value}) == {"p": value}  # (valid text: kept as it is)
    with pytest.raises(snap.OptionError, match=r"params\['p'\].* not valid Unicode text"):
        check_params({"p": _with_surrogate(value, data)})


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"tag": "\udce9"}, r"params\['tag'\] holds '\\udce9'"),
        ({"a": {"\udce9": 1}}, r"params\['a'\] has the key '\\udce9'"),
        ({"a": [1, {"b": "x\udcff"}]}, r"params\['a'\]\[1\]\['b'\] holds"),
    ],
)
def test_create_refuses_such_a_param_before_any_work(
    tmp_path: Path, params: dict[str, Any], named: str
) -> None:
    def preprocess(**_: Any) -> Any:
        yield {"x": 1}

    with pytest.raises(snap.OptionError, match=rf"{named}.*not valid Unicode"):
        snap.create(preprocess, str(tmp_path / "s"), params=params, workers=0)
    assert not (tmp_path / "s").exists()


def test_a_param_the_locale_could_not_decode_says_to_set_a_utf8_locale(tmp_path: Path) -> None:
    """``LC_ALL=C`` without UTF-8 mode: the shell's é reaches Python as two surrogates."""
    (tmp_path / "p.py").write_text("def f(*, tag='x'):\n    yield {'a': 1}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "LANG"))}
    env.update(LC_ALL="C", PYTHONUTF8="0", PYTHONPATH=str(REPO))
    res = subprocess.run(
        [sys.executable, "-m", "snapshot_cli", "create", "p.py:f", "s1", "--param", "tag=é"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 2, res.stderr  # (a usage error, as --columns: was 1)
    assert "--param tag: its value" in res.stderr and "not valid text in this locale" in res.stderr
    assert "PYTHONUTF8=1" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "s1").exists()


@pytest.mark.parametrize("option", ["--param", "--columns"])
def test_bytes_no_utf8_in_a_utf8_locale_are_not_told_to_set_one(
    tmp_path: Path, option: str
) -> None:
    """``--param $'tag=\\xff'`` in a UTF-8 locale was told to "set a UTF-8 locale", which
    cannot help: the bytes are no UTF-8 (a probe)."""
    (tmp_path / "p.py").write_text("def f(*, tag='x'):\n    yield {'a': 1}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "LANG"))}
    env.update(LC_ALL="C.UTF-8", PYTHONPATH=str(REPO))
    args: list[str | bytes] = [sys.executable, "-m", "snapshot_cli"]
    if option == "--param":
        args += ["create", "p.py:f", "s1", "--input", "p.py", "--param", b"tag=\xff"]
    else:
        args += ["head", "s1", "--columns", b"a\xff"]
    res = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120, check=False)  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert "is not valid UTF-8" in res.stderr and "locale" not in res.stderr, res.stderr
    assert not (tmp_path / "s1").exists()


# --- the advice for a column of empty lists ----------------------------------------------

ARRAY_DTYPES = [
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "bool",
]


@given(
    dtype=st.sampled_from(ARRAY_DTYPES),
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    ragged=st.booleans(),
    first=st.booleans(),
)
def test_empty_lists_are_told_to_take_the_columns_type(
    dtype: str, shape: list[int], ragged: bool, first: bool
) -> None:
    """A column of ``[]`` only (float64, numpy's guess) against the other tasks' arrays: the
    message says where the float64 came from and to type the empty values, never to convert
    the arrays to float64."""
    empty = pa.list_(pa.float64())
    array_type = pa.from_numpy_dtype(np.dtype(dtype))
    other = (
        schema_mod.ragged_type(array_type, len(shape))
        if ragged
        else pa.fixed_shape_tensor(array_type, shape)
    )
    before, now = (empty, other) if first else (other, empty)
    message = mismatch.mismatch_message("labels", before, now)
    assert "[] has no type" in message and "astype(np.float64)" not in message
    if len(shape) == 1:
        assert f"np.asarray(labels, dtype=np.{np.dtype(dtype).name})" in message
    else:
        assert "np.zeros((0, " in message and f"np.{np.dtype(dtype).name})" in message
    assert ("@snapshot_cli.ragged('labels')" in message) == (not ragged)


@pytest.mark.parametrize(
    ("value", "typed"),
    [
        ("[3, 4]", "np.asarray(labels, dtype=np.int64)"),
        ("np.array([3, 4], np.uint8)", "np.asarray(labels, dtype=np.uint8)"),
        ("np.ones((2, 4), np.int32)", "np.zeros((0, 4), np.int32)"),
    ],
)
def test_a_task_of_empty_labels_gets_the_empty_list_advice(
    tmp_path: Path, value: str, typed: str
) -> None:
    """The report's pipeline: items [0, 1], one per task; item 0's labels are []."""
    code = f"import numpy as np\n\ndef labels(n):\n    yield {{'labels': {value} if n else []}}\n"
    (tmp_path / "prep.py").write_text(code)
    with pytest.raises(snap.SchemaMismatchError) as err:
        snap.create(f"{tmp_path / 'prep.py'}:labels", str(tmp_path / "s"), inputs=[0, 1],
                    inputs_per_task=1, workers=0)  # fmt: skip
    message = str(err.value)
    assert "[] has no type" in message and typed in message
    assert "astype(np.float64)" not in message


# --- small ones ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "wide"), [("int4", "int8"), ("uint4", "uint8"), ("int2", "int8"), ("uint2", "uint8")]
)
def test_narrow_integers_are_told_to_widen_to_an_integer(
    tmp_path: Path, name: str, wide: str
) -> None:
    import ml_dtypes  # (the test extras' ml-dtypes >= 0.5 has int2 and uint2)

    x = np.array([1, 0, 1], dtype=getattr(ml_dtypes, name))
    with pytest.raises(snap.RecordError, match=rf"dtype {name}; .*v\.astype\(np\.{wide}\)") as err:
        write(tmp_path, {"x": x})
    assert "float32" not in str(err.value)
    out = write(tmp_path, {"x": x.astype(np.dtype(wide))}, overwrite=True)
    assert snap.open(out).head(1)[0]["x"].tolist() == [1, 0, 1]


@pytest.mark.parametrize("unit", ["M8[ms]", "m8[us]"])
def test_decode_processes_read_a_time_column(tmp_path: Path, unit: str) -> None:
    """A time was refused with processes= (2026-11-30: decoded there, as numbers are)."""
    out = write(tmp_path, *({"t": np.array(i, unit), "x": i} for i in range(4)))
    with snap.open(out).loader(2, processes=1, shuffle=False) as loader:
        got = [(int(x), t) for b in loader for x, t in zip(b["x"], b["t"], strict=True)]
    assert got == [(i, np.array(i, unit)) for i in range(4)]
