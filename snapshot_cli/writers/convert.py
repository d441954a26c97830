"""Records and batches → Arrow record batches (pure: no I/O, no threads).

A *record* is a plain ``dict[str, value]``. A *batch* is a :class:`Batch` (a dict of
equal-length columns), a ``pyarrow.RecordBatch`` or a ``pyarrow.Table``. Plain dicts are
always records: a dict of arrays is ambiguous (one record with arrays, or many records?), so
batches are marked explicitly.

Column types follow :mod:`snapshot_cli.schema`. The first batch a task writes fixes each
column's type; every later record or batch must agree, or a :class:`SchemaMismatchError`
names the column, both types and the input.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from .. import schema as schema_mod
from ..arrays import from_numpy, strings
from ..errors import RecordError, SchemaMismatchError
from . import foreign

# Value classes a record field can have.
SCALAR, ARRAY, STRING, BINARY = "scalar", "array", "string", "binary"


class Batch(dict):
    """Marks a dict of equal-length columns as a batch of records (vectorised preprocessing).

    ``yield snap.Batch(image=images, label=labels)`` where ``images`` is ``(n, 3, 64, 64)``
    and ``labels`` is ``(n,)``; a column may also be a list of per-record values.
    """


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
            _check_dtype(value.dtype, column)
            return ARRAY, value.dtype, value.shape
    if isinstance(value, np.generic):
        _check_dtype(value.dtype, column)
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
        return STRING, None, ()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return BINARY, None, ()
    if foreign.is_missing(value):
        raise RecordError(
            f"column {column!r} is {value!r}; snap columns have no missing values "
            "(use a sentinel value or a separate mask column)"
        )
    hint = (
        f"flatten it into columns of their own ({column}_{next(iter(value), 'key')}, ...)"
        if isinstance(value, dict)
        else "convert lists with np.asarray"
    )
    raise RecordError(
        f"column {column!r} has a value of type {type(value).__name__}; supported: numpy "
        f"arrays and scalars of bool/int/uint/float dtype, int, float, bool, str, bytes ({hint})"
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


def _check_dtype(dtype: np.dtype, column: str) -> None:
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


class ColumnBuilder:
    """Collects one column's values and checks that each matches the first one's class/dtype."""

    __slots__ = ("name", "cls", "dtype", "shape", "varying", "values")

    def __init__(self, name: str) -> None:
        self.name = name
        self.cls: str | None = None
        self.dtype: Any = None
        self.shape: Any = None
        self.varying = False
        self.values: list[Any] = []

    def append(self, value: Any) -> int:
        """Add one value; returns its approximate size in bytes."""
        kind = type(value)
        fast = _PLAIN.get(kind)
        if fast is not None and fast[0] == self.cls and fast[1] == self.dtype:
            # a Python scalar or text like the column's first value: the checks that matter
            # only (500 float columns a record: 5.8 us a value through the general path)
            if kind is int and not -(2**63) <= value < 2**63:
                classify(value, self.name)  # raises, naming the column
            if kind is str and not value.isascii():
                _check_utf8(value, self.name)
            self.values.append(value)
            return len(value) if kind is str or kind is bytes else 8
        value = _normalise(value, self.name)
        cls, dtype, shape = classify(value, self.name)
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value[()]
        if self.cls is None:
            self.cls, self.dtype, self.shape = cls, dtype, shape
        elif cls != self.cls or dtype != self.dtype:
            raise SchemaMismatchError(
                f"column {self.name!r} changed type between records: "
                f"{_describe(self.cls, self.dtype, self.shape)} before, "
                f"{_describe(cls, dtype, shape)} now"
            )
        elif cls == ARRAY and shape != self.shape:
            if len(shape) != len(self.shape):
                raise SchemaMismatchError(
                    f"column {self.name!r} changed number of dimensions between records: "
                    f"shape {tuple(self.shape)} before, {tuple(shape)} now "
                    "(ragged columns must keep the same ndim)"
                )
            self.varying = True
        self.values.append(value)
        if cls == ARRAY:
            return int(value.nbytes)
        if cls in (STRING, BINARY):
            return len(value)
        return 8

    def build(self, target: pa.DataType | None, ragged: bool) -> pa.Array:
        """Turn the collected values into an Arrow array of the column's type."""
        values, n = self.values, len(self.values)
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
        target_ragged = target is not None and schema_mod.kind(target) == "ragged"
        empty = any(d == 0 for d in self.shape)
        if self.varying or ragged or target_ragged or empty:
            return schema_mod.ragged_array(values, self.dtype, len(self.shape))
        stacked = np.stack(values) if n else np.empty((0, *self.shape), self.dtype)
        return schema_mod.tensor_array(stacked)


class RecordBuffer:
    """Accumulates records column by column until they make a record batch."""

    def __init__(self) -> None:
        self.columns: dict[str, ColumnBuilder] | None = None
        self.rows = 0
        self.nbytes = 0

    def add(self, record: Mapping[str, Any]) -> None:
        """Append one record. Raises RecordError naming the offending column or key."""
        if self.columns is None:
            if not record:
                raise RecordError("a record is an empty dict; it needs at least one column")
            for key in record:
                if not isinstance(key, str):
                    raise RecordError(f"record keys must be str, got {key!r}")
            self.columns = {k: ColumnBuilder(k) for k in record}
        elif record.keys() != self.columns.keys():
            missing = sorted(set(self.columns) - set(record))
            extra = sorted(set(record) - set(self.columns), key=str)
            raise SchemaMismatchError(
                f"record {self.rows} of this batch has different columns: missing {missing}, "
                f"unexpected {extra}; every record must have the same keys"
            )
        size = 0
        for key, builder in self.columns.items():
            size += builder.append(record[key])
        self.rows += 1
        self.nbytes += size

    def take(self, schema: pa.Schema | None, ragged: frozenset[str]) -> pa.RecordBatch:
        """Build a record batch of everything buffered and reset."""
        if self.columns is None:
            raise RuntimeError("take() on an empty RecordBuffer")
        arrays, names = [], []
        for name, builder in self.columns.items():
            target = (
                schema.field(name).type if schema is not None and name in schema.names else None
            )
            arrays.append(builder.build(target, name in ragged))
            names.append(name)
        self.columns, self.rows, self.nbytes = None, 0, 0
        return pa.RecordBatch.from_arrays(arrays, names=names)


def batch_from_columns(
    cols: Mapping[str, Any], schema: pa.Schema | None, ragged: frozenset[str]
) -> pa.RecordBatch:
    """A :class:`Batch` (dict of equal-length columns) → record batch."""
    if not cols:
        raise RecordError("a Batch needs at least one column")
    arrays, lengths = [], {}
    for name, col in cols.items():
        if not isinstance(name, str):
            raise RecordError(f"Batch column names must be str, got {name!r}")
        target = schema.field(name).type if schema is not None and name in schema.names else None
        arr = _column(name, col, target, name in ragged)
        lengths[name] = len(arr)
        arrays.append(arr)
    if len(set(lengths.values())) > 1:
        raise RecordError(f"Batch columns have different lengths: {lengths}")
    return schema_mod.dense_batch(pa.RecordBatch.from_arrays(arrays, names=list(cols)))


def _column(name: str, col: Any, target: pa.DataType | None, ragged: bool) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks()
    if isinstance(col, pa.Array):
        return col
    if foreign.is_array_like(col):
        col = foreign.as_numpy(col, name)
    col = foreign.native(col)
    if isinstance(col, np.ndarray) and col.dtype != object:
        if col.ndim == 0:
            raise RecordError(f"Batch column {name!r} is a 0-d array; columns need a length")
        _check_dtype(col.dtype, name)
        if col.ndim == 1:
            return from_numpy(col)
        target_ragged = target is not None and schema_mod.kind(target) == "ragged"
        if ragged or target_ragged or 0 in col.shape[1:]:
            return schema_mod.ragged_array(list(col), col.dtype, col.ndim - 1)
        return schema_mod.tensor_array(col)
    if isinstance(col, (list, tuple, np.ndarray)):
        builder = ColumnBuilder(name)
        for value in col:
            builder.append(value)
        if builder.cls is None:
            raise RecordError(f"Batch column {name!r} is empty; give it a typed numpy array")
        return builder.build(target, ragged)
    raise RecordError(
        f"Batch column {name!r} is a {type(col).__name__}; use a numpy array or a list of values"
    )


def to_batches(item: Any, schema: pa.Schema | None, ragged: frozenset[str]) -> list[pa.RecordBatch]:
    """A yielded batch (Batch, RecordBatch or Table) → record batches (records go elsewhere)."""
    if foreign.is_dataframe(item):
        item = Batch(foreign.dataframe_columns(item))
    if isinstance(item, Batch):
        return [batch_from_columns(item, schema, ragged)]
    if isinstance(item, pa.RecordBatch):
        batches = [item]
    elif isinstance(item, pa.Table):
        batches = item.combine_chunks().to_batches()
    else:
        raise RecordError(f"not a batch: {type(item).__name__}")
    batches = [schema_mod.dense_batch(b) for b in batches]
    for batch in batches:
        for name, column in zip(batch.schema.names, batch.columns, strict=True):
            try:
                column.validate(full=True)
            except pa.ArrowException as err:
                raise RecordError(
                    f"column {name!r} of a yielded {type(item).__name__} is not valid Arrow "
                    f"data ({err}); build it with pyarrow's constructors (pa.array, ...)"
                ) from None
            nulls = schema_mod.null_count(column)
            if nulls:
                raise RecordError(
                    f"column {name!r} of a yielded {type(item).__name__} holds {nulls} missing "
                    "values (nulls); snap stores no missing values: fill them (e.g. "
                    "pyarrow.compute.fill_null) or leave those rows out"
                )
    return batches


def conform(batch: pa.RecordBatch, schema: pa.Schema | None) -> pa.RecordBatch:
    """Check ``batch`` against the task's schema and return it with the schema's column order.

    Raises:
        SchemaMismatchError: a column is missing, unexpected, or has another type.
    """
    if schema is None:
        if len(set(batch.schema.names)) != len(batch.schema.names):
            raise RecordError(f"duplicate column names in {batch.schema.names}")
        if "" in batch.schema.names:  # (no columns=, --columns or to_tf() could name it)
            raise RecordError(f"a column name is empty ('') in {batch.schema.names}; name it")
        for name in batch.schema.names:  # a CSV header's "\r", an escape: none meant, all shown
            if any(c < " " or "\x7f" <= c <= "\x9f" for c in name):
                raise RecordError(
                    f"column name {name!r} holds a control character; strip it "
                    "(df.columns.str.strip() for a CSV's line ends)"
                )
        return batch
    if set(batch.schema.names) != set(schema.names):
        missing = sorted(set(schema.names) - set(batch.schema.names))
        extra = sorted(set(batch.schema.names) - set(schema.names))
        raise SchemaMismatchError(
            f"a batch has different columns than earlier data: missing {missing}, "
            f"unexpected {extra}"
        )
    for field in schema:
        got = batch.schema.field(field.name).type
        if got != field.type:
            raise SchemaMismatchError(schema_mod.mismatch_message(field.name, field.type, got))
    if batch.schema.names != schema.names:
        batch = batch.select(schema.names)
    return pa.RecordBatch.from_arrays(batch.columns, schema=schema)


def ragged(*columns: str) -> Any:
    """Decorator: store these array columns as ragged even if a batch happens to be uniform.

    Use it for columns whose shape varies between records (token ids, boxes, images of
    varying size) so that every task writes the same column type.
    """

    def mark(fn: Any) -> Any:
        fn.__snap_ragged__ = frozenset(columns) | getattr(fn, "__snap_ragged__", frozenset())
        return fn

    return mark


def is_batch(item: Any) -> bool:
    return isinstance(item, (Batch, pa.RecordBatch, pa.Table)) or foreign.is_dataframe(item)
