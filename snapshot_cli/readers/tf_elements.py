"""TensorFlow's side of ``loader.to_tf()``: which columns an element holds, their specs
(``TensorSpec``/``RaggedTensorSpec``, from the snapshot's schema or, with a ``map``, from
the map's first batch), and each column of a batch as a tensor (numeric arrays shared
through DLPack, not copied). The dataset itself is :mod:`.tf`.
"""

from __future__ import annotations

import collections
import contextlib
import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import schema as schema_mod
from ..errors import OptionError
from .window import ALIGN

if TYPE_CHECKING:
    from .loader import Loader


def import_tf() -> Any:
    """TensorFlow, or an ImportError saying how to install it."""
    try:
        import tensorflow as tf
    except ImportError as err:
        raise ImportError(
            "the TensorFlow adapter needs tensorflow: pip install tensorflow"
        ) from err
    return tf


def output_signature(loader: Loader, columns: Sequence[str] | None = None) -> dict[str, Any]:
    """``{column: TensorSpec | RaggedTensorSpec}`` of ``columns`` (default: all it reads)."""
    tf = import_tf()
    schema = loader.schema
    out: dict[str, Any] = {}
    formless: list[tuple[str, str]] = []  # (name, dtype)
    for name in loader.columns if columns is None else columns:
        d = schema_mod.describe_type(schema.field(name).type)
        if d["kind"] in ("string", "binary"):
            out[name] = tf.TensorSpec((None,), tf.string)
        elif d["kind"] == "ragged":
            dtype, ndim = tf.as_dtype(np.dtype(d["dtype"])), len(d["shape"])
            # every dimension of a record may vary: each is a ragged one
            out[name] = tf.RaggedTensorSpec((None, *([None] * ndim)), dtype, ragged_rank=ndim)
        elif d["kind"] in ("tensor", "scalar"):
            out[name] = tf.TensorSpec((None, *d["shape"]), tf.as_dtype(np.dtype(d["dtype"])))
        elif _is_text_list(schema.field(name).type):  # captions, tags: ragged strings
            out[name] = tf.RaggedTensorSpec((None, None), tf.string, ragged_rank=1)
        else:
            formless.append((name, str(d["dtype"])))
    if formless:  # (all of them at once: a second one was said only once the first went)
        times = all(t.startswith(("timestamp", "duration", "date", "time")) for _, t in formless)
        said = ", ".join(f"{n!r} ({t})" for n, t in formless)
        raise OptionError(
            f"column{'s' * (len(formless) > 1)} {said} ha{'ve' if len(formless) > 1 else 's'}"
            " no TensorFlow form: read the others with loader(columns=[...]), or make them "
            + (
                "int64 ticks with a map= (batch['t'].astype('datetime64[ns]').view(np.int64))"
                if times
                else "numeric arrays with a map="
            )
        )
    return out


def _is_text_list(t: Any) -> bool:
    """A list of str or of bytes per record (several captions or tags)."""
    import pyarrow as pa

    return bool(pa.types.is_list(t) and (pa.types.is_string(t.value_type)
                                         or pa.types.is_binary(t.value_type)))  # fmt: skip


def batch_signature(batch: dict[str, Any], columns: Sequence[str]) -> dict[str, Any]:
    """``{column: spec}`` of ``columns`` as they are in ``batch`` (what a ``map`` returned):
    numeric arrays by dtype and shape, object arrays of arrays ragged, of text or bytes
    strings."""
    tf = import_tf()
    out: dict[str, Any] = {}
    for name in columns:
        value = np.asarray(batch[name])
        if value.dtype != object and value.dtype.kind in "biuf" and value.ndim:
            out[name] = tf.TensorSpec((None, *value.shape[1:]), tf.as_dtype(value.dtype))
        elif value.dtype == object and len(value) and isinstance(value[0], np.ndarray):
            inner = np.asarray(value[0])
            ndim = max(1, inner.ndim)
            dims = (None, *([None] * ndim))
            dtype = tf.string if inner.dtype.kind in "OSU" else tf.as_dtype(inner.dtype)
            out[name] = tf.RaggedTensorSpec(dims, dtype, ragged_rank=ndim)
        elif value.dtype.kind in "OSU" and value.ndim == 1:
            out[name] = tf.TensorSpec((None,), tf.string)
        else:
            raise TypeError(
                f"map returned column {name!r} as {value.dtype} {value.shape}, which has no "
                "TensorFlow form: return numeric arrays (a row per record), arrays of arrays, "
                "or arrays of str/bytes"
            )
    return out


def peek(loader: Loader) -> dict[str, Any] | None:
    """The loader's next batch, its position and its stats() left as they were (None: it
    yields none)."""
    state, counted = loader.state_dict(), copy.deepcopy(loader._stats)
    batches = iter(loader)
    try:
        batch = next(batches, None)
    finally:
        batches.close()  # type: ignore[attr-defined]  # a generator: stops its threads
    loader.load_state_dict(state)
    loader._stats.restore(counted)
    return None if batch is None else dict(batch)


def select_columns(
    loader: Loader,
    features: str | Sequence[str] | None,
    label: str | None,
    readable: list[str] | None = None,
) -> list[str]:
    """The feature columns that ``features``/``label`` name, of ``readable`` (default: the
    loader's columns; with a map, its batches'); raises OptionError if unusable."""
    readable = list(loader.columns) if readable is None else readable

    def check(name: object, role: str) -> str:
        if not isinstance(name, str):
            raise OptionError(f"{role} must be a column name (a str), got {name!r}")
        if name in readable:
            return name
        if name in loader.schema.names:
            raise OptionError(
                f"{role} column {name!r} is not read by this loader, which reads {readable}: "
                "add it to loader(columns=[...])"
            )
        raise OptionError(f"unknown {role} column {name!r}; the loader reads {readable}")

    if label is not None:
        check(label, "label")
    if features is None:
        names = [c for c in readable if c != label]
        if not names and not readable:  # (a snapshot of no records has no columns)
            raise OptionError(
                "no feature columns: the snapshot has no columns (it holds no records: "
                "its pipeline made none), so there is nothing for tf.data to read"
            )
        if not names:
            raise OptionError(
                f"no feature columns: the loader reads only {readable}, all taken by the label"
            )
        return names
    if isinstance(features, str):
        names = [check(features, "feature")]
    elif isinstance(features, Sequence) and features:
        names = [check(c, "feature") for c in features]
    else:
        raise OptionError(
            f"features must be a column name, a non-empty list of them or None, got {features!r}"
        )
    repeated = sorted(c for c, n in collections.Counter(names).items() if n > 1)
    if repeated:
        raise OptionError(f"features name {repeated} more than once")
    if label in names:
        others = [c for c in readable if c != label]
        raise OptionError(
            f"column {label!r} is both the label and a feature; choose features from {others}"
        )
    return names


def to_tensor(value: np.ndarray, spec: Any) -> Any:
    """One column of a batch in TensorFlow's form; numeric arrays shared when TF can."""
    tf = import_tf()
    if isinstance(spec, tf.RaggedTensorSpec):
        flat, *lengths = ragged_parts(value, spec.dtype.as_numpy_dtype, spec.ragged_rank)
        return tf.RaggedTensor.from_nested_row_lengths(flat, lengths)
    if spec.dtype == tf.string:
        return tf.constant(list(value), tf.string)
    if (
        value.size
        and value.flags.c_contiguous
        and value.ctypes.data % ALIGN == 0  # TensorFlow aborts the process on unaligned data
        and value.dtype.isnative
        and value.dtype.kind in "biufc"
    ):
        # No copy: the tensor holds the array, and the loader reuses a batch's memory only
        # once nothing refers to it (slabs.WindowPool).
        with contextlib.suppress(BufferError, TypeError, ValueError):
            return tf.experimental.dlpack.from_dlpack(value.__dlpack__())
    return value  # TensorFlow copies it into a tensor (py_function converts what it returns)


def ragged_parts(value: np.ndarray, dtype: Any, ndim: int = 1) -> list[np.ndarray]:
    """A ragged column (an object array of ``ndim``-dimensional arrays, each dimension free
    to vary) as its values, flat, then one array of row lengths per dimension: the records'
    first dimensions, then each row's length in the next (``RaggedTensor``'s nested row
    lengths)."""
    arrays = [np.asarray(v) for v in value]
    dims = [v.shape for v in arrays]
    for shape in dims:
        if len(shape) != ndim:
            raise TypeError(
                f"a ragged column holds an array of shape {shape} among arrays of {ndim} "
                "dimensions: TensorFlow's ragged tensor needs one number of dimensions"
            )
    flat = (
        np.concatenate(arrays if ndim == 1 else [v.reshape(-1) for v in arrays])
        if arrays
        else np.zeros(0, dtype)
    ).astype(dtype, copy=False)
    shapes = np.array(dims, np.int64).reshape(len(arrays), ndim)
    lengths = [shapes[:, 0]]
    for axis in range(1, ndim):  # each row of the dimension before holds shape[axis] values
        rows = np.prod(shapes[:, :axis], axis=1)  # (a loop of np.full a record: 3 ms a batch)
        lengths.append(np.repeat(shapes[:, axis], rows))
    return [flat, *lengths]


def check_batch(
    batch: dict[str, Any], specs: dict[str, Any], names: Sequence[str], first: frozenset[str]
) -> None:
    """A ``map``'s batch against the specs taken from its first batch (whose columns were
    ``first``): a TypeError naming the column that differs (TensorFlow's own error shows
    neither the column nor the map; a column added later would be dropped without one)."""
    tf = import_tf()
    added = sorted(set(batch) - first)
    if added:
        raise TypeError(
            f"map returned column {added[0]!r} in this batch but not in the first one, from "
            "which to_tf() took its element spec (it would be dropped): return the same "
            "columns from every batch"
        )
    for name in names:
        if name not in batch:
            raise TypeError(
                f"map returned no column {name!r} in this batch, though it did in the first "
                "one, from which to_tf() took its element spec: return the same columns"
            )
        spec, value = specs[name], batch[name]
        if isinstance(spec, tf.TensorSpec) and spec.dtype != tf.string:
            want = (spec.dtype.as_numpy_dtype, tuple(spec.shape.as_list()[1:]))
            got = (getattr(value, "dtype", type(value)), tuple(getattr(value, "shape", ())[1:]))
            if got != want:
                raise TypeError(
                    f"map returned column {name!r} as {got[0]} rows of shape {got[1]}, but "
                    f"{want[0].__name__} rows of shape {want[1]} in the first batch, from "
                    "which to_tf() took its element spec: keep each column's dtype and shape"
                )
        elif isinstance(spec, tf.RaggedTensorSpec) and (held := _ragged_form(value, spec)):
            # (it was cast silently, 0.5 and 1.75 to 0 and 1, or failed in TensorFlow, which
            # named neither the column nor the map)
            kind = "text" if spec.dtype == tf.string else spec.dtype.as_numpy_dtype.__name__
            raise TypeError(
                f"map returned column {name!r} holding {held}, but {spec.ragged_rank}-D {kind} "
                "arrays in the first batch, from which to_tf() took its element spec: keep a "
                "ragged column's dtype and number of dimensions"
            )


def _ragged_form(value: Any, spec: Any) -> str:
    """How a ragged column of a map's batch differs from ``spec`` ("" if it does not): a
    record's array of another dtype or number of dimensions, or no arrays at all."""
    if not isinstance(value, np.ndarray) or value.dtype != object:
        return f"{getattr(value, 'dtype', type(value).__name__)} {getattr(value, 'shape', '')}"
    text = spec.dtype.name == "string"
    for record in value:
        a = np.asarray(record)
        if a.ndim != spec.ragged_rank:
            return f"an array of shape {a.shape}"
        if (a.dtype.kind in "OSU") != text or (not text and a.dtype != spec.dtype.as_numpy_dtype):
            return f"{a.dtype} arrays"
    return ""
