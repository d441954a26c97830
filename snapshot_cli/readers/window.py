"""A window: the decoded records of one plan window, as contiguous numpy columns.

Fixed-width columns (scalars and fixed-shape tensors) are copied into one preallocated array
per column as record batches are decoded (several threads fill disjoint row ranges); a batch
is then one vectorised ``np.take`` per column. Variable-width columns (ragged arrays,
strings, bytes) stay Arrow arrays until a batch takes its rows.
"""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa

from .. import schema as schema_mod
from .convert import column_to_numpy

FIXED_KINDS = ("scalar", "tensor")


def numpy_dtype(t: pa.DataType) -> np.dtype:
    value_type = t.value_type if isinstance(t, pa.FixedShapeTensorType) else t
    return (
        np.dtype(bool)
        if pa.types.is_boolean(value_type)
        else np.dtype(value_type.to_pandas_dtype())
    )


def row_shape(t: pa.DataType) -> tuple[int, ...]:
    return tuple(t.shape) if isinstance(t, pa.FixedShapeTensorType) else ()


def row_bytes(schema: pa.Schema, columns: list[str]) -> int:
    """Bytes per record of the fixed-width columns (what a window preallocates)."""
    total = 0
    for name in columns:
        t = schema.field(name).type
        if schema_mod.kind(t) in FIXED_KINDS:
            total += numpy_dtype(t).itemsize * int(np.prod(row_shape(t), dtype=np.int64))
    return total


class Window:
    """Records ``[0, rows)`` of one window. ``fill`` from any thread; then ``finish``."""

    def __init__(self, schema: pa.Schema, columns: list[str], rows: int) -> None:
        self.rows = rows
        self.fixed: dict[str, np.ndarray] = {}
        self.var: dict[str, list[tuple[int, pa.Array]]] = {}
        self._var_done: dict[str, pa.Array] = {}
        self.columns = columns
        self._lock = threading.Lock()
        for name in columns:
            t = schema.field(name).type
            if schema_mod.kind(t) in FIXED_KINDS:
                self.fixed[name] = np.empty((rows, *row_shape(t)), dtype=numpy_dtype(t))
            else:
                self.var[name] = []

    def fill(self, offset: int, batch: pa.RecordBatch, start: int, stop: int) -> None:
        """Copy records ``[start, stop)`` of ``batch`` to rows ``offset...`` of the window."""
        n = stop - start
        for name, dest in self.fixed.items():
            dest[offset : offset + n] = column_to_numpy(batch.column(name).slice(start, n))
        if self.var:
            parts = [(name, batch.column(name).slice(start, n)) for name in self.var]
            with self._lock:
                for name, part in parts:
                    self.var[name].append((offset, part))

    def finish(self) -> None:
        """Join the variable-width parts in row order (call once, after every fill)."""
        for name, parts in self.var.items():
            parts.sort(key=lambda p: p[0])
            arrays = [p[1] for p in parts]
            self._var_done[name] = pa.concat_arrays(arrays) if len(arrays) != 1 else arrays[0]

    def take(self, index: np.ndarray | slice) -> dict[str, np.ndarray]:
        """The records at ``index`` (window rows), as ``{column: numpy array}``."""
        out: dict[str, np.ndarray] = {}
        for name in self.columns:
            if name in self.fixed:
                col = self.fixed[name]
                if isinstance(index, slice):
                    out[name] = col[index]  # a view: windows are never reused
                else:
                    dest = np.empty((len(index), *col.shape[1:]), dtype=col.dtype)
                    out[name] = np.take(col, index, axis=0, out=dest, mode="clip")
            else:
                arr = self._var_done[name]
                if isinstance(index, slice):
                    part = arr.slice(index.start, index.stop - index.start)
                else:
                    part = arr.take(pa.array(index))
                out[name] = column_to_numpy(part)
        return out
