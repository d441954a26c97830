"""One record at a time → one column builder per column (pure: no I/O, no threads).

A *record* is a plain ``dict[str, value]``; :class:`RecordBuffer` collects records until
they make a record batch. Every value is checked as it arrives, against the record before
it and against the types the task has already written, so an error names the record that
broke the rule, not a batch built later.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from .. import arrays, mismatch
from .. import schema as schema_mod
from ..arrays import OffsetOverflow, from_numpy, strings
from ..errors import RecordError, SchemaMismatchError
from . import advice, quick
from .record_names import check_names, different_columns
from .values import (
    ARRAY,
    BINARY,
    FAST,
    INT_ADVICE_OTHER,
    INT_ADVICE_UINT64,
    LISTS,
    SCALAR,
    STRING,
    arrow_type,
    check_utf8,
    classify,
    describe,
    normalise,
    text_list,
)

__all__ = ["ColumnBuilder", "RecordBuffer", "check_names", "different_columns"]

_TAKES_EMPTY = (None, ARRAY, *LISTS)  # the classes an empty list may be a value of
_LIST_TYPES = {pa.list_(element): cls for cls, element in LISTS.items()}
_TIMES = (np.datetime64, np.timedelta64)
FIRST_BLOCK_BYTES = 4 << 20  # a column buffer's first block, at most (then doubled)


class ColumnBuilder:
    """Collects one column's values and checks that each matches the first one's class/dtype
    and, when the task has written the column before, the type it wrote (``target``).

    An array is copied as it arrives, never kept by reference: a pipeline may fill the same
    buffer for every record it yields (a preallocated array, a torch tensor it refills), and
    kept, every record would hold the last one's values. Arrays of one shape are copied into
    rows of ``block`` (the copy ``np.stack`` made when the batch was built), others one by one."""

    __slots__ = ("name", "cls", "dtype", "shape", "varying", "values", "target", "ragged",
                 "block", "rows", "capacity", "long", "empties", "like", "kind")  # fmt: skip

    def __init__(
        self,
        name: str,
        target: pa.DataType | None = None,
        ragged: bool = False,
        capacity: tuple[int, int] = (1024, 1 << 20),
        like: tuple[np.dtype, tuple[int, ...]] | None = None,
    ) -> None:
        self.name, self.target, self.ragged = name, target, ragged
        self.kind = None if target is None else schema_mod.kind(target)  # (once: 45% of a
        # ragged column's time went to it, value by value)
        self.like = like  # (dtype, shape) of an array the task gave the column before
        self.cls: str | None = None
        self.dtype: Any = None
        self.shape: Any = None
        self.varying = False
        self.values: list[Any] = []
        self.block: np.ndarray | None = None  # the arrays of one shape so far, by row
        self.rows = 0
        self.capacity = capacity  # (records, bytes) a buffer holds before it is taken
        self.long = arrays.MAX_OFFSET >> 2  # text longer may be past one value's bytes
        self.empties = 0  # empty lists before the column's first typed value (see _empty)

    def append(self, value: Any) -> int:
        """Add one value; returns its approximate size in bytes."""
        kind = type(value)
        if kind is np.ndarray and value.dtype == object and value.shape == (0,):
            value, kind = [], list  # (a text Series filtered to no rows: as an empty list)
        if (kind is list or kind is tuple) and not value and self.cls in _TAKES_EMPTY:
            return self._empty()
        if (  # an array like the column's first: copied into its row, no more checks
            kind is np.ndarray
            and self.block is not None
            and value.shape == self.shape
            and value.dtype == self.dtype
        ):
            self._put(value)
            return int(value.nbytes)
        if (  # a ragged column's array of its dtype and ndim: copied, checked only for size
            kind is np.ndarray
            and self.varying
            and value.dtype == self.dtype
            and value.ndim == len(self.shape)
            and quick.array_fits(value)
        ):
            self.values.append(value.copy())
            return int(value.nbytes)
        if (kind is list or kind is tuple) and self.cls in LISTS:  # captions: str, str, ...
            texts = quick.text_list(value, self.cls)
            if texts is not None:
                self.values.append(texts[0])
                return texts[1]
        fast = FAST.get(kind)
        if fast is not None and fast[0] == self.cls and fast[1] == self.dtype:
            # a scalar or text like the column's first value, Python's or numpy's: the checks
            # that matter only (500 float columns a record: 5.8 us a value through the general
            # path; a numpy scalar 2.5 us)
            if fast[1] is not None:  # a number
                if kind is int and not -(2**63) <= value < 2**63:
                    classify(value, self.name)  # raises, naming the column
                self.values.append(value)
                return 8
            if kind is not str and kind is not bytes:  # np.str_, np.bytes_: as Python's
                value = value[:]  # (whole: .item() drops trailing NULs, values.plain_text)
            if type(value) is str and not value.isascii():
                check_utf8(value, self.name)
            if len(value) > self.long:  # maybe past what one value holds: raises if so
                classify(value, self.name)
            self.values.append(value)
            return len(value)
        if (  # a time of the column's unit (NaT, whose item() is None, is refused below)
            kind in _TIMES and self.cls == SCALAR and value.dtype == self.dtype
        ) and value.item() is not None:
            self.values.append(value)
            return 8
        value = normalise(value, self.name)
        cls, dtype, shape = classify(value, self.name)
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value[()]
        if self.cls is None:
            self.cls, self.dtype, self.shape = cls, dtype, shape
            if self.empties:
                self._type_the_empties()
            if self.target is not None:
                self._check_target(self.target)
        elif cls != self.cls or dtype != self.dtype:
            raise SchemaMismatchError(
                f"column {self.name!r} changed type between records: "
                f"{describe(self.cls, self.dtype, self.shape)} before, "
                f"{describe(cls, dtype, shape)} now"
                + mismatch.convert_hint(arrow_type(self.cls, self.dtype), arrow_type(cls, dtype))
            )
        elif cls == ARRAY and shape != self.shape:
            if len(shape) != len(self.shape):
                raise SchemaMismatchError(
                    f"column {self.name!r} changed number of dimensions between records: "
                    f"shape {tuple(self.shape)} before, {tuple(shape)} now "
                    "(ragged columns must keep the same ndim)"
                )
            if self.kind == "tensor":
                now = schema_mod.ragged_type(pa.from_numpy_dtype(dtype), len(shape))
                raise SchemaMismatchError(mismatch.mismatch_message(self.name, self.target, now))
            if not self.varying:  # the rows so far become values of their own
                self.values, self.block = list(self._stacked()), None
            self.varying = True
        if cls == ARRAY:
            if self.varying:
                self.values.append(np.array(value, copy=True))
            else:
                self._put(value)
            return int(value.nbytes)
        self.values.append(value)
        if cls in (STRING, BINARY):
            return len(value)
        if cls in LISTS:
            return 8 + sum(len(v) + 4 for v in value)
        return 8

    def _empty(self) -> int:
        """An empty list or tuple (no boxes in this image, no labels): numpy makes it a float64
        array of shape (0,), whatever the column holds, so ``[]`` beside ``[3, 7]`` changed
        the column's type. It takes the column's dtype and trailing dimensions instead: of the
        values before it (in this buffer, else in the task's earlier record batches), else of
        the type the task wrote (a ragged column's), else of the first typed value after it."""
        if self.cls == ARRAY:
            return self.append(np.empty((0, *self.shape[1:]), self.dtype))
        if self.cls in LISTS:  # no captions for this image
            self.values.append([])
            return 8
        if self.target in _LIST_TYPES:
            self.cls = _LIST_TYPES[self.target]
            self.values.append([])
            return 8
        if self.like is not None:
            return self.append(np.empty((0, *self.like[1][1:]), self.like[0]))
        info = schema_mod.ragged_info(self.target) if self.target is not None else None
        if info is not None:
            value_type, ndim = info
            return self.append(np.empty((0,) * ndim, schema_mod.dtype_name(value_type)))
        self.empties += 1
        return 0

    def _type_the_empties(self) -> None:
        """The column's first typed value came after ``empties`` empty lists: they become
        arrays of its dtype and trailing dimensions, and the column varies in shape."""
        if self.cls in LISTS:
            self.values, self.empties = [[] for _ in range(self.empties)], 0
            return
        if self.cls != ARRAY:
            now = describe(self.cls or "", self.dtype, self.shape)
            raise SchemaMismatchError(
                f"column {self.name!r} changed type between records: an empty list before, "
                f"{now} now; give it one type throughout"
            )
        empty = np.empty((0, *self.shape[1:]), self.dtype)
        self.values, self.block, self.shape = [empty] * self.empties, None, empty.shape
        self.varying, self.empties = True, 0

    def settle(self) -> None:
        """Before building: a column of nothing but empty lists (no type seen) is stored as
        numpy makes them, float64 arrays of shape (0,)."""
        if self.cls is None and self.empties:
            self.cls, self.dtype, self.shape = ARRAY, np.dtype(np.float64), (0,)
            self.values, self.varying, self.empties = [np.empty(0)] * self.empties, True, 0

    def _put(self, value: np.ndarray) -> None:
        """Copy an array of the column's shape into the next row of ``block``: at first
        FIRST_BLOCK_BYTES at most, doubled up to what the buffer holds (--batch-bytes 64GiB
        allocated 64 GiB at a task's first record, however few records it had)."""
        block = self.block
        if block is None or self.rows == len(block):
            rows, nbytes = self.capacity
            most = min(rows, nbytes // max(1, value.nbytes) + 1)
            first = min(most, FIRST_BLOCK_BYTES // max(1, value.nbytes) + 1)
            size = max(first, min(most, 2 * self.rows), self.rows + 1)
            grown = np.empty((size, *self.shape), self.dtype)
            if block is not None:
                grown[: self.rows] = block[: self.rows]
            self.block = block = grown
        block[self.rows] = value
        self.rows += 1

    def _stacked(self) -> np.ndarray:
        if self.block is None:
            return np.empty((0, *self.shape), self.dtype)
        return self.block[: self.rows]

    def _check_target(self, target: pa.DataType) -> None:
        """The first value of this buffer has the type the task wrote before, or raise."""
        if self.cls == SCALAR:
            now = pa.from_numpy_dtype(self.dtype)
        elif self.cls == STRING:
            now = pa.string()
        elif self.cls == BINARY:
            now = pa.binary()
        elif self.cls in LISTS:
            now = pa.list_(LISTS[self.cls])
        elif self._is_ragged(target):
            now = schema_mod.ragged_type(pa.from_numpy_dtype(self.dtype), len(self.shape))
        else:
            now = pa.fixed_shape_tensor(pa.from_numpy_dtype(self.dtype), self.shape)
        if now != target:
            raise SchemaMismatchError(mismatch.mismatch_message(self.name, target, now))

    def _is_ragged(self, target: pa.DataType | None) -> bool:
        target_ragged = (
            target is not None
            and (self.kind if target is self.target else schema_mod.kind(target)) == "ragged"
        )
        return self.varying or self.ragged or target_ragged or any(d == 0 for d in self.shape)

    def build(
        self, target: pa.DataType | None, ragged: bool, rows: slice | None = None
    ) -> pa.Array:
        """Turn the collected values (those of ``rows``) into an Arrow array of the column's
        type.

        Raises:
            OffsetOverflow: they hold more text, bytes or ragged values than one array can.
        """
        values = self.values if rows is None else self.values[rows]
        if self.cls == SCALAR:
            try:
                return from_numpy(np.asarray(values, dtype=self.dtype))
            except OverflowError as err:
                raise RecordError(
                    f"column {self.name!r} has an int outside the int64 range; a positive one "
                    f"below 2**64: {INT_ADVICE_UINT64}; any other: {INT_ADVICE_OTHER}"
                ) from err
        if self.cls == STRING:
            return strings(values, pa.string())
        if self.cls == BINARY:
            return strings(values, pa.binary())
        if self.cls in LISTS:
            return arrays.text_lists(values, LISTS[self.cls])
        self.ragged = self.ragged or ragged
        if self.varying:
            return quick.ragged_array(values, self.dtype, len(self.shape))
        stacked = self._stacked() if rows is None else self._stacked()[rows]
        if self._is_ragged(target):
            return schema_mod.ragged_array(list(stacked), self.dtype, len(self.shape))
        return schema_mod.tensor_array(stacked)


class RecordBuffer:
    """Accumulates records column by column until they make a record batch."""

    def __init__(
        self, ragged: frozenset[str] = frozenset(), capacity: tuple[int, int] = (1024, 1 << 20)
    ) -> None:
        self.ragged, self.capacity = ragged, capacity  # (records, bytes) before it is taken
        self.like: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}  # arrays' (dtype, shape)
        # by column in the batches taken before: what an empty list there is made like
        self.columns: dict[str, ColumnBuilder] | None = None
        self.quick: quick.Plan | None | bool = None  # records like the first (False: none)
        self.rows = 0
        self.nbytes = 0

    def add(self, record: Mapping[str, Any], schema: pa.Schema | None = None) -> None:
        """Append one record, checked against the records before it and against ``schema``,
        the types the task has written so far.

        Raises:
            RecordError: naming the offending column or key (SchemaMismatchError for a type
                or a set of keys other than before).
        """
        if self.quick and type(record) is dict:  # (the same keys and types: no checks of them)
            size = quick.take(self.quick, record)  # type: ignore[arg-type]
            if size is not None:
                self.rows, self.nbytes = self.rows + 1, self.nbytes + size
                return
        if self.columns is None:
            if not record:
                raise RecordError("a record is an empty dict; it needs at least one column")
            if any(text_list(v) is not None for v in record.values()):
                advice.warn_columnwise(record)
            for key in record:
                if not isinstance(key, str):
                    raise RecordError(f"record keys must be str, got {key!r}")
            if schema is None:
                check_names(list(record))
            elif record.keys() != set(schema.names):
                raise SchemaMismatchError(f"a record {different_columns(schema.names, record)}")
            self.columns = {
                k: ColumnBuilder(
                    k,
                    schema.field(k).type if schema is not None else None,
                    k in self.ragged,
                    self.capacity,
                    self.like.get(k),
                )
                for k in record
            }
        elif record.keys() != self.columns.keys():
            raise SchemaMismatchError(f"a record {different_columns(self.columns, record)}")
        size = 0
        try:
            for key, builder in self.columns.items():
                size += builder.append(record[key])
        except RecordError as err:
            hint = advice.columnwise_hint(record) if self.rows == 0 else ""
            if hint:
                raise type(err)(f"{err}{hint}") from None
            raise
        self.rows += 1
        self.nbytes += size
        if self.quick is None and type(record) is dict:
            self.quick = quick.plan(record, self.columns) or False

    def untyped(self) -> bool:
        """Whether a column has had nothing but empty lists (no type yet)."""
        columns = self.columns or {}
        return any(b.cls is None and b.empties for b in columns.values())

    def take(self) -> list[pa.RecordBatch]:
        """Build a record batch of everything buffered and reset: one, or several where its
        text, bytes or ragged values are more than one Arrow array holds (2 GiB)."""
        if self.columns is None:
            raise RuntimeError("take() on an empty RecordBuffer")
        builders, rows = self.columns, self.rows
        self.columns, self.rows, self.nbytes, self.quick = None, 0, 0, None
        for name, builder in builders.items():
            builder.settle()
            if builder.cls == ARRAY:
                self.like[name] = (builder.dtype, builder.shape)
        return _build(builders, None, rows)


def _build(builders: dict[str, ColumnBuilder], rows: slice | None, n: int) -> list[pa.RecordBatch]:
    """Record batches of the ``n`` buffered ``rows`` (None: all), halved until each fits."""
    try:
        built = [b.build(b.target, b.ragged, rows) for b in builders.values()]
        return [pa.RecordBatch.from_arrays(built, names=list(builders))]
    except OffsetOverflow:
        if n == 1:  # each value was checked: more than one can never hold
            raise
    start = 0 if rows is None else rows.start
    half = n // 2
    return _build(builders, slice(start, start + half), half) + _build(
        builders, slice(start + half, start + n), n - half
    )
