"""What a loader's ``map`` returned, as the numpy arrays a framework adapter takes: tensors,
lists and numbers as arrays, views and byte-swapped arrays copied, arrays of several shapes
a ragged column, and a value numpy cannot take a TypeError naming its column."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .. import arrays

if TYPE_CHECKING:
    from .loader import Batch


def mapped_arrays(batch: Batch) -> Batch:
    """``batch`` with every column a numpy array: what a ``map`` returned may hold tensors
    (torch's, on the CPU), lists or numbers, which the bare loader hands on as they are and
    an adapter takes as numpy arrays (no copy for a CPU tensor), and views (a flip, ``a[:,
    ::-1]``) or byte-swapped arrays (``a.astype(">f4")``), which no framework takes: copied
    (:func:`framework_array`). A value numpy cannot take is a TypeError naming the column."""
    if all(isinstance(v, np.ndarray) and v is framework_array(v) for v in batch.values()):
        return batch
    return {name: as_array(name, value) for name, value in batch.items()}


def as_array(name: str, value: Any) -> np.ndarray:
    """Column ``name`` of what a ``map`` returned, as a numpy array a framework takes (see
    mapped_arrays). Text or bytes (a list of them) become an object array, as a snapshot's
    own text columns are: numpy's fixed-width strings drop trailing NULs (``b"\\x01\\0\\0"``
    became ``b"\\x01"``, ``b"\\0\\0"`` became ``b""``). Arrays (or tensors) of several shapes
    (token ids a record) become a ragged column, an object array of them, as a snapshot's
    own ragged columns are; of one shape, they are stacked into one array."""
    if isinstance(value, np.ndarray):
        return framework_array(value)
    try:
        out = np.asarray(value)
    except ValueError as err:  # (numpy: "inhomogeneous shape"): arrays of several shapes
        if (ragged := _ragged(value)) is not None:
            return ragged
        raise _refused(name, value, err) from None
    except Exception as err:  # noqa: BLE001 - whatever the value's own conversion raises
        raise _refused(name, value, err) from None
    if out.dtype.kind in "SU":
        text = np.empty(out.shape, object)
        text[...] = value  # (each element as it was given: NULs kept)
        return text
    if isinstance(value, (list, tuple)) and arrays.rounded_ints(value, out):
        raise TypeError(  # (silently float64: 2**63 + 1 as 9.223372036854776e+18, a probe)
            f"map returned column {name!r} as a {type(value).__name__} holding an int outside "
            "the int64 range, or one beside floats that a float64 does not hold exactly, which "
            "numpy rounds to a float64; return a numpy array of a dtype that holds it "
            "(np.array(v, dtype=np.uint64)), as a pipeline must yield it"
        )
    return framework_array(out)


def _ragged(value: Any) -> np.ndarray | None:
    """A sequence of arrays or tensors of one dtype and number of dimensions and several
    shapes as a 1-D object array of numpy arrays; None if it is no such sequence."""
    try:
        arrays = [framework_array(np.asarray(v)) for v in value]
    except Exception:  # noqa: BLE001 - refused by the caller, with numpy's first error
        return None
    if not arrays or len({(a.dtype, a.ndim) for a in arrays}) != 1 or arrays[0].ndim == 0:
        return None
    if arrays[0].dtype.kind not in "biuf":
        return None
    out = np.empty(len(arrays), object)
    for i, a in enumerate(arrays):
        out[i] = a
    return out


def _refused(name: str, value: Any, err: Exception) -> TypeError:
    said = " ".join(str(err).split())[:200]
    return TypeError(
        f"map returned column {name!r} as {type(value).__name__}, which numpy cannot take "
        f"({type(err).__name__}: {said}); return numpy arrays or CPU tensors, and for a "
        "ragged column arrays of one dtype and number of dimensions (a list of them, or a "
        "1-D object array)"
    )


def framework_array(value: np.ndarray) -> np.ndarray:
    """``value`` itself, or a copy torch, JAX and TensorFlow take: in native byte order
    (``a.astype(">f4")``: JAX refuses the dtype, torch the order), int64 as ``np.int64``
    (not numpy's longlong: torch refuses its type), and without negative strides
    (``a[:, ::-1]``, which torch refuses)."""
    if not value.dtype.isnative:  # (numbers and times; a structure's fields stay)
        value = value.astype(value.dtype.newbyteorder("="))
    if value.dtype.kind in "iu" and value.dtype.type is not np.dtype(value.dtype.str).type:
        value = value.view(value.dtype.str)
    if any(stride < 0 for stride in value.strides):
        value = value.copy(order="C")  # (not ascontiguousarray: one value is "contiguous")
    return value
