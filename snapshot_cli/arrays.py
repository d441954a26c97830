"""numpy ↔ Arrow for snap's columns without pyarrow's pandas shim (pure).

pyarrow's generic conversions (``pa.array``, ``Array.to_numpy``, ``pa.scalar``) import pandas
on their first call whenever it is installed (apache/arrow#34994), as it is in most training
environments: 0.5 s of CPU, paid by every create worker in its first task and, before its
first batch, by every loader of a snapshot with string or ragged columns. snap's columns are
fixed-width buffers (numbers, times, tensors, offsets), strings and lists of strings, so they
are built from and read as buffers directly here (numbers without a copy, as pyarrow does).
Anything else (nulls, non-native byte order, other Arrow types a pipeline yielded in its own
record batches) goes through pyarrow's generic path as before, with its checks and errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

_KINDS = "iuf"  # integers and floats: one fixed-width buffer each (bool is packed to bits)
TIME_UNITS = ("s", "ms", "us", "ns")  # Arrow's timestamp and duration units

# Arrow's 32-bit lengths: the bytes of one string or binary array, the values of one list
# array, and the values of one record of a fixed-size list (a tensor) are at most this.
MAX_OFFSET = 2**31 - 1


class OffsetOverflow(ValueError):
    """The values do not fit one Arrow array with 32-bit offsets: split their rows."""


def from_numpy(values: np.ndarray) -> pa.Array:
    """A 1-d numpy array → an Arrow array of the same values (none null), no copy if it is
    contiguous. bool is packed to bits; other dtypes go through ``pa.array``."""
    if values.ndim != 1:
        raise ValueError(f"from_numpy takes 1-d arrays, got shape {values.shape}")
    dtype = values.dtype
    if dtype == np.dtype(bool):
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
    if dtype.kind in "mM" and dtype.isnative and not np.isnat(values).any():
        unit, count = np.datetime_data(dtype)
        if unit in TIME_UNITS and count == 1:  # as pa.array stores them
            time_type = pa.timestamp(unit) if dtype.kind == "M" else pa.duration(unit)
            data = np.ascontiguousarray(values).view(np.int64)
            return pa.Array.from_buffers(time_type, len(data), [None, pa.py_buffer(data)])
    if dtype.kind not in _KINDS or not dtype.isnative or dtype.itemsize > 8:
        return pa.array(values)  # float128, complex, objects, big-endian: pyarrow decides
    data = np.ascontiguousarray(values)
    arrow_type = pa.from_numpy_dtype(dtype)
    return pa.Array.from_buffers(arrow_type, len(data), [None, pa.py_buffer(data)])


def strings(values: Sequence[str | bytes], arrow_type: pa.DataType) -> pa.Array:
    """``str`` values → ``pa.string()``, or ``bytes`` values → ``pa.binary()``.

    Raises:
        OffsetOverflow: they hold more than :data:`MAX_OFFSET` bytes.
    """
    data: list[bytes] = (
        [str.encode(v, "utf-8") for v in values]  # type: ignore[arg-type]
        if pa.types.is_string(arrow_type)
        else list(values)  # type: ignore[arg-type]
    )
    sizes = np.fromiter(map(len, data), np.int64, len(data))
    offsets = np.zeros(len(data) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    if offsets[-1] > MAX_OFFSET:
        raise OffsetOverflow(f"{int(offsets[-1]):,} bytes of {arrow_type} in one array")
    buffers = [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(data))]
    return pa.Array.from_buffers(arrow_type, len(data), buffers)


def text_lists(values: Sequence[Sequence[str | bytes]], arrow_type: pa.DataType) -> pa.Array:
    """Lists of ``str`` (``arrow_type`` ``pa.string()``) or of ``bytes`` (``pa.binary()``)
    → ``list<arrow_type>``, as ``pa.array(values, pa.list_(arrow_type))`` makes them.

    Raises:
        OffsetOverflow: more than :data:`MAX_OFFSET` items, or bytes of them.
    """
    lengths = np.fromiter(map(len, values), np.int64, len(values))
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > MAX_OFFSET:
        raise OffsetOverflow(f"{int(offsets[-1]):,} items of lists of {arrow_type} in one array")
    items = strings([item for value in values for item in value], arrow_type)
    return pa.ListArray.from_arrays(from_numpy(offsets.astype(np.int32)), items)


def nbytes(data: Any) -> int:
    """The bytes an Arrow array, chunked array, record batch or table refers to (a slice's
    own); where pyarrow cannot count them (a ``string_view`` before pyarrow 21), its
    buffers' whole sizes, which is more."""
    try:
        return int(data.nbytes)
    except pa.ArrowException:
        return int(data.get_total_buffer_size())


def to_numpy(arr: pa.Array) -> np.ndarray:
    """An Arrow array → numpy: a read-only view for fixed-width values without nulls, bool
    unpacked; anything else through ``Array.to_numpy`` (a copy)."""
    t = arr.type
    if arr.null_count == 0:
        if pa.types.is_boolean(t):  # the bytes of the slice only (a batch of a window)
            if not len(arr):
                return np.empty(0, bool)
            first, skip = divmod(arr.offset, 8)
            bits = np.frombuffer(arr.buffers()[1], np.uint8)[first:]
            unpacked = np.unpackbits(bits, bitorder="little", count=skip + len(arr))
            return unpacked[skip:].view(bool)
        dtype = numpy_dtype(t)
        if pa.types.is_timestamp(t) or pa.types.is_duration(t):  # a zone's: its UTC times
            dtype = np.dtype(f"{'M8' if pa.types.is_timestamp(t) else 'm8'}[{t.unit}]")
        if dtype is not None:
            data = arr.buffers()[1]
            if data is None:  # an empty array may have no buffer
                return np.empty(0, dtype)
            return np.frombuffer(data, dtype, len(arr), arr.offset * dtype.itemsize)
    return arr.to_numpy(zero_copy_only=False)


# Arrow's numeric types and their numpy dtypes. (Not ``DataType.to_pandas_dtype()``: before
# pyarrow 26 it imports pandas, and fails where pandas is not installed.)
_NUMPY = {
    pa.from_numpy_dtype(np.dtype(name)): np.dtype(name)
    for name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float16", "float32", "float64")
}  # fmt: skip


def numpy_dtype(t: pa.DataType) -> np.dtype | None:
    """The numpy dtype of an integer or floating Arrow type; None for any other."""
    return _NUMPY.get(t)


__all__ = ["from_numpy", "numpy_dtype", "strings", "to_numpy"]


def all_nullable(t: pa.DataType) -> pa.DataType:
    """``t`` with every child field of its lists, structs, maps and unions nullable (a map's
    keys aside, which Arrow keeps non-null): what a shard's type and its manifest's must
    agree on. Nullability changes no buffer of Arrow's IPC format, and snap stores no nulls
    and refuses any it reads; a manifest's schema damaged there alone made ``snap verify``
    call every shard damaged and advise deleting them."""

    def loose(f: pa.Field) -> pa.Field:
        return f.with_type(all_nullable(f.type)).with_nullable(True)

    if isinstance(t, pa.BaseExtensionType):
        return t
    if pa.types.is_dictionary(t):
        return pa.dictionary(t.index_type, all_nullable(t.value_type), t.ordered)
    if pa.types.is_run_end_encoded(t):
        return pa.run_end_encoded(t.run_end_type, all_nullable(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([loose(f) for f in t])
    if pa.types.is_map(t):
        key = t.key_field.with_type(all_nullable(t.key_type))
        return pa.map_(key, loose(t.item_field), t.keys_sorted)
    if pa.types.is_union(t):
        return pa.union([loose(f) for f in t], t.mode, t.type_codes)
    kinds = {
        pa.types.is_list: pa.list_,
        pa.types.is_large_list: pa.large_list,
        pa.types.is_list_view: pa.list_view,
        pa.types.is_large_list_view: pa.large_list_view,
    }
    for kind, build in kinds.items():
        if kind(t):
            return build(loose(t.value_field))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(loose(t.value_field), t.list_size)
    return t  # (no child fields of their own)


IPC_MAX_DEPTH = 64  # the most nested levels Arrow's IPC writer takes (a field's type: 1)


def nesting_depth(t: pa.DataType) -> int:
    """Levels of ``t``: 1 for a flat type, one more for each list, struct, map (two: its
    entries and their item) or union around it; a dictionary's or an extension's as its
    values' or storage's. A loop, not a recursion: 400 levels passed Python's limit, a
    RecursionError where the refusal of :func:`too_deep` was meant."""
    deepest, todo = 0, [(t, 1)]
    while todo:
        t, level = todo.pop()
        if isinstance(t, pa.BaseExtensionType):
            t = t.storage_type
        if pa.types.is_dictionary(t):
            todo.append((t.value_type, level))
            continue
        deepest = max(deepest, level)
        todo.extend((t.field(i).type, level + 1) for i in range(t.num_fields))
    return deepest


def too_deep(schema: pa.Schema) -> str | None:
    """Why a column cannot be stored for its nesting, or None: Arrow's IPC writer refused it
    mid-shard ("Max recursion depth reached"), which was said as a storage fault with advice
    to run the same command again."""
    for f in schema:
        if (depth := nesting_depth(f.type)) > IPC_MAX_DEPTH:
            return (
                f"the column {f.name!r} holds {depth - 1} levels of lists, structs or maps "
                f"within each other (a map counts two), more than the {IPC_MAX_DEPTH - 1} Arrow "
                "files hold; store its inner levels flatter, e.g. as JSON text or bytes"
            )
    return None


def rounded_ints(value: list[Any] | tuple[Any, ...], array: np.ndarray) -> bool:
    """Whether ``array``, numpy's array of the (nested) list ``value``, lost an int of it:
    a Python int no int64 holds (made a float or kept an object), or an int (Python's or
    numpy's) beside floats or numpy uint64 beside signed ints (made float64) that a float64
    does not hold exactly (past 2**53): ``[uint64(2**63 + 1), int64(0)]`` was stored as
    ``[9.223372036854776e+18, 0.0]``. The list is scanned in Python only where numpy's array
    may hold such an int (36 us for 512 floats, 5x numpy's conversion)."""
    kind = array.dtype.kind
    may = kind == "O" or (
        kind == "f" and (array.size <= 16 or bool((np.abs(array) > _EXACT_END).any()))
    )
    return may and _holds_big_int(value, kind == "f")


_EXACT_END = 2.0**53  # (the last of the ints a float64 holds each of)


def _holds_big_int(value: list[Any] | tuple[Any, ...], floated: bool) -> bool:
    return any(
        _holds_big_int(v, floated)
        if isinstance(v, (list, tuple))
        else (type(v) is int and not -(2**63) <= v < 2**63)
        or (floated and isinstance(v, (int, np.integer)) and int(float(v)) != int(v))
        for v in value
    )
