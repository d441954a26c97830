"""How snap encodes record values as Arrow columns (pure; shared by writers and readers).

=========  ====================================================  ==========================
kind       Arrow type                                            read back as
=========  ====================================================  ==========================
scalar     bool / intN / uintN / floatN                          1-D numpy array
tensor     ``arrow.fixed_shape_tensor(T, shape)``                (n, *shape) numpy array
ragged     ``list<T>`` (1-D arrays of varying length)            object array of 1-D arrays
ragged     ``struct<data: list<T>, shape: fixed_size_list<int32>[ndim]>`` (ndim >= 2)
                                                                 object array of nd arrays
string     ``string``                                            object array of str
binary     ``binary``                                            object array of bytes
arrow      anything else, from a user's RecordBatch/Table        pyarrow's own conversion
           (encodings of the kinds above are stored as them: :mod:`.stored_types`)
=========  ====================================================  ==========================
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from . import arrays, manifest_text
from .errors import RecordError

RAGGED_DATA, RAGGED_SHAPE = "data", "shape"
MAX_DIMENSION = 2**31 - 1  # of an array stored ragged (its shape: int32s)


def dimension_message(shape: tuple[int, ...], column: str | None = None) -> str:
    """Why an (empty) array with a dimension past :data:`MAX_DIMENSION` is refused."""
    return (
        f"{'a Batch column' if column is None else f'column {column!r}'} has an array of shape "
        f"{tuple(shape)}: a dimension is at most {MAX_DIMENSION:,} (2**31 - 1: snap stores the "
        "shape of an empty or ragged array as int32); reshape it (an empty array of shape (0,) "
        "holds as little), or store that length as a number in a column of its own"
    )


def is_supported_dtype(dtype: np.dtype) -> bool:
    """bool, int8..int64, uint8..uint64 and float16/32/64 in native byte order (not float128,
    which numpy has and Arrow has not, nor a type another library defines in numpy's kinds:
    ml_dtypes' float8_e5m2 is a kind "f" of one byte)."""
    user_defined = dtype.isbuiltin == 2
    return dtype.kind in "biuf" and dtype.itemsize <= 8 and dtype.isnative and not user_defined


# ml_dtypes' (JAX's bfloat16, the float8s, int4): numpy kind "V", as a structured array's
LOW_PRECISION = ("bfloat16", "float8", "float4", "float6", "int4", "uint4", "int2", "uint2")


def low_precision_hint(widened: str, bits: str) -> str:
    """What to store instead of a bfloat16 or float8 value (the calls shown: numpy's, or a
    library's)."""
    return (
        f"Arrow has no such type: store it widened ({widened}), or its bits as integers of "
        f"its width ({bits}) and view them back when read"
    )


def ragged_type(value_type: pa.DataType, ndim: int) -> pa.DataType:
    """The Arrow type of a ragged column of ``ndim``-dimensional arrays."""
    if ndim == 1:
        return pa.list_(value_type)
    data = pa.field(RAGGED_DATA, pa.list_(value_type), nullable=False)
    return pa.struct([data, pa.field(RAGGED_SHAPE, pa.list_(pa.int32(), ndim), nullable=False)])


def ragged_info(t: pa.DataType) -> tuple[pa.DataType, int] | None:
    """``(value_type, ndim)`` if ``t`` is a ragged encoding, else None. A struct is one only if
    it is exactly :func:`ragged_type`'s (numeric data, int32 shape of >= 2 dimensions, both
    fields not null): any other struct named data/shape is a user's own (kind arrow)."""
    if pa.types.is_list(t) and is_numeric(t.value_type):
        return t.value_type, 1
    if not pa.types.is_struct(t) or t.num_fields != 2:
        return None
    data, shape = t.field(0).type, t.field(1).type
    if not (pa.types.is_list(data) and pa.types.is_fixed_size_list(shape)):
        return None
    value_type, ndim = data.value_type, shape.list_size
    if is_numeric(value_type) and ndim >= 2 and t == ragged_type(value_type, ndim):
        return value_type, ndim
    return None


def is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t)


def kind(t: pa.DataType) -> str:
    """The encoding kind of an Arrow type (see the module docstring)."""
    if isinstance(t, pa.FixedShapeTensorType) and is_numeric(t.value_type):  # (§5.2's T)
        return "tensor"
    if is_numeric(t):
        return "scalar"
    if ragged_info(t) is not None:
        return "ragged"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "binary"
    return "arrow"


def dtype_name(t: pa.DataType) -> str:
    """numpy-style name of a numeric Arrow type (``uint8``, ``float32``, ``bool``)."""
    if pa.types.is_boolean(t):
        return "bool"
    dtype = arrays.numpy_dtype(t)
    assert dtype is not None, t  # (callers pass numeric types only)
    return dtype.name


def describe_type(t: pa.DataType) -> dict[str, Any]:
    """A small, readable description of a column type: kind, dtype and shape."""
    k = kind(t)
    if k == "tensor":  # its logical shape (a permutation's axes in order: as head reads it)
        p = list(t.permutation or range(len(t.shape)))  # ("transposed": loaders refuse it)
        shape, moved = [t.shape[i] for i in p], {"transposed": True} if p != sorted(p) else {}
        return {"kind": k, "dtype": dtype_name(t.value_type), "shape": shape, **moved}
    if k == "scalar":
        return {"kind": k, "dtype": dtype_name(t), "shape": []}
    if k == "ragged":
        value_type, ndim = ragged_info(t)  # type: ignore[misc]
        return {"kind": k, "dtype": dtype_name(value_type), "shape": [None] * ndim}
    if k in ("string", "binary"):
        return {"kind": k, "dtype": k, "shape": []}
    return {"kind": k, "dtype": str(t), "shape": None}


def describe(schema: pa.Schema) -> list[dict[str, Any]]:
    return [{"name": f.name, **describe_type(f.type)} for f in schema]


def format_type(t: pa.DataType) -> str:
    """``uint8[3,64,64]``, ``int32[?]`` (ragged), ``str``: how errors and inspect show a type."""
    return format_type_doc(describe_type(t))


def format_type_doc(d: dict[str, Any]) -> str:
    """:func:`format_type` of a column already described by :func:`describe_type`."""
    if d["kind"] in ("string", "binary"):
        return "str" if d["kind"] == "string" else "bytes"
    if d["kind"] == "arrow":
        return d["dtype"]
    if not d["shape"]:
        return d["dtype"]
    dims = ",".join("?" if s is None else str(s) for s in d["shape"])
    return f"{d['dtype']}[{dims}]" + (" (stored transposed)" if d.get("transposed") else "")


def encode_schema(schema: pa.Schema) -> str:
    """Arrow IPC serialisation of a schema, base64: exact and pickle-free."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def decode_schema(text: str) -> pa.Schema:
    """The schema :func:`encode_schema` wrote; ValueError for anything else (Arrow's reader
    answers bad bytes with ArrowInvalid, OSError or EOFError depending on where they break)."""
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
        schema = pa.ipc.read_schema(pa.py_buffer(data))
        manifest_text.names(schema)  # (a name not UTF-8: a ValueError now, not when used)
        return schema
    except (ValueError, OSError, EOFError, pa.ArrowException) as err:  # binascii.Error too
        raise ValueError(f"not an Arrow IPC schema: {err}") from err


def difference(got: pa.Schema, want: pa.Schema) -> str | None:
    """How a shard's schema differs from the manifest's (exact types: no cast is ever made),
    or None if they agree."""
    if got.equals(want):  # (the usual case: 30,000 columns' types made over took 0.2 s a shard)
        return None
    g = [(f.name, arrays.all_nullable(f.type)) for f in got]  # (nested nullability aside)
    w = [(f.name, arrays.all_nullable(f.type)) for f in want]
    if g == w:
        return None
    for a, b in zip(g, w, strict=False):
        if a[0] != b[0]:
            return f"a column {a[0]!r} where the manifest has {b[0]!r}"
        if a[1] != b[1]:
            return f"column {b[0]!r}: {a[1]} instead of {b[1]}"
    return f"columns {[a[0] for a in g]} instead of {[b[0] for b in w]}"


def layout_problem(
    got: pa.Schema | None, want: pa.Schema, batches: int, expected: int
) -> str | None:
    """What keeps a shard file from being read by the manifest (``want``, ``expected``
    record batches): another schema (``got``; None: not looked at) or another count of
    record batches; None if neither."""
    if got is not None and (diff := difference(got, want)) is not None:
        return f"its schema differs from the manifest's ({diff})"
    if batches != expected:
        return f"it has {batches} record batches, the manifest says {expected}"
    return None


def null_count(array: pa.Array) -> int:
    """Missing values in ``array`` and in the values of its lists, structs and extensions (snap
    writes none: a yielded batch holding some is refused, a shard holding some is damaged)."""
    if isinstance(array, pa.ExtensionArray):
        return null_count(array.storage)
    count = array.null_count
    if isinstance(array, (pa.ListArray, pa.LargeListArray, pa.FixedSizeListArray)):
        count += null_count(array.values)  # all of them, not only the slice's: no copy
    elif isinstance(array, pa.StructArray):
        count += sum(null_count(array.field(i)) for i in range(array.type.num_fields))
    return count


def encoding_problem(batch: pa.RecordBatch) -> str | None:
    """What breaks snap's encodings in a record batch that Arrow has validated, or None.

    Arrow accepts nulls and any ragged shape, but snap writes neither: in the columns snap
    decodes itself a null would reach the model as NaN, a cast integer or None, and a shape
    that does not hold its values would fail (or be guessed, for -1) in numpy's reshape.
    Columns of other Arrow types go through pyarrow's own conversion, nulls included.
    """
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        if kind(column.type) == "arrow":
            continue
        nulls = null_count(column)
        if nulls:
            kind_of = f"column {name!r} ({format_type(column.type)})"
            return f"{kind_of} holds {nulls} missing values (nulls), which snap does not write"
        info = ragged_info(column.type)
        if info is not None and info[1] > 1:
            bad = _bad_shape(column, info[1])
            if bad is not None:
                return f"column {name!r}: {bad}"
    return None


def _bad_shape(column: pa.StructArray, ndim: int) -> str | None:
    """The first record of a ragged n-d column whose shape does not hold its values."""
    values = column.field(0)
    counts = np.diff(arrays.to_numpy(values.offsets))
    dims = arrays.to_numpy(column.field(1).flatten()).reshape(len(column), ndim).astype(np.int64)
    total = np.ones(len(column), np.int64)
    for k in range(ndim):  # dims < 2**31 and total clipped to 2**32: no overflow
        total = np.minimum(total, 1 << 32) * dims[:, k]
    bad = np.flatnonzero((dims < 0).any(axis=1) | (total != counts))
    if not len(bad):
        return None
    i = int(bad[0])
    return f"record {i} has shape {dims[i].tolist()} but {counts[i]} values"


def tensor_array(stacked: np.ndarray) -> pa.Array:
    """``(n, *shape)`` numpy array → ``fixed_shape_tensor`` array (one copy at most)."""
    shape = stacked.shape[1:]
    flat = arrays.from_numpy(np.ascontiguousarray(stacked).reshape(-1))
    storage = pa.FixedSizeListArray.from_arrays(flat, int(np.prod(shape)))
    return pa.ExtensionArray.from_storage(pa.fixed_shape_tensor(flat.type, shape), storage)


def ragged_array(values: Sequence[np.ndarray], dtype: np.dtype, ndim: int) -> pa.Array:
    """A list of arrays of equal ndim and dtype → the ragged encoding of that ndim."""
    sizes = np.fromiter((v.size for v in values), dtype=np.int64, count=len(values))
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    if offsets[-1] > arrays.MAX_OFFSET:
        raise arrays.OffsetOverflow(f"{int(offsets[-1]):,} values of a ragged column in one array")
    flat = (
        np.concatenate([np.ravel(v) for v in values]) if len(values) else np.empty(0, dtype)
    ).astype(dtype, copy=False)
    offsets32 = arrays.from_numpy(offsets.astype(np.int32))
    data = pa.ListArray.from_arrays(offsets32, arrays.from_numpy(flat))
    if ndim == 1:
        return data
    shapes = np.array([v.shape for v in values], dtype=np.int64).reshape(-1)
    if len(shapes) and shapes.max() > MAX_DIMENSION:  # a Batch's (a record's is refused sooner)
        shape = next(v.shape for v in values if max(v.shape) > MAX_DIMENSION)
        raise RecordError(dimension_message(shape))
    shapes = shapes.astype(np.int32)  # (numpy < 2 wrapped a value past int32, with a warning)
    shape_arr = pa.FixedSizeListArray.from_arrays(arrays.from_numpy(shapes), ndim)
    return pa.StructArray.from_arrays(
        [data, shape_arr],
        fields=list(ragged_type(pa.from_numpy_dtype(dtype), ndim)),
    )
