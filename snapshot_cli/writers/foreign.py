"""Other libraries' values → what :mod:`.convert` stores (pure: no I/O).

Preprocessing code yields torch, JAX and TensorFlow tensors, PIL images, pandas Series and
DataFrames, and numpy arrays read in the other byte order. Each becomes the numpy value
``np.asarray`` makes of it, or a :class:`RecordError` with the library's own reason, naming
the column. A table of another library (polars, DuckDB, ...) that exports Arrow data (the
PyCapsule interface) becomes the pyarrow Table it exports. No library is imported here: a
value of one can only exist if it is loaded.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from .. import schema as schema_mod
from ..errors import RecordError
from ..progress import counted
from . import advice


def native(value: Any) -> Any:
    """A numpy array or scalar in the other byte order (``np.fromfile(f, ">i4")``, MNIST's
    idx files, FITS) → the same values in native order; anything else as it is."""
    dtype = getattr(value, "dtype", None)
    if (
        isinstance(dtype, np.dtype)
        and isinstance(value, (np.ndarray, np.generic))
        and dtype.kind in "biuf"
        and not schema_mod.is_supported_dtype(dtype)
        and schema_mod.is_supported_dtype(dtype.newbyteorder("="))
    ):
        return value.astype(dtype.newbyteorder("="))
    return value


def unmasked(value: np.ma.MaskedArray, column: str) -> np.ndarray:
    """A numpy masked array → its data, if none of it is masked. Converting one with masked
    values would store the data hidden under the mask as if it were real."""
    masked = int(np.ma.count_masked(value))
    if masked:
        raise RecordError(
            f"column {column!r} is a numpy masked array with {masked:,} of {value.size:,} "
            "values masked; snap columns have no missing values: store value.filled(FILL) "
            "with a fill value of your choice, and np.ma.getmaskarray(value) as a column of "
            "its own if the model needs to know"
        )
    return np.asarray(value)


def is_array_like(value: Any) -> bool:
    """A tensor or image of another library that numpy can view or copy (torch, JAX,
    TensorFlow, PIL, pandas): it has one of numpy's array protocols."""
    if isinstance(value, (np.ndarray, np.generic, str, bytes, pa.Array, pa.ChunkedArray)):
        return False
    kind = type(value)
    return any(
        hasattr(kind, name) for name in ("__array__", "__array_interface__", "__array_struct__")
    )


def missing_values(column: Any) -> int:
    """How many missing values (NA, NaT, None) a pandas Series, Index or array holds that
    numpy would turn into NaN, NaT or None: 0 for another library's value or a plain numeric
    dtype (whose NaN is a value)."""
    if not type(column).__module__.startswith("pandas") or not hasattr(column, "isna"):
        return 0
    dtype = getattr(column, "dtype", None)
    if isinstance(dtype, np.dtype) and dtype.kind not in "mMO":
        return 0
    return int(np.asarray(column.isna()).sum())


def as_numpy(value: Any, column: str) -> np.ndarray:
    if is_table(value):  # (numpy's array of it: its names dropped, its ints made floats)
        raise RecordError(
            f"column {column!r} has a {type(value).__name__}, a table of named columns: a "
            "record's value is one array, and numpy would make it a 2-D array of one dtype "
            "(the names dropped, ints beside floats made float64); yield the table itself "
            "(each row a record), or give each of its columns a column of the record "
            "(df['a'].to_numpy())"
        )
    missing = missing_values(value)
    if missing:
        raise RecordError(
            f"column {column!r} has a pandas {type(value).__name__} holding "
            f"{counted(missing, 'missing value')} (NA), which numpy would make NaN or None; "
            "snap stores no missing values: fill them (fillna) or leave them out"
        )
    try:
        return np.asarray(value)
    except Exception as err:  # the library's own reason: grad, a GPU device, bfloat16, ...
        hint = "yield a numpy array (for a torch tensor: t.detach().cpu().numpy())"
        dtype = str(getattr(value, "dtype", "")).rpartition(".")[2]  # "torch.bfloat16"
        if dtype.startswith("key<"):  # a JAX PRNG key ("key<fry>"): its bits are an array
            hint = "yield its bits: np.asarray(jax.random.key_data(key))"
        if dtype.startswith(schema_mod.LOW_PRECISION):
            width = 16 if dtype.startswith(("bfloat16", "float16")) else 8  # bfloat16, float8s
            hint = schema_mod.low_precision_hint("t.float()", f"t.view(torch.int{width})")
        raise RecordError(
            f"column {column!r} has a {type(value).__name__} numpy cannot convert "
            f"({type(err).__name__}: {err}); {hint}"
        ) from None


def is_missing(value: Any) -> bool:
    """None, pandas' NA and NaT: a missing value, not a type."""
    return value is None or type(value).__name__ in ("NAType", "NaTType")


def is_dataframe(item: Any) -> bool:
    pandas = sys.modules.get("pandas")  # never imported here: only a loaded pandas made one
    return pandas is not None and isinstance(item, pandas.DataFrame)


def exports_arrow(item: Any) -> bool:
    """Another library's table (a polars DataFrame, a DuckDB result, ...): it has the Arrow
    PyCapsule interface (a stream of record batches, or one struct array). A ``Mapping`` is
    a record whatever else it has, and a pyarrow or pandas object has its own path."""
    kind = type(item)
    return (
        hasattr(kind, "__arrow_c_stream__") or hasattr(kind, "__arrow_c_array__")
    ) and not isinstance(item, (Mapping, pa.Array, pa.ChunkedArray, pa.RecordBatch, pa.Table))


def is_table(value: Any) -> bool:
    """A DataFrame or Arrow table of any library: named columns and a 2-D shape."""
    shape = getattr(value, "shape", None)
    named = hasattr(value, "columns") or hasattr(value, "column_names")
    return named and isinstance(shape, tuple) and len(shape) == 2


def arrow_data(item: Any) -> pa.Table | pa.RecordBatch:
    """What :func:`exports_arrow` accepted → a pyarrow Table (a stream) or RecordBatch."""
    objects = _python_object_columns(item)
    if objects:
        raise RecordError(
            f"column {objects[0]!r} of a yielded {type(item).__name__} holds Python objects "
            "(polars' Object), which it exports to Arrow as their memory addresses; convert "
            "them to numbers, text or bytes first"
        )
    stream = hasattr(type(item), "__arrow_c_stream__")
    try:
        return pa.table(item) if stream else pa.record_batch(item)
    except (pa.ArrowException, TypeError, ValueError) as err:
        if is_table(item):  # a table, but...
            raise RecordError(
                f"a yielded {type(item).__name__} could not be read as Arrow data "
                f"({type(err).__name__}: {err}); cast the columns Arrow has no type for "
                "(polars' Int128 to Int64, ...) before yielding it"
            ) from None
        why = f"its Arrow data is not a table of named columns: {type(err).__name__}: {err}"
        raise RecordError(advice.not_a_record_message(item, why)) from None


def _python_object_columns(item: Any) -> list[str]:
    """The columns of a polars DataFrame that hold Python objects: polars exports each as the
    8 bytes of its address, which would be stored as if they were data. (polars allows
    objects at the top level only: "nested objects are not allowed".)"""
    if type(item).__module__.split(".")[0] != "polars":
        return []
    items = getattr(getattr(item, "schema", None), "items", None)
    if not callable(items):
        return []
    return [str(name) for name, dtype in items() if type(dtype).__name__ == "Object"]


def dataframe_columns(frame: Any) -> dict[str, Any]:
    """A pandas DataFrame → its columns as numpy arrays, by name (the index is not stored)."""
    names = list(frame.columns)
    odd = [n for n in names if not isinstance(n, str)]
    if odd:
        fix = (
            "df.columns = ['_'.join(map(str, c)) for c in df.columns]"  # a MultiIndex's
            if any(isinstance(n, tuple) for n in odd)
            else "df.columns = df.columns.astype(str)"
        )
        raise RecordError(
            f"a yielded DataFrame has column names that are not str: {odd[:5]}; rename them ({fix})"
        )
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise RecordError(
            f"a yielded DataFrame has the column names {twice} more than once; a column needs "
            "a name of its own: rename them (df.columns = [...]), or drop the copies "
            "(df.loc[:, ~df.columns.duplicated()])"
        )
    out = {}
    for name in names:
        column = frame[name]
        # a nullable column (Int64, string, categorical) turns its NA into NaN or None in
        # numpy, a datetime column its NaT into NaT
        dtype = column.dtype
        missing = missing_values(column)
        if missing:
            raise RecordError(
                f"column {name!r} of a yielded DataFrame holds {counted(missing, 'missing value')}"
                " (NA); snap stores no missing values: fill them (fillna) or leave those rows out"
            )
        if getattr(dtype, "kind", "") == "O" and len(column) and _zoned_time(column.iloc[0]):
            raise RecordError(  # (one zone is a datetime64[ns, zone] column: below)
                f"column {name!r} of a yielded DataFrame holds times with a time zone as "
                f"objects ({column.iloc[0]!r}, ...), as pandas keeps times of more than one "
                f"zone; a column has one zone: give it one (df[{name!r}] = "
                f"pd.to_datetime(df[{name!r}], utc=True)), and it keeps it"
            )
        # times with a zone: an Arrow timestamp that keeps it (numpy's would be objects);
        # a column of pandas' ArrowDtype: its Arrow data, taken as a pyarrow table's is
        # (numpy's would be objects, or pandas' NotImplementedError for an interval)
        zoned = getattr(dtype, "tz", None) is not None and getattr(dtype, "kind", "") == "M"
        arrow = getattr(dtype, "pyarrow_dtype", None) is not None
        out[name] = pa.array(column) if zoned or arrow else column.to_numpy()
    return out


def _zoned_time(value: Any) -> bool:
    return isinstance(value, datetime.datetime) and value.tzinfo is not None
