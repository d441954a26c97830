"""One record at a time → one column builder per column (pure: no I/O, no threads).

A *record* is a plain ``dict[str, value]``; :class:`RecordBuffer` collects records until
they make a record batch. Every value is checked as it arrives, against the record before
it and against the types the task has already written, so an error names the record that
broke the rule, not a batch built later.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from .. import arrays
from .. import schema as schema_mod
from ..arrays import OffsetOverflow, from_numpy, strings
from ..errors import RecordError, SchemaMismatchError
from . import advice, foreign

# Value classes a record field can have.
SCALAR, ARRAY, STRING, BINARY = "scalar", "array", "string", "binary"


def classify(value: Any, column: str) -> tuple[str, Any, Any]:
    """Return ``(class, dtype, shape)`` of one record value, normalised.

    Returns the normalised value as the third element for arrays (``shape`` is ``value.shape``).

    Raises:
        RecordError: the value's type is not supported.
    """
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            value = value[()]
        else:
            check_dtype(value.dtype, column)
            if value.size > arrays.MAX_OFFSET:
                raise too_large(column, f"an array of {value.size:,} values (shape {value.shape})")
            return ARRAY, value.dtype, value.shape
    if isinstance(value, (np.str_, np.bytes_)):  # np.array("cat")[()]: text
        value = value.item()
    if isinstance(value, np.generic):
        check_dtype(value.dtype, column)
        return SCALAR, value.dtype, ()
    if isinstance(value, bool):
        return SCALAR, np.dtype(bool), ()
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise RecordError(
                f"column {column!r} has an int outside the int64 range; "
                "use a numpy uint64 scalar or a float"
            )
        return SCALAR, np.dtype(np.int64), ()
    if isinstance(value, float):
        return SCALAR, np.dtype(np.float64), ()
    if isinstance(value, str):
        if not value.isascii():
            _check_utf8(value, column)
        if len(value) > arrays.MAX_OFFSET >> 2 and len(value.encode("utf-8")) > arrays.MAX_OFFSET:
            raise too_large(column, f"a str of {len(value.encode('utf-8')):,} bytes in UTF-8")
        return STRING, None, ()
    if isinstance(value, (bytes, bytearray, memoryview)):
        if len(value) > arrays.MAX_OFFSET:
            raise too_large(column, f"{len(value):,} bytes")
        return BINARY, None, ()
    if foreign.is_missing(value):
        raise RecordError(
            f"column {column!r} is {value!r}; snap columns have no missing values "
            "(use a sentinel value or a separate mask column)"
        )
    hint = advice.store_instead(value, column)
    raise RecordError(
        f"column {column!r} has a value of type {type(value).__name__}; supported: numpy "
        f"arrays and scalars of bool/int/uint/float dtype, int, float, bool, str, bytes ({hint})"
    )


def too_large(column: str, what: str) -> RecordError:
    """One value past Arrow's 32-bit lengths (2 GiB of text or bytes, 2**31 - 1 values)."""
    return RecordError(
        f"column {column!r} has {what}: one value holds at most {arrays.MAX_OFFSET:,} values or "
        "bytes (Arrow's 32-bit lengths); split it across records (e.g. a record per chunk of "
        "frames or of text) or store it as a file and its path"
    )


def _check_utf8(value: str, column: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise RecordError(
            f"column {column!r} has a str that is not valid Unicode text ({err.reason}: "
            f"{value[err.start : err.end]!r} at position {err.start}, e.g. from decoding bytes "
            "with errors='surrogateescape'); store it as bytes, or decode it with errors='replace'"
        ) from None


def check_dtype(dtype: np.dtype, column: str) -> None:
    if not schema_mod.is_supported_dtype(dtype):
        raise RecordError(schema_mod.unsupported_dtype_message(column, dtype))


# Python types stored as they are: (class, dtype) of a value of each
_PLAIN: dict[type, tuple[str, Any]] = {
    float: (SCALAR, np.dtype(np.float64)),
    int: (SCALAR, np.dtype(np.int64)),
    bool: (SCALAR, np.dtype(bool)),
    str: (STRING, None),
    bytes: (BINARY, None),
}


def _normalise(value: Any, column: str) -> Any:
    if type(value) in _PLAIN:
        return value
    if isinstance(value, (np.str_, np.bytes_)):  # a numpy string array's items: text
        return value.item()
    if isinstance(value, (list, tuple)):
        try:
            return np.asarray(value)
        except (ValueError, TypeError, UnicodeError, OverflowError) as err:
            raise RecordError(
                f"column {column!r} has a {type(value).__name__} numpy cannot make one array "
                f"of ({type(err).__name__}: {err}); yield a numpy array of one dtype"
            ) from None
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if foreign.is_array_like(value):
        value = foreign.as_numpy(value, column)
    return foreign.native(value)


def _describe(cls: str, dtype: Any, shape: Any) -> str:
    if cls == ARRAY:
        return f"{dtype.name} array of shape {tuple(shape)}"
    if cls == SCALAR:
        return f"{dtype.name} scalar"
    return "str" if cls == STRING else "bytes"


def _arrow(cls: str, dtype: Any) -> pa.DataType:
    """An Arrow type of the value class and dtype (any shape: for messages)."""
    if cls in (STRING, BINARY):
        return pa.string() if cls == STRING else pa.binary()
    value_type = pa.from_numpy_dtype(dtype)
    return value_type if cls == SCALAR else pa.list_(value_type)


class ColumnBuilder:
    """Collects one column's values and checks that each matches the first one's class/dtype
    and, when the task has written the column before, the type it wrote (``target``).

    An array is copied as it arrives, never kept by reference: a pipeline may fill the same
    buffer for every record it yields (a preallocated array, a torch tensor it refills), and
    kept, every record would hold the last one's values. Arrays of one shape are copied into
    rows of ``block`` (the copy ``np.stack`` made when the batch was built), others one by one.
    """

    __slots__ = ("name", "cls", "dtype", "shape", "varying", "values", "target", "ragged",
                 "block", "rows", "capacity", "long")  # fmt: skip

    def __init__(
        self,
        name: str,
        target: pa.DataType | None = None,
        ragged: bool = False,
        capacity: tuple[int, int] = (1024, 1 << 20),
    ) -> None:
        self.name, self.target, self.ragged = name, target, ragged
        self.cls: str | None = None
        self.dtype: Any = None
        self.shape: Any = None
        self.varying = False
        self.values: list[Any] = []
        self.block: np.ndarray | None = None  # the arrays of one shape so far, by row
        self.rows = 0
        self.capacity = capacity  # (records, bytes) a buffer holds before it is taken
        self.long = arrays.MAX_OFFSET >> 2  # text longer may be past one value's bytes

    def append(self, value: Any) -> int:
        """Add one value; returns its approximate size in bytes."""
        kind = type(value)
        if (  # an array like the column's first: copied into its row, no more checks
            kind is np.ndarray
            and self.block is not None
            and value.shape == self.shape
            and value.dtype == self.dtype
        ):
            self._put(value)
            return int(value.nbytes)
        fast = _PLAIN.get(kind)
        if fast is not None and fast[0] == self.cls and fast[1] == self.dtype:
            # a Python scalar or text like the column's first value: the checks that matter
            # only (500 float columns a record: 5.8 us a value through the general path)
            if kind is int and not -(2**63) <= value < 2**63:
                classify(value, self.name)  # raises, naming the column
            if kind is str and not value.isascii():
                _check_utf8(value, self.name)
            if kind is str or kind is bytes:
                if len(value) > self.long:  # maybe past what one value holds: raises if so
                    classify(value, self.name)
                self.values.append(value)
                return len(value)
            self.values.append(value)
            return 8
        value = _normalise(value, self.name)
        cls, dtype, shape = classify(value, self.name)
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value[()]
        if self.cls is None:
            self.cls, self.dtype, self.shape = cls, dtype, shape
            if self.target is not None:
                self._check_target(self.target)
        elif cls != self.cls or dtype != self.dtype:
            raise SchemaMismatchError(
                f"column {self.name!r} changed type between records: "
                f"{_describe(self.cls, self.dtype, self.shape)} before, "
                f"{_describe(cls, dtype, shape)} now"
                + schema_mod.convert_hint(_arrow(self.cls, self.dtype), _arrow(cls, dtype))
            )
        elif cls == ARRAY and shape != self.shape:
            if len(shape) != len(self.shape):
                raise SchemaMismatchError(
                    f"column {self.name!r} changed number of dimensions between records: "
                    f"shape {tuple(self.shape)} before, {tuple(shape)} now "
                    "(ragged columns must keep the same ndim)"
                )
            if self.target is not None and schema_mod.kind(self.target) == "tensor":
                now = schema_mod.ragged_type(pa.from_numpy_dtype(dtype), len(shape))
                raise SchemaMismatchError(schema_mod.mismatch_message(self.name, self.target, now))
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
        return 8

    def _put(self, value: np.ndarray) -> None:
        """Copy an array of the column's shape into the next row of ``block``, made as large
        as the buffer can get (records, or bytes) so that it rarely grows."""
        block = self.block
        if block is None or self.rows == len(block):
            rows, nbytes = self.capacity
            size = min(rows, nbytes // max(1, value.nbytes) + 1)
            grown = np.empty((max(size, 2 * self.rows, 1), *self.shape), self.dtype)
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
        elif self._is_ragged(target):
            now = schema_mod.ragged_type(pa.from_numpy_dtype(self.dtype), len(self.shape))
        else:
            now = pa.fixed_shape_tensor(pa.from_numpy_dtype(self.dtype), self.shape)
        if now != target:
            raise SchemaMismatchError(schema_mod.mismatch_message(self.name, target, now))

    def _is_ragged(self, target: pa.DataType | None) -> bool:
        target_ragged = target is not None and schema_mod.kind(target) == "ragged"
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
                    f"column {self.name!r} has an int outside the int64 range; "
                    "use a numpy uint64 scalar or a float"
                ) from err
        if self.cls == STRING:
            return strings(values, pa.string())
        if self.cls == BINARY:
            return strings(values, pa.binary())
        self.ragged = self.ragged or ragged
        if self.varying:
            return schema_mod.ragged_array(values, self.dtype, len(self.shape))
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
        self.columns: dict[str, ColumnBuilder] | None = None
        self.rows = 0
        self.nbytes = 0

    def add(self, record: Mapping[str, Any], schema: pa.Schema | None = None) -> None:
        """Append one record, checked against the records before it and against ``schema``,
        the types the task has written so far.

        Raises:
            RecordError: naming the offending column or key (SchemaMismatchError for a type
                or a set of keys other than before).
        """
        if self.columns is None:
            if not record:
                raise RecordError("a record is an empty dict; it needs at least one column")
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

    def take(self) -> list[pa.RecordBatch]:
        """Build a record batch of everything buffered and reset: one, or several where its
        text, bytes or ragged values are more than one Arrow array holds (2 GiB)."""
        if self.columns is None:
            raise RuntimeError("take() on an empty RecordBuffer")
        builders, rows = self.columns, self.rows
        self.columns, self.rows, self.nbytes = None, 0, 0
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


def different_columns(before: Iterable[Any], now: Iterable[Any]) -> str:
    """``has different columns than ...``: which are missing and which are new, by name."""
    before, now = list(before), list(now)
    missing = [k for k in before if k not in now]
    extra = [k for k in now if k not in before]
    parts = [f"missing {', '.join(map(repr, missing))}"] if missing else []
    parts += [f"unexpected {', '.join(map(repr, extra))}"] if extra else []
    return (
        f"has different columns than the records before it ({'; '.join(parts)}); "
        "every record must have the same keys"
    )


def check_names(names: Sequence[str]) -> None:
    """The first record or batch's column names are usable: unique, non-empty, printable."""
    if len(set(names)) != len(names):
        raise RecordError(f"duplicate column names in {list(names)}")
    if "" in names:  # (no columns=, --columns or to_tf() could name it)
        raise RecordError(f"a column name is empty ('') in {list(names)}; name it")
    for name in names:  # a CSV header's "\r", an escape: none meant, all shown
        if any(c < " " or "\x7f" <= c <= "\x9f" for c in name):
            raise RecordError(
                f"column name {name!r} holds a control character; strip it "
                "(df.columns.str.strip() for a CSV's line ends)"
            )
