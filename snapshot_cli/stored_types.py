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
paths.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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
    stays one, and run-end encoding is decoded at the top only)."""
    if pa.types.is_dictionary(t):
        return stored_type(t.value_type, top)
    if isinstance(t, pa.FixedShapeTensorType):  # its logical shape, without names
        permutation = t.permutation or range(len(t.shape))
        return pa.fixed_shape_tensor(t.value_type, [t.shape[p] for p in permutation])
    if top and pa.types.is_run_end_encoded(t):
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
