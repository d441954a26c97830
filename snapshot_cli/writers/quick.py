"""Quick paths for values like the ones their column already has (pure: no I/O, no threads).

The general path (:func:`.values.normalise`, then :func:`.values.classify`) learns what a
value is; once a column has its class and dtype, a value of the same Python type needs only
the checks that can fail for it. These take such values (a ragged array of the column's
dtype and ndim, a list of text, a record of numbers of the types the record before had)
with those checks only, and hand anything else back to the general path (None, False), so
that what is stored, each message and the record it names are the general path's. A
ragged column is built here as :func:`..schema.ragged_array` builds it, byte for byte,
with fewer steps per value (a 2-D Batch column of 300,000 records spent 45% of its
``snap create`` in the general path's per-value calls).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from .. import arrays
from .. import schema as schema_mod
from .values import BLOBS, FAST, SCALAR, TEXTS

_SIZE = operator.attrgetter("size")
_SHAPE = operator.attrgetter("shape")
_ITEM = {TEXTS: str, BLOBS: bytes}  # the one type of a list's items a column takes as it is


def array_fits(value: np.ndarray) -> bool:
    """Whether an array passes :func:`.values.classify`'s limits: at most ``MAX_OFFSET``
    values, and (an empty one's shape) dimensions of at most ``MAX_DIMENSION``."""
    size = value.size
    if size:  # (each dimension <= size <= MAX_OFFSET == MAX_DIMENSION)
        return size <= arrays.MAX_OFFSET
    return max(value.shape) <= schema_mod.MAX_DIMENSION


def ragged_array(values: Sequence[np.ndarray], dtype: np.dtype, ndim: int) -> pa.Array:
    """:func:`..schema.ragged_array` of arrays all of ``dtype`` and ``ndim``: the same array,
    its values flattened and joined by one ``np.concatenate``, its shapes read in one pass.

    Raises:
        OffsetOverflow: more values than one Arrow array holds.
        RecordError: a dimension past ``MAX_DIMENSION`` (an empty array's).
    """
    n = len(values)
    sizes = np.fromiter(map(len if ndim == 1 else _SIZE, values), np.int64, n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    if offsets[-1] > arrays.MAX_OFFSET:
        raise arrays.OffsetOverflow(f"{int(offsets[-1]):,} values of a ragged column in one array")
    flat = np.concatenate(values, axis=None, dtype=dtype) if n else np.empty(0, dtype)
    data = pa.ListArray.from_arrays(
        arrays.from_numpy(offsets.astype(np.int32)), arrays.from_numpy(flat)
    )
    if ndim == 1:
        return data
    dims = itertools.chain.from_iterable(map(_SHAPE, values))
    shapes = np.fromiter(dims, np.int64, n * ndim)
    if n and shapes.max() > schema_mod.MAX_DIMENSION:  # (as schema.ragged_array says it)
        return schema_mod.ragged_array(values, dtype, ndim)
    shape_arr = pa.FixedSizeListArray.from_arrays(arrays.from_numpy(shapes.astype(np.int32)), ndim)
    fields = list(schema_mod.ragged_type(pa.from_numpy_dtype(dtype), ndim))
    return pa.StructArray.from_arrays([data, shape_arr], fields=fields)


def ragged_column(col: Sequence[Any] | np.ndarray, target: pa.DataType | None) -> pa.Array | None:
    """A Batch column given as a list of arrays of one supported dtype and ndim, not all of
    one shape, each within :func:`array_fits`, and ``target`` (the type the task wrote)
    None or their ragged type: the ragged array a column builder would make of them. None
    for any other column (the column builder's, whose messages name what is wrong)."""
    col = col if type(col) is list else list(col)  # (an object array's items)
    if not col or type(col[0]) is not np.ndarray:
        return None
    first = col[0]
    dtype, ndim, shape = first.dtype, first.ndim, first.shape
    if not ndim or not schema_mod.is_supported_dtype(dtype):
        return None
    varies = False
    for value in col:
        if type(value) is not np.ndarray or value.dtype != dtype or value.ndim != ndim:
            return None
        if not array_fits(value):
            return None
        varies = varies or value.shape != shape
    if not varies:  # (a tensor, unless declared ragged: the builder's block of rows)
        return None
    if target is not None and target != schema_mod.ragged_type(pa.from_numpy_dtype(dtype), ndim):
        return None
    return ragged_array(col, dtype, ndim)


def text_list(value: list[Any] | tuple[Any, ...], cls: str) -> tuple[list[Any], int] | None:
    """A non-empty list or tuple of ``str`` (``cls`` TEXTS) or ``bytes`` (BLOBS), each of
    that type exactly, valid UTF-8 and not near the 2 GiB a value holds: a copy of its items
    and the size :class:`.records.ColumnBuilder` counts for it; None for any other value."""
    item = _ITEM[cls]
    total = 0
    for v in value:
        if type(v) is not item:
            return None
        total += len(v)
    if total > arrays.MAX_OFFSET >> 2:
        return None  # (maybe past what one value holds: the general path measures it)
    if item is str:
        joined = "".join(value)
        if not joined.isascii():
            try:
                joined.encode("utf-8")
            except UnicodeEncodeError:
                return None  # (a lone surrogate: the general path names it)
    return list(value), 8 + total + 4 * len(value)


class Plan(NamedTuple):
    """How records like one before them are taken: their keys and values' types, in order;
    ``plain``: which columns take a value as it is (a number of the column's dtype, which
    no check can refuse), by ``appends`` (their lists' ``append``), 8 bytes each (``size``);
    the others by their builders' ``append`` (``checked``), in order."""

    names: tuple[str, ...]
    types: tuple[type, ...]
    plain: tuple[bool, ...]
    appends: tuple[Callable[[Any], None], ...]
    checked: tuple[Any, ...]
    others: tuple[bool, ...]
    size: int


def plan(record: dict[str, Any], builders: dict[str, Any]) -> Plan | None:
    """The :class:`Plan` of records like ``record`` (which the ``builders`` took), or None
    where no column of it takes its value as it is."""
    names = tuple(record)
    if names != tuple(builders):
        return None
    types = tuple(map(type, record.values()))
    plain = tuple(  # (an int is checked against int64's range)
        t is not int and b.cls == SCALAR and FAST.get(t) == (SCALAR, b.dtype)
        for t, b in zip(types, builders.values(), strict=True)
    )
    if not any(plain):
        return None
    chosen = list(builders.values())
    appends = tuple(b.values.append for b, p in zip(chosen, plain, strict=True) if p)
    checked = tuple(b for b, p in zip(chosen, plain, strict=True) if not p)
    others = tuple(not p for p in plain)
    return Plan(names, types, plain, appends, checked, others, 8 * len(appends))


def take(quick: Plan, record: dict[str, Any]) -> int | None:
    """Add ``record`` to the builders by ``quick`` if it is like the record it was made of
    (the same keys in the same order, values of the same types): its size, else None."""
    if tuple(record) != quick.names or tuple(map(type, record.values())) != quick.types:
        return None
    values = record.values()
    for append, value in zip(quick.appends, itertools.compress(values, quick.plain), strict=True):
        append(value)
    size = quick.size
    for builder, value in zip(quick.checked, itertools.compress(values, quick.others), strict=True):
        size += builder.append(value)
    return size
