"""Records of numpy scalars, and of Python lists of numbers, are taken at about the cost of
Python scalars and of ``np.asarray`` (numpy scalars went through the general path, 2.2 us a
value, 6x Python's; a list of 512 floats was scanned in Python for ints past int64, 47 us,
7x numpy's conversion), and are stored exactly as before: the same Arrow types, the same
bits, and the same values refused, naming the column."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import snapshot_cli as snap
from snapshot_cli.writers.records import ColumnBuilder, RecordBuffer

NUMBERS = {  # numpy scalar type -> the Arrow type of a column of them
    np.bool_: pa.bool_(),
    np.int8: pa.int8(),
    np.int16: pa.int16(),
    np.int32: pa.int32(),
    np.int64: pa.int64(),
    np.longlong: pa.int64(),
    np.intc: pa.int32(),
    np.uint8: pa.uint8(),
    np.uint16: pa.uint16(),
    np.uint32: pa.uint32(),
    np.uint64: pa.uint64(),
    np.ulonglong: pa.uint64(),
    np.float16: pa.float16(),
    np.float32: pa.float32(),
    np.float64: pa.float64(),
}
TIMES = {
    f"{kind}[{unit}]": (pa.timestamp if kind == "datetime64" else pa.duration)(unit)
    for kind in ("datetime64", "timedelta64")
    for unit in ("s", "ms", "us", "ns")
}


MISMATCH = snap.SchemaMismatchError
BIG = "int outside the int64 range"


def column(values: list[Any]) -> pa.Array:
    """Column ``x`` of records of ``values``, one each, as a record batch stores it."""
    buffer = RecordBuffer()
    for value in values:
        buffer.add({"x": value})
    (batch,) = buffer.take()
    return batch.column("x")


def some(kind: type) -> list[Any]:
    """Values of a numpy scalar type, its edges among them (NaN, inf, -0.0, the extremes)."""
    if kind is np.bool_:
        return [np.bool_(True), np.bool_(False), np.bool_(True)]
    info = np.finfo(kind) if issubclass(kind, np.floating) else np.iinfo(kind)
    values = [kind(info.min), kind(info.max), kind(0), kind(1)]
    if issubclass(kind, np.floating):
        values += [kind(np.nan), kind(-np.inf), kind(-0.0), kind(info.tiny)]
    return values


def flattened(stored: pa.Array) -> pa.Array:
    """The values of a column of tensors or lists, flat."""
    if isinstance(stored, pa.ExtensionArray):  # (a fixed-shape tensor)
        stored = stored.storage
    while pa.types.is_list(stored.type) or pa.types.is_fixed_size_list(stored.type):
        stored = stored.flatten()
    return stored


def bits(values: Any, dtype: np.dtype) -> bytes:
    return np.asarray(values, dtype=dtype).tobytes()


@pytest.mark.parametrize("kind", list(NUMBERS), ids=lambda k: k.__name__)
def test_numpy_scalars_keep_their_arrow_type_and_bits(kind: type) -> None:
    values = some(kind)
    stored = column(values)
    assert stored.type == NUMBERS[kind]
    assert stored.to_numpy(zero_copy_only=False).tobytes() == bits(values, np.dtype(kind))


def test_a_float32_nan_keeps_its_payload() -> None:
    payload = np.array([0x7FC00001, 0x7F800002], np.uint32).view(np.float32)  # quiet, signalling
    values = [np.float32(1), payload[0], payload[1]]
    assert column(values).to_numpy().view(np.uint32).tolist() == [
        0x3F800000,
        0x7FC00001,
        0x7F800002,
    ]


@pytest.mark.parametrize("dtype", list(TIMES))
def test_numpy_times_keep_their_arrow_type_and_values(dtype: str) -> None:
    values = [np.array(v, dtype=dtype)[()] for v in (0, -5, 2**40, 7)]
    stored = column(values)
    assert stored.type == TIMES[dtype]
    assert stored.to_numpy().view(np.int64).tolist() == [0, -5, 2**40, 7]


def test_numpy_text_items_are_stored_as_python_text() -> None:
    texts = [np.str_("cat"), "dog", np.str_("naïve"), np.str_("")]
    assert column(texts).type == pa.string()
    assert column(texts).to_pylist() == ["cat", "dog", "naïve", ""]
    blobs = [np.bytes_(b"\x00\xff"), b"ab", np.bytes_(b"")]
    assert column(blobs).type == pa.binary()
    assert column(blobs).to_pylist() == [b"\x00\xff", b"ab", b""]


def test_zero_dimensional_arrays_are_scalars_of_their_dtype() -> None:
    stored = column([np.array(1.5), np.float64(2.5), 3.5, np.array(4.5)])
    assert (stored.type, stored.to_pylist()) == (pa.float64(), [1.5, 2.5, 3.5, 4.5])
    stored = column([np.array(3, np.int16), np.int16(-4), np.array(5, np.int16)])
    assert (stored.type, stored.to_pylist()) == (pa.int16(), [3, -4, 5])
    stored = column([np.array("cat"), np.str_("dog")])
    assert (stored.type, stored.to_pylist()) == (pa.string(), ["cat", "dog"])


@pytest.mark.parametrize(
    ("values", "arrow", "stored"),
    [
        ([1.5, np.float64(2.5), np.float64(np.nan)], pa.float64(), [1.5, 2.5, None]),
        ([np.float64(2.5), 1.5], pa.float64(), [2.5, 1.5]),
        ([3, np.int64(4), np.longlong(5)], pa.int64(), [3, 4, 5]),
        ([np.int64(4), 3, 2**63 - 1], pa.int64(), [4, 3, 2**63 - 1]),
        ([True, np.bool_(False)], pa.bool_(), [True, False]),
        ([np.uint64(2**64 - 1), np.ulonglong(1)], pa.uint64(), [2**64 - 1, 1]),
    ],
)
def test_python_and_numpy_scalars_of_one_dtype_share_a_column(
    values: list[Any], arrow: pa.DataType, stored: list[Any]
) -> None:
    got = column(values)
    assert got.type == arrow
    if pa.types.is_floating(arrow):  # (NaN != NaN: compared as None)
        assert [None if v != v else v for v in got.to_pylist()] == stored
    else:
        assert got.to_pylist() == stored


@pytest.mark.parametrize(
    ("values", "error", "match"),
    [
        (
            [np.float32(1), np.float64(2)],
            snap.SchemaMismatchError,
            "float32 scalar before, float64",
        ),
        (
            [np.float64(1), np.float32(2)],
            snap.SchemaMismatchError,
            "float64 scalar before, float32",
        ),
        ([1.5, np.float16(2)], MISMATCH, "float64 scalar before, float16"),
        ([np.int32(1), np.int64(2)], MISMATCH, "int32 scalar before, int64"),
        ([np.int64(1), np.uint64(2)], MISMATCH, "int64 scalar before, uint64"),
        ([np.uint8(1), 2], MISMATCH, "uint8 scalar before, int64"),
        ([np.uint64(1), 2**64], snap.RecordError, "int outside the int64 range"),
        ([np.int64(1), 2**63], snap.RecordError, "int outside the int64 range"),
        ([1, 2**63], snap.RecordError, "int outside the int64 range"),
        ([np.int64(1), np.bool_(True)], MISMATCH, "int64 scalar before, bool"),
        ([np.bool_(True), 1], MISMATCH, "bool scalar before, int64"),
        ([np.float64(1), "a"], MISMATCH, "float64 scalar before, str"),
        (["a", np.bytes_(b"b")], MISMATCH, "str before, bytes"),
        ([np.str_("a"), np.float64(1)], MISMATCH, "str before, float64"),
        ([np.str_("a"), np.str_("\udc80")], snap.RecordError, "not valid Unicode"),
        ([np.complex128(1)], snap.RecordError, "complex"),
        ([np.float64(1), np.complex128(1)], snap.RecordError, "complex"),
        ([np.complex64(1)], snap.RecordError, "complex"),
        ([1.5, 1j], snap.RecordError, "complex"),
        ([np.longdouble(1)], snap.RecordError, "float128"),
        ([np.float64(1), np.longdouble(1)], snap.RecordError, "float128"),
        ([np.datetime64(1, "s"), np.datetime64("NaT", "s")], snap.RecordError, "missing time"),
        ([np.timedelta64(1, "ns"), np.timedelta64("NaT", "ns")], snap.RecordError, "NaT"),
        ([np.datetime64(1, "s"), np.datetime64(1, "ms")], MISMATCH, "datetime64"),
        ([np.datetime64(1, "s"), np.datetime64(1, "D")], snap.RecordError, "datetime64\\[s\\]"),
        ([np.datetime64(1, "s"), np.timedelta64(1, "s")], MISMATCH, "timedelta"),
        ([np.int64(1), np.datetime64(1, "s")], MISMATCH, "int64 scalar before"),
        ([np.datetime64(1, "s"), np.int64(1)], MISMATCH, "int64 scalar now"),
        ([np.int64(1), np.array([1, 2])], MISMATCH, "array of shape"),
        ([np.float64(1), None], snap.RecordError, "no missing values"),
    ],
)
def test_what_was_refused_is_refused_naming_the_column(
    values: list[Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match) as caught:
        column(values)
    assert "'x'" in str(caught.value)


@pytest.mark.parametrize(
    ("value", "refused"),
    [
        ([2**63], False),  # numpy's uint64, exact
        ([2**64], BIG),
        ([1, 2**64], BIG),
        ([1.5, 2**63], BIG),  # numpy would round it to a float64
        ([2**63, -1], BIG),
        ([-(2**63) - 1, 0.5], BIG),
        ([float("nan"), 2**63 + 1], BIG),
        ([float("inf"), 2**64 - 1], BIG),
        ([[1.0], [2**63]], BIG),
        ([[0.5, 1.0], [2.0, -(2**64)]], BIG),
        ((0.5, 2**63), BIG),
        ([np.float32(1), 2**63], BIG),
        ([np.float16(1), 2**64], BIG),
        ([True, 2**64], BIG),
        ([1.0, 2**1100], BIG),  # (numpy: an object array)
        ([0.5] * 20 + [2**63], BIG),  # (more than a few values: numpy tells where to look)
        ([float("nan")] * 20 + [2**64 - 1], BIG),
        ([-1] * 20 + [2**63], BIG),
        ([[0.5] * 10, [2**63] + [0.0] * 9], BIG),
        ([np.float32(0.5)] * 20 + [-(2**63) - 1], BIG),
        ([-(2**63), 0.5], False),  # int64's least, a float64 exactly
        ([2**63 - 1, 0.5], BIG),  # (a float64 rounds it up: it was stored so)
        ([2**53 + 1, 0.5], BIG),
        ([2**53, 0.5, 2**62, -(2**63)], False),  # (each a float64 exactly)
        ([np.uint64(2**63 + 1), np.int64(0)], BIG),  # (numpy's float64, rounded)
        ([np.int64(-1), np.uint64(2**64 - 1)], BIG),
        ([np.uint64(2**52), np.int64(-1)], False),  # (float64, exact)
        ([[0.5], [np.int64(2**60 + 1)]], BIG),
        ([1e19, 2.0, float("nan"), float("-inf")], False),  # floats past 2**63: no ints
        ([1, 2.5, 3], False),  # ints and floats: float64
        ([0.5] * 20 + [2**62, -(2**63), 1e19, float("inf")], False),
        ([0.5] * 20 + [2**63 - 1], BIG),
        ([[0.5] * 10, [3] * 10], False),
        ([np.float16(0.5)] * 20 + [2**62], False),  # (float16's inf: an int64 int)
        ([True, 2.0], False),
        ([np.float32(0.1), np.float32(2)], False),  # float32
        ([np.float16(0.1), 3], False),  # float16 and an int
        ([np.int8(1), 2**62], False),
        ([[1, 2], [3, 4]], False),
        ([np.datetime64(1, "s"), np.datetime64(2, "s")], "holds one per record"),
        ([1.5, 1j], "complex128"),
    ],
)
def test_a_list_of_numbers_is_stored_exactly_or_refused(value: Any, refused: Any) -> None:
    if refused:
        with pytest.raises(snap.RecordError, match=refused) as caught:
            column([value])
        assert "'x'" in str(caught.value)
        return
    expected = np.asarray(value)
    for values in ([value], [value, value]):  # the first value, and one after it
        got = flattened(column(values)).to_numpy(zero_copy_only=False)
        assert got.dtype == expected.dtype
        assert got.tobytes() == np.concatenate([expected.ravel()] * len(values)).tobytes()


def test_numpy_scalars_of_every_dtype_replay_as_given(tmp_path: Path) -> None:
    kinds = list(NUMBERS)

    def records() -> Any:
        for i in range(3):
            record: dict[str, Any] = {k.__name__: some(k)[i] for k in kinds}
            record["when"] = np.datetime64(i, "ms")
            record["took"] = np.timedelta64(i, "us")
            record["name"] = np.str_(f"n{i}")
            record["blob"] = np.bytes_(bytes([i]))
            yield record

    snap.create(records, tmp_path / "s", workers=0)
    loaded = snap.open(tmp_path / "s").head(3)
    given = list(records())
    for name in given[0]:
        got = [row[name] for row in loaded]
        want = [rec[name] for rec in given]
        if isinstance(want[0], (np.str_, np.bytes_)):
            assert got == [w[:] for w in want]  # (whole: np.bytes_(b"\\x00") is b"\\x00")
        else:
            assert np.asarray(got).dtype == np.asarray(want).dtype, name
            assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), name


def test_a_list_of_floats_is_not_scanned_in_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python scan for ints past int64 (47 us a list of 512 floats: 7x numpy's
    conversion) runs only where numpy's array could hide one; a speed figure is
    ``benchmarks/record_shapes.py --shapes floats512``."""
    from snapshot_cli import arrays

    scans: list[int] = []
    real = arrays._holds_big_int
    monkeypatch.setattr(arrays, "_holds_big_int", lambda v, f: scans.append(len(v)) or real(v, f))
    builder = ColumnBuilder("emb")
    rows = [[float(j + k) for j in range(512)] for k in range(8)]  # (as emb.tolist() gives)
    for k in range(500):
        builder.append(rows[k % 8])
    assert scans == []
    with pytest.raises(snap.RecordError, match="emb"):  # where one may hide: scanned, refused
        builder.append([0.5] * 511 + [2**64])
    assert scans == [512]


def test_numpy_scalars_skip_the_general_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """A numpy scalar like its column's first value is taken as a Python one is (the general
    path cost 2.5 us a value, 6x a Python scalar's); a speed figure is
    ``benchmarks/record_shapes.py --shapes npscalars,pyscalars``."""
    from snapshot_cli.writers import records

    general: list[str] = []
    real = records.normalise
    monkeypatch.setattr(records, "normalise", lambda v, c: general.append(c) or real(v, c))
    ids = np.arange(1000, dtype=np.int64)
    buffer = RecordBuffer()
    for k in range(len(ids)):
        buffer.add({"id": ids[k], "x": ids[k].astype(np.float32), "t": np.datetime64(k, "ms")})
    table = buffer.take()
    assert sorted(general) == ["id", "t", "x"]  # each column's first value only
    assert table is not None
