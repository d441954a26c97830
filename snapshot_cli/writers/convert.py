"""Yielded batches → Arrow record batches, and the check of each against the task's schema
(pure: no I/O, no threads). Records, one at a time, are :mod:`.records`'s.

A *record* is a plain ``dict[str, value]``. A *batch* is a :class:`Batch` (a dict of
equal-length columns), a ``pyarrow.RecordBatch`` or a ``pyarrow.Table``. Plain dicts are
always records: a dict of arrays is ambiguous (one record with arrays, or many records?), so
batches are marked explicitly.

Column types follow :mod:`snapshot_cli.schema`. The first batch a task writes fixes each
column's type; every later record or batch must agree, or a :class:`SchemaMismatchError`
names the column, both types and the input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from .. import arrays, mismatch, stored_types
from .. import schema as schema_mod
from ..arrays import OffsetOverflow, from_numpy, strings
from ..errors import OptionError, RecordError, SchemaMismatchError
from ..progress import counted
from . import foreign, quick, times
from .record_names import check_names, different_columns
from .records import ColumnBuilder
from .values import check_dtype, too_large


class Batch(dict[str, Any]):
    """Marks a dict of equal-length columns as a batch of records (vectorised preprocessing).

    ``yield snap.Batch(image=images, label=labels)`` where ``images`` is ``(n, 3, 64, 64)``
    and ``labels`` is ``(n,)``; a column may also be a list of per-record values.
    """


def batch_from_columns(
    cols: Mapping[str, Any], schema: pa.Schema | None, ragged: frozenset[str]
) -> list[pa.RecordBatch]:
    """A :class:`Batch` (dict of equal-length columns) → record batches (one, unless Arrow
    columns with 64-bit offsets hold more than one record batch's 32-bit ones can)."""
    if not cols:
        raise RecordError("a Batch needs at least one column")
    odd = [name for name in cols if not isinstance(name, str)]
    if odd:
        raise RecordError(f"Batch column names must be str, got {odd[0]!r}")
    check_names(list(cols))  # (unique, printable, Unicode: as a record's)
    arrow = [(n, c.type) for n, c in cols.items() if isinstance(c, (pa.Array, pa.ChunkedArray))]
    if arrow and (problem := arrays.too_deep(pa.schema(arrow))):  # (before what recurses)
        raise RecordError(problem)
    built, lengths = [], {}
    for name, col in cols.items():
        target = schema.field(name).type if schema is not None and name in schema.names else None
        arr = _column(name, col, target, name in ragged)
        lengths[name] = len(arr)
        built.append(arr)
    if len(set(lengths.values())) > 1:
        raise RecordError(f"Batch columns have different lengths: {lengths}")
    batch = pa.RecordBatch.from_arrays(built, names=list(cols))
    return stored_types.stored_batches(batch, "Batch")


def _column(name: str, col: Any, target: pa.DataType | None, ragged: bool) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        col = _combined(col)
    if isinstance(col, pa.Array):
        _check_valid(col, name, "Batch")
        return col
    if isinstance(col, np.ma.MaskedArray):
        col = foreign.unmasked(col, name)
    if foreign.is_array_like(col):
        col = foreign.as_numpy(col, name)
    col = foreign.native(col)
    if isinstance(col, np.ndarray) and times.is_time_dtype(col.dtype):
        times.check_time_array(col, name)
        return arrays.from_numpy(col)
    if isinstance(col, np.ndarray) and col.dtype.kind == "T" and col.ndim == 1:
        col = col.astype(object)  # numpy's StringDType: str objects (its na_object: refused)
    if isinstance(col, np.ndarray) and col.dtype.kind in "US" and col.ndim == 1:
        return strings(col.tolist(), pa.string() if col.dtype.kind == "U" else pa.binary())
    if isinstance(col, np.ndarray) and col.dtype.kind in "UST" and col.ndim == 2:
        col = list(col)  # (a row a record's list of texts, as a 2-D column of numbers' rows)
    if isinstance(col, np.ndarray) and col.dtype != object:
        if col.ndim == 0:
            raise RecordError(f"Batch column {name!r} is a 0-d array; columns need a length")
        check_dtype(col.dtype, name)
        if col.ndim == 1:
            return from_numpy(col)
        if col[0].size > arrays.MAX_OFFSET:
            raise too_large(name, f"arrays of {col[0].size:,} values (shape {col.shape[1:]})")
        target_ragged = target is not None and schema_mod.kind(target) == "ragged"
        if ragged or target_ragged or 0 in col.shape[1:]:
            if max(col.shape[1:], default=0) > schema_mod.MAX_DIMENSION:
                raise RecordError(schema_mod.dimension_message(col.shape[1:], name))
            return schema_mod.ragged_array(list(col), col.dtype, col.ndim - 1)
        return schema_mod.tensor_array(col)
    if isinstance(col, (list, tuple, np.ndarray)):
        ragged_arrays = quick.ragged_column(col, target)  # (arrays of one dtype and ndim)
        if ragged_arrays is not None:
            return ragged_arrays
        # its rows, in one block of up to 64 MiB (then doubled): the values may prove ragged
        builder = ColumnBuilder(name, target, ragged, capacity=(len(col), 64 << 20))
        for row, value in enumerate(col):
            try:
                builder.append(value)
            except RecordError as err:  # (which row: "column 'x' is None" named none)
                raise type(err)(f"row {row}: {err}") from None
        builder.settle()  # (nothing but empty lists: stored as records' are)
        if builder.cls is None:
            raise RecordError(f"Batch column {name!r} is empty; give it a typed numpy array")
        return builder.build(target, ragged)
    raise RecordError(
        f"Batch column {name!r} is a {type(col).__name__}; use a numpy array or a list of values"
    )


def _combined(chunked: pa.ChunkedArray) -> pa.Array:
    """One array of ``chunked``'s values, or OffsetOverflow where it may not fit one."""
    if chunked.num_chunks > 1 and arrays.nbytes(chunked) > arrays.MAX_OFFSET:
        raise OffsetOverflow(f"{arrays.nbytes(chunked):,} bytes in one column")
    return chunked.combine_chunks()


def _in_halves(
    cols: Mapping[str, Any], schema: pa.Schema | None, ragged: frozenset[str]
) -> list[pa.RecordBatch]:
    """A :class:`Batch` → record batches: one, or its rows halved until each fits its
    arrays (text, bytes or ragged values past 2 GiB in one column)."""
    try:
        return batch_from_columns(cols, schema, ragged)
    except OffsetOverflow:
        rows = len(next(iter(cols.values())))
        if rows < 2:
            raise
    half = rows // 2
    return _in_halves({k: v[:half] for k, v in cols.items()}, schema, ragged) + _in_halves(
        {k: v[half:] for k, v in cols.items()}, schema, ragged
    )


def to_batches(item: Any, schema: pa.Schema | None, ragged: frozenset[str]) -> list[pa.RecordBatch]:
    """A yielded batch (Batch, RecordBatch, Table, DataFrame or another library's Arrow
    data) → record batches (records go elsewhere)."""
    yielded = type(item).__name__
    if foreign.is_dataframe(item):
        columns = foreign.dataframe_columns(item)  # (its names checked even with no rows)
        if len(item) == 0:  # a frame filtered to nothing: no records (its text has no type)
            return []
        item = Batch(columns)
    if isinstance(item, Batch) and item and all(_no_rows(c) for c in item.values()):
        return []  # (a batch filtered to nothing: no records, whatever its columns' types)
    if isinstance(item, Batch):  # (its Arrow columns, if any, are checked one by one)
        return _refuse_unreadable(_in_halves(item, schema, ragged), yielded)
    if foreign.exports_arrow(item):
        item = foreign.arrow_data(item)
    if isinstance(item, pa.RecordBatch):
        batches = [item]
    elif isinstance(item, pa.Table):
        # its chunks merged where they surely fit one array (32-bit offsets), else as they are
        fits = arrays.nbytes(item) <= arrays.MAX_OFFSET
        batches = (item.combine_chunks() if fits else item).to_batches()
    else:
        raise RecordError(f"not a batch: {yielded}")
    for batch in batches:
        if problem := arrays.too_deep(batch.schema):  # (first: every step after recurses)
            raise RecordError(problem)
        for name, column in zip(batch.schema.names, batch.columns, strict=True):
            _check_valid(column, name, yielded)
    batches = [s for b in batches for s in stored_types.stored_batches(b, yielded)]
    return _refuse_unreadable(batches, yielded)


def _no_rows(column: Any) -> bool:
    try:
        return len(column) == 0
    except TypeError:  # (a scalar, refused as a column later)
        return False


def _check_valid(column: pa.Array, name: str, yielded: str) -> None:
    try:
        column.validate(full=True)
    except pa.ArrowException as err:
        raise RecordError(
            f"column {name!r} of a yielded {yielded} is not valid Arrow data ({err}); build it "
            "with pyarrow's constructors (pa.array, ...)"
        ) from None


def _refuse_unreadable(batches: list[pa.RecordBatch], yielded: str) -> list[pa.RecordBatch]:
    """``batches``, unless a column holds what a reader would take the shard for damaged
    for (:func:`..schema.encoding_problem`): a null, or a ragged column's shape that does
    not hold its values (an Arrow struct of snap's own ``data``/``shape`` encoding); or
    what no reader could hand back (:func:`..stored_types.unreadable`: a union, ...)."""
    for batch in batches:
        for name, column in zip(batch.schema.names, batch.columns, strict=True):
            nulls = schema_mod.null_count(column)
            if nulls:
                raise RecordError(
                    f"column {name!r} of a yielded {yielded} holds "
                    f"{counted(nulls, 'missing value')} (nulls); snap stores no missing values: "
                    "fill them (e.g. pyarrow.compute.fill_null) or leave those rows out"
                )
            unreadable = stored_types.unreadable(column)
            if unreadable is not None:
                raise RecordError(
                    f"column {name!r} of a yielded {yielded} ({column.type}) holds {unreadable}"
                )
        problem = schema_mod.encoding_problem(batch)
        if problem is not None:
            raise RecordError(f"a yielded {yielded} does not hold what it says: {problem}")
    return batches


def conform(batch: pa.RecordBatch, schema: pa.Schema | None) -> pa.RecordBatch:
    """Check ``batch`` against the task's schema and return it with the schema's column order.

    Raises:
        SchemaMismatchError: a column is missing, unexpected, or has another type.
    """
    if schema is None:
        check_names(batch.schema.names)
        return batch
    if set(batch.schema.names) != set(schema.names):
        raise SchemaMismatchError(f"a batch {different_columns(schema.names, batch.schema.names)}")
    for field in schema:
        got = batch.schema.field(field.name).type
        if got != field.type:
            raise SchemaMismatchError(mismatch.mismatch_message(field.name, field.type, got))
    if batch.schema.names != schema.names:
        batch = batch.select(schema.names)
    return pa.RecordBatch.from_arrays(batch.columns, schema=schema)


F = TypeVar("F", bound=Callable[..., Any])


def ragged(*columns: str | list[str] | tuple[str, ...]) -> Callable[[F], F]:
    """Decorator: store these array columns as ragged even if a batch happens to be uniform.

    Use it for columns whose shape varies between records (token ids, boxes, images of
    varying size) so that every task writes the same column type. The names are given as
    arguments (``@snap.ragged("tokens", "boxes")``) or as a list of them.

    Raises:
        OptionError: a name that is not a non-empty string (``ragged(0)``, ``ragged("")``
            and ``ragged(None)`` marked no column, silently), or ``@snap.ragged`` without
            the names.
    """
    names: list[Any] = []
    for c in columns:
        names.extend(c if isinstance(c, (list, tuple)) else [c])
    for c in names:
        if not isinstance(c, str) or not c:
            hint = " (give the names: @snap.ragged('tokens'))" if callable(c) else ""
            raise OptionError(f"ragged takes column names, non-empty strings, got {c!r:.80}{hint}")

    def mark(fn: F) -> F:
        marked = frozenset(map(str, names)) | getattr(fn, "__snap_ragged__", frozenset())
        fn.__snap_ragged__ = marked  # type: ignore[attr-defined]
        return fn

    return mark


def is_batch(item: Any) -> bool:
    return (
        isinstance(item, (Batch, pa.RecordBatch, pa.Table))
        or foreign.is_dataframe(item)
        or foreign.exports_arrow(item)
    )
