"""A window: the decoded records of one plan window, as contiguous numpy columns.

Fixed-width columns (scalars and fixed-shape tensors) are written into one preallocated array
per column (a *slab*) as record batches are decoded, by several threads, straight to their
place in the shuffled order: record ``r`` of the window goes to slot ``slot_of[r]``, so the
batches are consecutive slots and serving one costs nothing but a view. Each byte is thus
copied once after decoding, by the read threads, while the decoded record batch is still in
the CPU's cache (gathering from a window afterwards read every byte back from memory).

A batch is a view of a slab, so a slab is reused for a later window only once no batch the
consumer holds refers to it (:class:`WindowPool` counts the references): batches stay owned,
writable and contiguous, and 64-byte aligned where the batch's offset in the slab allows
(else that column is copied). Variable-width columns (ragged arrays, strings, bytes) stay
Arrow arrays until a batch takes its rows.
"""

from __future__ import annotations

import math
import mmap
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from .. import arrays
from .. import schema as schema_mod
from ..errors import OutOfMemoryError
from ..shortages import WINDOW_FIX
from . import gather, memory
from .convert import Chunks, column_to_numpy
from .plan import inverse_permutation

FIXED_KINDS = ("scalar", "tensor")
VOID_MAX = 512  # bytes per record up to which a scatter copies records as opaque items
# Bytes per record of a column from which a shuffled window has an uncompressed record batch
# read straight into the records' slots, one piece of a preadv per record (SlotTarget), where
# the compiled decode (snapshot_cli._decode, 1.35-1.4x faster: :func:`.direct.slot_job`) is not.
RECORD_READ_MIN = 4096


def fixed_width(t: pa.DataType) -> bool:
    """Whether a window holds column type ``t`` in an array of its own (numbers, tensors,
    times and durations: 2.5x faster later epochs for a time than as Arrow data), not as
    Arrow data taken batch by batch."""
    return schema_mod.kind(t) in FIXED_KINDS or pa.types.is_timestamp(t) or pa.types.is_duration(t)


def numpy_dtype(t: pa.DataType) -> np.dtype:
    if pa.types.is_timestamp(t) or pa.types.is_duration(t):  # (a zone is dropped: UTC values)
        return np.dtype(f"{'datetime64' if pa.types.is_timestamp(t) else 'timedelta64'}[{t.unit}]")
    value_type = t.value_type if isinstance(t, pa.FixedShapeTensorType) else t
    dtype = np.dtype(bool) if pa.types.is_boolean(value_type) else arrays.numpy_dtype(value_type)
    assert dtype is not None, t  # (a window holds numeric columns only)
    return dtype


def row_shape(t: pa.DataType) -> tuple[int, ...]:
    return tuple(t.shape) if isinstance(t, pa.FixedShapeTensorType) else ()


def row_bytes(schema: pa.Schema, columns: list[str]) -> int:
    """Bytes per record of the fixed-width columns (what a window preallocates)."""
    total = 0
    for name in columns:
        t = schema.field(name).type
        if fixed_width(t):
            total += numpy_dtype(t).itemsize * math.prod(row_shape(t))
    return total


class SlotTarget:
    """One fixed-width column of an uncompressed record batch bound for a shuffled window:
    record ``r`` goes to row ``slots[r]`` of ``rows`` (the column's slab, one row of bytes
    per record). A read fills :meth:`buffers` in the record batch's order: the records' own
    rows where they are large (the kernel copies the file's bytes straight to their slots:
    the one copy), else one staging array, which :meth:`Window.settle` then scatters."""

    __slots__ = ("rows", "slots", "staged")

    def __init__(self, rows: np.ndarray, slots: np.ndarray) -> None:
        self.rows, self.slots = rows, slots
        self.staged: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        return len(self.slots) * int(self.rows.shape[1])

    def buffers(self) -> list[np.ndarray]:
        rows = self.rows
        if rows.shape[1] >= RECORD_READ_MIN:
            return [rows[s] for s in self.slots.tolist()]
        self.staged = np.empty((len(self.slots), rows.shape[1]), np.uint8)
        return [self.staged]


class Window:
    """Records ``[0, rows)`` of one window. ``fill`` / ``scatter`` from any thread; then
    ``finish``; then ``take`` batches of consecutive slots.

    ``order`` is the window's permutation (slot ``s`` holds record ``order[s]``; None: kept
    in order). ``storage`` (from :class:`WindowPool`) supplies slabs of at least ``rows`` rows.
    Kept in order (unshuffled replay), record batches are decoded straight into the slab
    (:meth:`targets`) where their layout allows, and a batch then costs no copy at all.
    ``slots`` (at least ``rows`` long) holds ``slot_of``, the inverse of ``order`` (given as
    ``inverse`` where it was worked out ahead); ``alloc`` makes the slabs ``storage`` lacks
    (default :func:`slab_empty`).
    """

    def __init__(
        self,
        schema: pa.Schema,
        columns: list[str],
        rows: int,
        storage: dict[str, np.ndarray] | None = None,
        order: np.ndarray | None = None,
        slots: np.ndarray | None = None,
        alloc: Callable[[tuple[int, ...], np.dtype], np.ndarray] | None = None,
        inverse: np.ndarray | None = None,
    ) -> None:
        self.rows = rows
        self.storage: dict[str, np.ndarray] = {}
        self.fixed: dict[str, np.ndarray] = {}
        self.var: dict[str, list[tuple[int, pa.Array]]] = {}
        self._var_done: dict[str, Chunks] = {}
        self.columns = columns
        self.order = order  # worked out from ``inverse`` by finish() where a column needs it
        self.slot_of: np.ndarray | None
        if inverse is None and order is not None:
            inverse = inverse_permutation(order)
        if inverse is not None and slots is not None:  # shared memory (:mod:`.procs`)
            slots[:rows] = inverse
            inverse = slots[:rows]
        self.slot_of = inverse
        self._lock = threading.Lock()
        # (bytes, start, length) of slab memory never used yet, for the read threads to map
        # first (set by :class:`.slabs.WindowPool`)
        self.fresh: list[tuple[np.ndarray, int, int]] = []
        self._addr: dict[str, tuple[int, int]] = {}  # slab address, bytes per record
        self._bytes: dict[str, np.ndarray] = {}  # each slab as rows of bytes
        self._per: int | None = None  # bytes a record of the fixed-width columns
        for name in columns:
            t = schema.field(name).type
            if fixed_width(t):
                if storage is None or len(storage[name]) < rows:
                    self.storage[name] = self._slab(schema, rows, name, alloc or slab_empty)
                else:
                    self.storage[name] = storage[name]
                self.fixed[name] = self.storage[name][:rows]
                dest = self.fixed[name]
                self._addr[name] = (dest.ctypes.data, dest.strides[0])
                width = math.prod(dest.shape[1:])  # explicit: -1 fails on 0 rows
                self._bytes[name] = dest.reshape(rows, width).view(np.uint8)
            else:
                self.var[name] = []

    def _slab(self, schema: pa.Schema, rows: int, name: str, make: Callable[..., Any]) -> Any:
        """A new slab of ``rows`` rows for column ``name`` (see :mod:`.memory`)."""
        first = self._per is None
        if self._per is None:  # once a window, not once a column (500 columns: 1.2 s)
            self._per = row_bytes(schema, self.columns)
        per = self._per
        what = f"a loader window of {rows:,} records of {per:,} bytes"
        # two: one is filled while the other is served (a window under the limit but over
        # half of it passed, and the process was killed once both were); once a window, as
        # it counts every column (once a column read /proc 30,000 times for 30,000 columns)
        if first:
            memory.check(2 * rows * per, f"{what} (two of them: one filled while the other "
                         "is served)", WINDOW_FIX)  # fmt: skip
        t = schema.field(name).type
        try:
            return make((rows, *row_shape(t)), numpy_dtype(t))
        except OutOfMemoryError:  # said already (shared memory over the file-size limit)
            raise
        except (MemoryError, OSError) as err:
            raise memory.failed(err, what, rows * per, WINDOW_FIX) from err

    def fill(self, offset: int, batch: pa.RecordBatch, start: int, stop: int) -> None:
        """Put records ``[start, stop)`` of ``batch`` at window records ``offset...``."""
        n = stop - start
        if self.fixed:
            self.scatter(
                offset,
                {name: column_to_numpy(batch.column(name).slice(start, n)) for name in self.fixed},
            )
        if self.var:
            parts = [(name, _kept(batch.column(name).slice(start, n))) for name in self.var]
            with self._lock:
                for name, part in parts:
                    self.var[name].append((offset, part))

    def fill_many(self, batch: pa.RecordBatch, places: list[tuple[int, int, int]]) -> None:
        """Put several runs of ``batch``'s records in the window at once, each ``(offset,
        start, stop)`` as :meth:`fill` takes it: a record batch a window uses many times (a
        mixture or sample repeating a small snapshot) decoded once, not per run."""
        if self.fixed:
            rows = np.concatenate([np.arange(s, e) for _, s, e in places])
            at = np.concatenate([np.arange(o, o + e - s) for o, s, e in places])
            values = {n: column_to_numpy(batch.column(n))[rows] for n in self.fixed}
            self._scatter(at if self.slot_of is None else self.slot_of[at], values)
        for offset, start, stop in places if self.var else ():
            parts = [(n, _kept(batch.column(n).slice(start, stop - start))) for n in self.var]
            with self._lock:
                for name, part in parts:
                    self.var[name].append((offset, part))

    def scatter(self, offset: int, values: dict[str, np.ndarray]) -> None:
        """Copy decoded fixed-width values (``{column: (n, ...) array}``) of window records
        ``offset...`` to their slots."""
        if self.slot_of is None or not values:
            for name, src in values.items():
                self.fixed[name][offset : offset + len(src)] = src
            return
        n = len(next(iter(values.values())))
        self._scatter(self.slot_of[offset : offset + n], values)

    def _scatter(self, slots: np.ndarray, values: dict[str, np.ndarray]) -> None:
        """Row ``k`` of each of ``values`` to row ``slots[k]`` of its column's slab."""
        if gather.scatter is not None:
            # compiled: one call for every column, the GIL let go once, the writes overlapping
            columns = [
                (self._bytes[name], self.fixed[name].strides[0],
                 np.ascontiguousarray(src, self.fixed[name].dtype))
                for name, src in values.items()
            ]  # fmt: skip
            for at in range(0, len(columns), gather.SCATTER_MAX):  # a call takes at most 64
                gather.scatter(slots, columns[at : at + gather.SCATTER_MAX])
            return
        for name, src in values.items():
            n, dest = len(src), self.fixed[name]
            if dest.ndim > 1:
                # Small records as one opaque item each, large ones as rows of bytes: the
                # faster of numpy's fancy copies for each (up to 6x apart, measured).
                width = dest.strides[0]
                item = np.dtype((np.void, width)) if width <= VOID_MAX else np.dtype(np.uint8)
                dest = dest.reshape(len(dest), -1).view(item)
                src = np.ascontiguousarray(src).reshape(n, -1).view(item)
                if width <= VOID_MAX:
                    dest, src = dest.reshape(len(dest)), src.reshape(n)
            dest[slots] = src

    def slot_columns(self) -> tuple[dict[str, tuple[np.ndarray, int]], np.ndarray] | None:
        """Each column's slots as rows of bytes and their width, and ``slot_of``: where a
        shuffled window of fixed-width columns only takes records decoded straight to their
        slots (None otherwise)."""
        if self.var or self.slot_of is None:
            return None
        return {n: (rows, int(rows.shape[1])) for n, rows in self._bytes.items()}, self.slot_of

    def targets(self, offset: int, n: int) -> dict[str, np.ndarray | SlotTarget] | None:
        """Where records ``[offset, offset + n)`` of every column can be decoded directly:
        their rows (kept in order), or in a shuffled window with a column of large records
        a :class:`SlotTarget` per column (for an uncompressed record batch, read straight to
        the records' slots; then call :meth:`settle`). None where neither applies: a column
        that is not fixed-width, or small records only (decoded, then scattered)."""
        if self.var:
            return None
        if self.slot_of is None:
            return {name: dest[offset : offset + n] for name, dest in self.fixed.items()}
        if not any(b.shape[1] >= RECORD_READ_MIN for b in self._bytes.values()):
            return None
        slots = self.slot_of[offset : offset + n]
        return {name: SlotTarget(rows, slots) for name, rows in self._bytes.items()}

    def settle(self, offset: int, targets: dict[str, np.ndarray | SlotTarget]) -> None:
        """After a read into ``targets`` (from :meth:`targets`): the staged columns' records
        to their slots."""
        staged = {}
        for name, t in targets.items():
            if isinstance(t, SlotTarget) and t.staged is not None:
                dest = self.fixed[name]
                staged[name] = t.staged.view(dest.dtype).reshape((len(t.slots), *dest.shape[1:]))
        if staged:
            self.scatter(offset, staged)

    def finish(self) -> None:
        """Put the parts in row order (call once, after every fill)."""
        if self.var and self.order is None and self.slot_of is not None:
            self.order = inverse_permutation(self.slot_of)  # the slots' records, for take()
        for name, parts in self.var.items():
            parts.sort(key=lambda p: p[0])
            self._var_done[name] = Chunks([p[1] for p in parts])

    def take(self, a: int, b: int) -> dict[str, np.ndarray]:
        """The records of slots ``[a, b)`` (a batch), as ``{column: numpy array}``."""
        out: dict[str, np.ndarray] = {}
        odd: list[str] = []  # columns whose place in the slab is not aligned: copied
        for name in self.columns:
            if name in self.fixed:
                view = self.fixed[name][a:b]
                # A view of the slab: the pool reuses it only once no batch refers to it.
                start, row = self._addr[name]
                out[name] = view
                if (start + a * row) % ALIGN:
                    odd.append(name)
            else:
                chunks = self._var_done[name]
                if self.order is None:
                    out[name] = chunks.slice(a, b)
                else:
                    out[name] = chunks.take(self.order[a:b])
        if odd:
            out.update(zip(odd, aligned_copies([out[n] for n in odd]), strict=True))
        return out


KEEP_WHOLE_MAX = 4 << 20  # a slice of a decoded column this big or less is kept as it is


def _kept(part: pa.Array) -> pa.Array:
    """A window's slice of a decoded variable-width column, copied out of the column when it
    is a small part of a large one: a slice holds its whole decoded record batch, and the
    batches served from it hold the slice (the prefetched ones too). A snapshot of 64 MiB
    record batches read with a small ``shuffle_buffer`` held one decoded record batch per
    batch in flight: 1.3 GB for 191 MiB of records, 8.4 GB with 242 MiB record batches."""
    whole = part.get_total_buffer_size()
    if whole <= KEEP_WHOLE_MAX or whole <= 4 * part.nbytes:
        return part
    return pa.concat_arrays([part])  # (its own buffers, of its values only)


SLAB_MMAP_MIN = 1 << 20  # slabs this big get memory of their own (slab_empty)
ALIGN = gather.ALIGN  # 64 bytes: what XLA needs to use a host array in place (jax.device_put)


def aligned_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """``np.empty`` whose data starts on a 64-byte boundary (numpy gives 16)."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize  # np.prod costs 10 µs: this can be per batch
    raw = np.empty(nbytes + ALIGN, dtype=np.uint8)
    start = -raw.__array_interface__["data"][0] % ALIGN  # (.ctypes costs ~4 us)
    return raw[start : start + nbytes].view(dtype).reshape(shape)


def slab_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A page-aligned array in anonymous memory of its own, in small pages: numpy asks for
    transparent huge pages for large arrays, and on a machine whose memory the page cache has
    fragmented their compaction cost seconds of system time in a first epoch (measured:
    lazily faulted small pages halved it; populating up front delayed the first batch).
    Small slabs, or a platform without anonymous maps, use :func:`aligned_empty`."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes < SLAB_MMAP_MIN or not hasattr(mmap, "MAP_ANONYMOUS"):
        return aligned_empty(shape, dtype)
    memory = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return np.frombuffer(memory, np.uint8, nbytes).view(dtype).reshape(shape)


# A small batch's copies share one buffer (its columns of other dtypes too); past this, each
# group of a dtype and shape has its own, so that a column kept from every batch (labels
# collected for a metric) keeps no other column's bytes alive.
SHARED_COPIES = 64 << 10


def aligned_copies(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Copies of ``arrays``, each starting on a 64-byte boundary, carved out of one buffer. A
    batch's columns are copied when their place in the slab is not aligned (a batch of 250
    float32s starts 1,000 bytes after the last): a buffer of their own cost 4 us each (numpy
    tells its address through ctypes), 500 such columns ran at 4.3-6.6 ms a batch, 1.2-1.5
    aligned; one buffer a column group (a dtype and shape) still cost a batch of 1 record
    12 us against numpy's 2, so a batch has one buffer, found by ``__array_interface__``.
    Arrays of one dtype and shape are copied into the rows of one block of it (rows padded to
    64 bytes), ~0.7 us each."""
    groups: dict[tuple[np.dtype, tuple[int, ...]], list[int]] = {}
    for i, a in enumerate(arrays):
        groups.setdefault((a.dtype, a.shape), []).append(i)
    spans = [(members, gather.aligned(arrays[members[0]].nbytes)) for members in groups.values()]
    total = sum(len(m) * stride for m, stride in spans)
    copies = list(arrays)  # (each replaced by its copy)
    if total > SHARED_COPIES and len(spans) > 1:  # a buffer a group: a kept label column
        for members, _ in spans:  # keeps no images alive
            group = aligned_copies([arrays[i] for i in members])
            for i, copy in zip(members, group, strict=True):
                copies[i] = copy
        return copies
    raw = np.empty(total + ALIGN, dtype=np.uint8)
    at = -raw.__array_interface__["data"][0] % ALIGN
    for members, stride in spans:
        a = arrays[members[0]]
        if len(members) == 1:
            copies[members[0]] = copy = raw[at : at + a.nbytes].view(a.dtype).reshape(a.shape)
            copy[...] = a
        else:
            block = raw[at : at + len(members) * stride].reshape((len(members), stride))
            rows = block[:, : a.nbytes].view(a.dtype).reshape((len(members), *a.shape))
            for i, row in zip(members, rows, strict=True):
                row[...] = arrays[i]
                copies[i] = row
        at += len(members) * stride
    return copies
