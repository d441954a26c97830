"""The Arrow types a yielded batch brings → the types snap stores (pure: no I/O).

A ``pyarrow.Table``, a polars DataFrame or anything else that exports Arrow data may use
encodings of the same values that snap's readers and ``inspect`` do not know as such: a
dictionary (a pandas categorical), 64-bit offsets (``large_string``, polars' ``large_list``),
views (``string_view``, ``list_view``: polars' strings), run-end encoding, and a fixed-size
list of numbers (an embedding, a polars ``Array``, Hugging Face's fixed-length sequences).
Each is stored as the one type snap gives the same values when a record yields them:
``string``, ``binary``, ``list<T>`` (a ragged column), the value type, and
``arrow.fixed_shape_tensor`` (read back as one ``(n, *shape)`` array, not one array per
record). So a column keeps one type whichever way a task yields it, and replays on the fast
paths. What no reader could hand back (a union, an interval, ...: :func:`unreadable`) is
refused, with what to yield instead.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from . import arrays
from . import schema as schema_mod
from .arrays import OffsetOverflow
from .errors import RecordError


def tensor_shape(t: pa.DataType) -> tuple[pa.DataType, list[int]] | None:
    """``(value_type, shape)`` of a fixed-size list of numbers, nested to any depth
    (``fixed_size_list<fixed_size_list<float>[3]>[2]`` is ``(float, [2, 3])``), else None."""
    shape = []
    while pa.types.is_fixed_size_list(t):
        shape.append(t.list_size)
        t = t.value_type
    if not shape or not schema_mod.is_numeric(t) or 0 in shape:
        return None
    return t, shape


def is_transposed(t: pa.DataType) -> bool:
    """A tensor type whose values are laid out in another order than its logical shape (a
    ``permutation``), which earlier versions of snap stored as it came (now laid out in its
    logical order: :func:`stored_batches`)."""
    perm = list(t.permutation or []) if isinstance(t, pa.FixedShapeTensorType) else []
    return perm != sorted(perm)


def stored_type(t: pa.DataType, top: bool = True) -> pa.DataType:
    """The type snap stores for a yielded column of type ``t`` (see the module docstring);
    ``top``: the column itself, not a value nested in it (a fixed-size list inside a struct
    stays one)."""
    if pa.types.is_dictionary(t):
        return stored_type(t.value_type, top)
    if isinstance(t, pa.FixedShapeTensorType):  # its logical shape, without names
        permutation = t.permutation or range(len(t.shape))
        return pa.fixed_shape_tensor(t.value_type, [t.shape[p] for p in permutation])
    if pa.types.is_run_end_encoded(t):  # (nested too: no reader converts or takes it)
        return stored_type(t.value_type, top)
    if pa.types.is_string_view(t) or pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_binary_view(t) or pa.types.is_large_binary(t):
        return pa.binary()
    if _is_list(t):
        return pa.list_(t.value_field.with_type(stored_type(t.value_type, False)))
    if pa.types.is_fixed_size_list(t):
        tensor = tensor_shape(t) if top else None
        if tensor is not None:
            return pa.fixed_shape_tensor(*tensor)
        return pa.list_(t.value_field.with_type(stored_type(t.value_type, False)), t.list_size)
    if pa.types.is_map(t):
        return pa.map_(
            t.key_field.with_type(stored_type(t.key_type, False)),
            t.item_field.with_type(stored_type(t.item_type, False)),
            t.keys_sorted,
        )
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(stored_type(f.type, False)) for f in t])
    return t


def _is_list(t: pa.DataType) -> bool:
    return (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
    )


def _convert(column: pa.Array, t: pa.DataType) -> pa.Array:
    """``column`` as type ``t`` (:func:`stored_type` of its type). Lists and structs are
    rebuilt from their values rather than cast: pyarrow's cast of a ``list_view`` makes an
    invalid array (offsets one short)."""
    import pyarrow.compute as pc  # (here, not above: ~40 ms of every worker's start)

    if pa.types.is_run_end_encoded(column.type):
        return _convert(pc.run_end_decode(column), t)
    if pa.types.is_dictionary(column.type):
        # its values first: there is no take of views (polars' categoricals are string_view)
        values = column.dictionary
        values = _convert(values, stored_type(values.type, False))
        decoded = pa.DictionaryArray.from_arrays(column.indices, values).dictionary_decode()
        return _convert(decoded, t)
    if isinstance(column.type, pa.FixedShapeTensorType):
        if schema_mod.null_count(column.storage):
            return column  # refused as such
        if is_transposed(column.type):
            logical = np.ascontiguousarray(column.to_numpy_ndarray())
            flat = arrays.from_numpy(logical.reshape(-1))
            storage = pa.FixedSizeListArray.from_arrays(flat, t.storage_type.list_size)
        else:
            storage = column.storage
        return pa.ExtensionArray.from_storage(t, storage)
    mask = column.is_null() if column.null_count else None
    large = pa.types.is_large_string(column.type) or pa.types.is_large_binary(column.type)
    if large and mask is None:  # (pyarrow's cast refuses a slice of a buffer past 2 GiB)
        return _narrowed(column, t)
    if isinstance(t, pa.FixedShapeTensorType):
        values = column
        while pa.types.is_fixed_size_list(values.type):
            if values.null_count:  # refused as such: flattened, a null list's values vanish
                return column
            values = values.flatten()  # (the slice's values only)
        storage = pa.FixedSizeListArray.from_arrays(
            _convert(values, t.value_type), t.storage_type.list_size
        )
        return pa.ExtensionArray.from_storage(t, storage)
    if _is_list(column.type) and pa.types.is_list(t):
        lengths_array = pc.list_value_length(column)
        if lengths_array.null_count:  # (fill_null makes a pa.scalar, which imports pandas)
            lengths_array = lengths_array.fill_null(0)
        lengths = arrays.to_numpy(lengths_array)
        offsets = np.zeros(len(column) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if offsets[-1] > arrays.MAX_OFFSET:
            raise OffsetOverflow(f"{int(offsets[-1]):,} values in one column's lists")
        values = _convert(pc.list_flatten(column), t.value_type)  # (the slice's, in order)
        return pa.ListArray.from_arrays(
            arrays.from_numpy(offsets.astype(np.int32)), values, type=t, mask=mask
        )
    if pa.types.is_fixed_size_list(column.type) and pa.types.is_fixed_size_list(t):
        if column.null_count:  # refused as such: flattened, a null list's values vanish
            return column
        values = _convert(column.flatten(), t.value_type)  # (the slice's)
        return pa.FixedSizeListArray.from_arrays(values, type=t)
    if pa.types.is_map(column.type):
        if column.null_count:  # refused as such
            return column
        offsets = arrays.to_numpy(column.offsets)  # (the slice's, into all of its entries)
        start, end = (int(offsets[0]), int(offsets[-1])) if len(column) else (0, 0)
        keys, items = column.keys.slice(start, end - start), column.items.slice(start, end - start)
        return pa.MapArray.from_arrays(
            arrays.from_numpy((offsets - start).astype(np.int32)),
            _convert(keys, t.key_type),
            _convert(items, t.item_type),
            type=t,
        )
    if pa.types.is_struct(column.type):
        fields = [
            _convert(child, field.type) for child, field in zip(column.flatten(), t, strict=True)
        ]
        return pa.StructArray.from_arrays(fields, fields=list(t), mask=mask)
    return column.cast(t)


def _narrowed(column: pa.Array, t: pa.DataType) -> pa.Array:
    """A ``large_string`` or ``large_binary`` array without nulls → ``t`` (``string`` or
    ``binary``) over the same bytes, its offsets made 32-bit."""
    offsets = np.frombuffer(column.buffers()[1], np.int64, len(column) + 1, column.offset * 8)
    start, end = int(offsets[0]), int(offsets[-1])
    if end - start > arrays.MAX_OFFSET:
        raise OffsetOverflow(f"{end - start:,} bytes of {t} in one array")
    data = column.buffers()[2] or pa.py_buffer(b"")
    narrow = pa.py_buffer((offsets - start).astype(np.int32))
    return pa.Array.from_buffers(t, len(column), [None, narrow, data.slice(start, end - start)])


def stored_batches(batch: pa.RecordBatch, yielded: str) -> list[pa.RecordBatch]:
    """``batch`` with every column in its stored type: itself if nothing changes, else one
    record batch or (when 64-bit offsets held more than 32-bit ones can) several.

    Raises:
        RecordError: a column cannot be converted (one value past 2 GiB, a dictionary whose
            values do not cast), naming it and ``yielded`` (what the pipeline yielded).
    """
    types = [stored_type(f.type) for f in batch.schema]
    if all(t == f.type for t, f in zip(types, batch.schema, strict=True)):
        return [batch]
    size = arrays.nbytes(batch)
    if size <= arrays.MAX_OFFSET or batch.num_rows < 2:
        return _converted(batch, types, yielded)
    pieces = min(batch.num_rows, 2 * -(-size // arrays.MAX_OFFSET))  # of ~half the limit
    step = -(-batch.num_rows // pieces)
    return [
        part
        for start in range(0, batch.num_rows, step)
        for part in _converted(batch.slice(start, step), types, yielded)
    ]


def _is_overflow(err: Exception) -> bool:
    return isinstance(err, (OffsetOverflow, pa.ArrowCapacityError)) or (
        isinstance(err, pa.ArrowInvalid) and "too large" in str(err)
    )


def _converted(
    batch: pa.RecordBatch, types: list[pa.DataType], yielded: str
) -> list[pa.RecordBatch]:
    """``batch`` converted column by column; halved where its values prove too many for
    32-bit offsets (rows of uneven sizes)."""
    columns = []
    for field, column, t in zip(batch.schema, batch.columns, types, strict=True):
        try:
            columns.append(column if t == field.type else _convert(column, t))
        except (pa.ArrowException, OffsetOverflow) as err:
            if _is_overflow(err) and batch.num_rows > 1:
                half = batch.num_rows // 2
                return _converted(batch.slice(0, half), types, yielded) + _converted(
                    batch.slice(half), types, yielded
                )
            raise RecordError(
                f"column {field.name!r} of a yielded {yielded} ({field.type}) cannot be "
                f"stored as {t}: {err}; yield it as {t} (array.cast(...), "
                "array.dictionary_decode()), with no value past 2 GiB"
            ) from None
    return [pa.RecordBatch.from_arrays(columns, names=batch.schema.names)]


# --- what no reader could hand back ---------------------------------------------------------
#
# Readers give an Arrow column snap does not decode itself (a struct, a map, a list of dates,
# decimals, ...) back as pyarrow converts it: a struct by ``to_pylist`` (Python values), a list
# or map by ``to_numpy`` (pyarrow's pandas conversion). Some types break one or the other:
# a union or an interval anywhere (ArrowNotImplementedError; pandas' DateOffset), a list
# directly of a few types (ArrowNotImplementedError), nanosecond times under a struct or map
# (pandas' Timestamp, or plain integers), and times of day with nanoseconds (ArrowInvalid, or
# cut to microseconds). Such a column is refused when it is yielded, with what to yield instead.


def _list_value_fix(t: pa.DataType) -> str | None:
    """What to cast a list's values of type ``t`` to where pyarrow's ``to_numpy`` cannot
    convert a list of them; None where it can."""
    if isinstance(t, pa.BaseExtensionType):
        fix = _list_value_fix(t.storage_type)
        return None if fix is None else f"{fix} (of its storage: array.storage.cast(...))"
    if pa.types.is_decimal32(t) or pa.types.is_decimal64(t):
        return f"pa.decimal128({t.precision}, {t.scale})"
    if pa.types.is_fixed_size_binary(t):
        return "pa.binary()"
    return None


def type_problem(
    t: pa.DataType, at: str = "", in_struct: bool = False, python: bool = False
) -> str | None:
    """Why readers could not hand back values of stored type ``t`` (a column's, or a part
    of it at ``at``: ``.field``, ``[]`` for a list's values), and what to yield instead;
    None if they can. ``in_struct``: under a struct or a map; ``python``: under a column
    that is a struct, converted by ``to_pylist`` (else by ``to_numpy``)."""
    where = f" at {at} ({t})" if at else ""
    if pa.types.is_union(t):
        return (
            f"a union{where}: numpy has no array of values of several types; yield one "
            "column per type, or cast the values to one type"
        )
    if pa.types.is_interval(t):
        return (
            f"an interval{where}, which numpy has no type for (pyarrow makes it pandas' "
            "DateOffset); yield a duration (pa.duration('ns'): a length of time), or its "
            "months, days and nanoseconds as three integer columns"
        )
    times = pa.types.is_timestamp(t) or pa.types.is_duration(t)
    if times and in_struct and t.unit == "ns":
        zone = f", {t.tz!r}" if getattr(t, "tz", None) else ""
        cast = f"pa.{'timestamp' if pa.types.is_timestamp(t) else 'duration'}('us'{zone})"
        return (
            f"nanosecond times{where} in a struct or map, whose values readers give back as "
            "Python's, and Python's datetime and timedelta hold microseconds (pyarrow makes "
            f"pandas objects or integers of them); cast them to {cast}, or yield them as a "
            "column of their own, which replays as numpy datetime64/timedelta64 in ns"
        )
    if isinstance(t, pa.BaseExtensionType):
        return type_problem(t.storage_type, at, in_struct, python)
    if pa.types.is_struct(t):
        python = python or not at  # (a column that is a struct: to_pylist)
        for field in t:
            problem = type_problem(field.type, f"{at}.{field.name}", True, python)
            if problem:
                return problem
        return None
    if pa.types.is_map(t):
        key = type_problem(t.key_type, f"{at}{{key}}", True, python)
        return key or type_problem(t.item_type, f"{at}{{value}}", True, python)
    if _is_list(t) or pa.types.is_fixed_size_list(t):
        fix = None if python else _list_value_fix(t.value_type)
        if fix is not None:
            return (
                f"lists of {t.value_type}{where}, which pyarrow cannot convert to numpy; cast "
                f"their values to {fix}"
            )
        return type_problem(t.value_type, f"{at}[]", in_struct, python)
    return None


def _times_of_day(array: pa.Array) -> list[pa.Array]:
    """The ``time64[ns]`` arrays in ``array``, at any depth (all of a list's values, not only
    the slice's: no copy)."""
    t = array.type
    if pa.types.is_time64(t) and t.unit == "ns":
        return [array]
    if isinstance(array, pa.ExtensionArray):
        return _times_of_day(array.storage)
    if isinstance(array, pa.StructArray):
        return [a for i in range(t.num_fields) for a in _times_of_day(array.field(i))]
    if isinstance(array, pa.MapArray):
        return _times_of_day(array.keys) + _times_of_day(array.items)
    if isinstance(array, (pa.ListArray, pa.LargeListArray, pa.FixedSizeListArray)):
        return _times_of_day(array.values)
    return []


def unreadable(column: pa.Array) -> str | None:
    """Why readers could not hand back ``column`` (in its stored type, without nulls), and
    what to yield instead; None if they can (:func:`type_problem`, and times of day with
    nanoseconds: Python's ``time``, which readers give, holds microseconds)."""
    problem = type_problem(column.type)
    if problem:
        return problem
    for times in _times_of_day(column):
        ns = arrays.to_numpy(times.view(pa.int64()))
        if (ns % 1000).any():
            return (
                f"times of day with nanoseconds ({times.type}); readers give them back as "
                "Python's datetime.time, which holds microseconds: drop the nanoseconds "
                "(array.cast(pa.time64('us'), safe=False)) or store the time since midnight "
                "as a duration (pa.duration('ns'))"
            )
    return None


def unloadable_columns(schema: pa.Schema) -> list[str]:
    """Why each column the loader refuses, whatever its shards hold, cannot be loaded, and
    what to do: a tensor stored transposed (an Arrow ``fixed_shape_tensor`` with a
    ``permutation``, as another writer or an earlier snap kept it). Its files are valid Arrow:
    no shard is damaged, and deleting them would not help."""
    return [
        f"column {f.name!r} holds tensors stored transposed (an Arrow fixed_shape_tensor of "
        f"shape {list(f.type.shape)} with the permutation {list(f.type.permutation)}, as another "
        "writer or an earlier snap kept it): its shards are valid Arrow files, but the loader "
        "refuses the column, whose axes it would give in the stored order; make the snapshot "
        "again (snap create --overwrite stores tensors in their logical order), or read the "
        "other columns (loader(columns=[...]), snap bench --columns)"
        for f in schema
        if is_transposed(f.type)
    ]
