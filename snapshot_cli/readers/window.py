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
    """Records ``[0, rows)`` of one window. ``fill`` from any thread; then ``finish``.

    ``storage`` (from :class:`WindowPool`) supplies reusable arrays of at least ``rows`` rows.
    With ``contiguous=False`` (unshuffled replay, where batches are runs of consecutive
    records) fixed-width columns are not copied into the window: each batch is one copy,
    straight from the decoded record batches.
    """

    def __init__(
        self,
        schema: pa.Schema,
        columns: list[str],
        rows: int,
        storage: dict[str, np.ndarray] | None = None,
        contiguous: bool = True,
    ) -> None:
        self.rows = rows
        self.storage: dict[str, np.ndarray] = {}
        self.fixed: dict[str, np.ndarray] = {}
        self.var: dict[str, list[tuple[int, pa.Array]]] = {}
        self._var_done: dict[str, pa.Array] = {}
        self.columns = columns
        self.contiguous = contiguous
        self._views: dict[str, list[tuple[int, np.ndarray]]] = {}
        self._starts = np.zeros(0, np.int64)
        self._lock = threading.Lock()
        for name in columns:
            t = schema.field(name).type
            if schema_mod.kind(t) in FIXED_KINDS and not contiguous:
                self._views[name] = []
            elif schema_mod.kind(t) in FIXED_KINDS:
                if storage is None or len(storage[name]) < rows:
                    self.storage[name] = np.empty((rows, *row_shape(t)), dtype=numpy_dtype(t))
                else:
                    self.storage[name] = storage[name]
                self.fixed[name] = self.storage[name][:rows]
            else:
                self.var[name] = []

    def fill(self, offset: int, batch: pa.RecordBatch, start: int, stop: int) -> None:
        """Copy records ``[start, stop)`` of ``batch`` to rows ``offset...`` of the window."""
        n = stop - start
        for name, dest in self.fixed.items():
            dest[offset : offset + n] = column_to_numpy(batch.column(name).slice(start, n))
        if self._views:
            views = [
                (name, column_to_numpy(batch.column(name).slice(start, n))) for name in self._views
            ]
            with self._lock:
                for name, view in views:
                    self._views[name].append((offset, view))
        if self.var:
            parts = [(name, batch.column(name).slice(start, n)) for name in self.var]
            with self._lock:
                for name, part in parts:
                    self.var[name].append((offset, part))

    def targets(self, offset: int, n: int) -> dict[str, np.ndarray] | None:
        """Rows ``[offset, offset + n)`` of every column, to decode into directly; None unless
        every column is a fixed-width one copied into the window."""
        if self.var or self._views:
            return None
        return {name: dest[offset : offset + n] for name, dest in self.fixed.items()}

    def finish(self) -> None:
        """Put the parts in row order (call once, after every fill)."""
        for parts in self._views.values():
            parts.sort(key=lambda p: p[0])
            self._starts = np.array([p[0] for p in parts], dtype=np.int64)
        for name, parts in self.var.items():
            parts.sort(key=lambda p: p[0])
            arrays = [p[1] for p in parts]
            self._var_done[name] = pa.concat_arrays(arrays) if len(arrays) != 1 else arrays[0]

    def take(self, index: np.ndarray | slice) -> dict[str, np.ndarray]:
        """The records at ``index`` (window rows), as ``{column: numpy array}``."""
        out: dict[str, np.ndarray] = {}
        for name in self.columns:
            if name in self._views:
                if not isinstance(index, slice):
                    raise TypeError("a non-contiguous window serves runs of records only")
                out[name] = self._run(self._views[name], index.start, index.stop)
            elif name in self.fixed:
                col = self.fixed[name]
                # Always a copy: the window's arrays are reused for a later window.
                if isinstance(index, slice):
                    out[name] = aligned_copy(col[index])
                else:
                    dest = aligned_empty((len(index), *col.shape[1:]), col.dtype)
                    out[name] = np.take(col, index, axis=0, out=dest, mode="clip")
            else:
                arr = self._var_done[name]
                if isinstance(index, slice):
                    part = arr.slice(index.start, index.stop - index.start)
                else:
                    part = arr.take(pa.array(index))
                out[name] = column_to_numpy(part)
        return out

    def _run(self, parts: list[tuple[int, np.ndarray]], a: int, b: int) -> np.ndarray:
        """Rows ``[a, b)`` from the decoded parts, copied once into a new array."""
        first = int(np.searchsorted(self._starts, a, side="right")) - 1
        last = int(np.searchsorted(self._starts, b, side="left"))
        pieces = [view[max(a - off, 0) : b - off] for off, view in parts[first:last]]
        if len(pieces) == 1:
            return aligned_copy(pieces[0])  # Arrow-backed views are read-only
        out = aligned_empty((sum(len(p) for p in pieces), *pieces[0].shape[1:]), pieces[0].dtype)
        return np.concatenate(pieces, out=out)


ALIGN = 64  # bytes: what XLA needs to use a host array in place (jax.device_put on CPU)


def aligned_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """``np.empty`` whose data starts on a 64-byte boundary (numpy gives 16)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start : start + nbytes].view(dtype).reshape(shape)


def aligned_copy(a: np.ndarray) -> np.ndarray:
    out = aligned_empty(a.shape, a.dtype)
    np.copyto(out, a)
    return out


class WindowPool:
    """Hands out windows whose fixed-width arrays are reused once a window has been served.

    A fresh multi-MiB array costs a page fault and a zeroing per page on first touch: for a
    256 MiB window that was a third of the loader's CPU time. The loader holds at most two
    windows at once (one served, one being decoded), so two sets of arrays go round.
    """

    def __init__(
        self, schema: pa.Schema, columns: list[str], contiguous: bool = True, rows: int = 0
    ) -> None:
        self.schema, self.columns, self.contiguous = schema, columns, contiguous
        self.rows = rows  # arrays are made this long at least: the ramp's small windows use
        # the start of full-size arrays, whose untouched pages cost nothing until used
        self._free: list[dict[str, np.ndarray]] = []

    def get(self, rows: int) -> Window:
        if not self.contiguous:
            return Window(self.schema, self.columns, rows, contiguous=False)
        storage = None
        for i, candidate in enumerate(self._free):
            if all(len(a) >= rows for a in candidate.values()):
                storage = self._free.pop(i)
                break
        if storage is None and rows < self.rows:
            storage = Window(self.schema, self.columns, self.rows).storage
        return Window(self.schema, self.columns, rows, storage)

    def put(self, window: Window) -> None:
        if window.storage:
            self._free.append(window.storage)
            del self._free[:-2]
