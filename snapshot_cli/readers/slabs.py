"""Where windows' memory comes from: slabs that go round, made ready ahead of use.

A slot window (:mod:`.window`) is one preallocated array per fixed-width column (a *slab*).
A fresh multi-MiB array costs a page fault and a zeroing per page on first touch (for a 256
MiB window that was a third of the loader's CPU time), so slabs go round: a slab is free again
once its window has been served and the consumer has let go of every batch (view) of it; while
a batch is held, its slab is not touched. The loader holds two windows at once (one served, one
being filled), so two slabs go round when the consumer drops its batches as it goes: the next
window starts in the slab of the window before the served one once the consumer has moved on
from it (:meth:`WindowPool.short`); a consumer that keeps batches gets more slabs instead.

The pages a window uses for the first time are mapped by the read threads before they decode
into it, a part at a time (``Window.fresh``): one call that maps and zeroes them
(``MADV_POPULATE_WRITE``, without the GIL) costs about half what a page fault per page does,
which was most of what the first epoch of a fresh process paid beyond a later epoch.

A gathered window (:mod:`.gather`) has no slab: its batches have buffers of their own (a
:class:`~.gather.BatchPool`), which this pool holds for the loader. Once windows gather, the
first epoch's slabs are given back to the system, in parts, by a read thread
(:meth:`WindowPool.between`).
"""

from __future__ import annotations

import mmap
import sys
import threading
import warnings
import weakref
from concurrent.futures import Executor, Future
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from . import gather, shm
from .gather import BatchPool, GatherWindow
from .plan import inverse_permutation
from .window import Window, fixed_width, numpy_dtype, row_shape

# Warn when the consumer's batches keep this many windows' worth of slabs alive, and this much.
PINNED_WARNING, PINNED_WARNING_BYTES = 8, 1 << 30
FRESH_PART = 8 << 20  # new pages are mapped in parts of this many bytes, by the read threads
FREE_PART = 8 << 20  # slabs let go are given back in parts of this many bytes (_give_back)


@dataclass
class _Slab:
    storage: dict[str, np.ndarray]  # per fixed-width column
    slots: np.ndarray | None  # the slot table, in shared memory (decode processes)
    owners: list[np.ndarray]  # the arrays that own the memory (every view refers to them)
    unused: int  # the owners' reference count when nothing else refers to them
    ready: int = 0  # rows whose pages are mapped (prepared, or used by a window)

    def free(self, rows: int) -> bool:
        return (
            all(len(a) >= rows for a in self.storage.values()) and _refs(self.owners) == self.unused
        )


class WindowPool:
    """Hands out windows whose slabs are reused once nothing refers to them any more (see
    the module docstring); for a loader that gathers (``gather``), gathered windows."""

    KEEP = 4  # slabs kept for reuse; more are left to the garbage collector

    def __init__(
        self,
        schema: pa.Schema,
        columns: list[str],
        rows: int = 0,
        shared: bool = False,
        gather: bool = False,
    ) -> None:
        self.schema, self.columns = schema, columns
        self.gather = gather
        types = [schema.field(c).type for c in columns]
        self.forms = {c: (numpy_dtype(t), row_shape(t)) for c, t in zip(columns, types, strict=True)
                      if fixed_width(t)}  # fmt: skip
        self.batches = BatchPool()
        self.rows = rows  # slabs are made this long at least: the ramp's small windows use
        # the start of full-size slabs, whose untouched pages cost nothing until used
        self.shared = shared  # slabs in shared memory, for decode processes (:mod:`.shm`)
        self._slabs: list[_Slab] = []
        self._leaving: list[_Slab] = []  # let go, not given back yet (see between)
        self._made: list[tuple[weakref.ref[np.ndarray], int]] = []  # slab arrays still alive
        self._warned = False
        self.kept = False  # the consumer keeps batches: a slab may stay taken (see short)
        self._unmapping: list[tuple[Future[None], GatherWindow]] = []  # see put
        self.allocated = 0  # slabs made (a figure for tests and benchmarks)
        self._lock = threading.Lock()

    def get(
        self,
        rows: int,
        order: np.ndarray | None = None,
        inverse: np.ndarray | None = None,
        segments: int = 0,
        gathered: bool = True,
    ) -> Window | GatherWindow:
        """A window of ``rows`` records: slot ``s`` holds record ``order[s]``, or record
        ``r`` goes to slot ``inverse[r]`` (None: kept in order); a gathered window of
        ``segments`` segments where the pool makes those, unless ``gathered`` is False."""
        if self.gather and gathered:
            slots = inverse if order is None else inverse_permutation(order)
            return GatherWindow(self.forms, rows, segments, slots, self.batches)
        slab = self._slab(rows)
        window = Window(
            self.schema, self.columns, rows, slab.storage, order, slab.slots, inverse=inverse
        )
        window.fresh = self._fresh(slab, rows)
        return window

    def gathering(self) -> None:
        """A gathered window was placed: the slabs of the slot windows before (a first
        epoch's) are let go, given back by :meth:`between` once no batch refers to them.
        (They were let go when the first gathered window was asked for, which is in the first
        epoch, before any slab was made: later epochs kept both, 512 MiB for nothing.)"""
        with self._lock:
            self._leaving += self._slabs
            self._slabs = []

    def between(self, pool: Executor) -> None:
        """What the thread serving a gathered window does after each hand-over: wait for the
        windows served before to be unmapped (:meth:`unmapped`), and have a thread of
        ``pool`` give back the slabs let go that no batch refers to any more (:func:`_give_back`).

        Not sooner, and not all at once: unmapping the two 256 MiB slabs takes ~50 ms, during
        which no other thread of the process can map a file or start. Unmapped when the first
        gathered window was placed, the epoch's first batch came 27-37 ms after ``iter()``
        (its windows map their shards; 4-8 ms in later epochs); given back after the first
        hand-over, in parts, 7-13 ms, and a Python-busy consumer waited 3.6 % of the epoch
        instead of 5.0 (medians of 10). Nor does a consumer that drops the last batch of a slab
        unmap it in its own thread."""
        self.unmapped()
        if not self._leaving:
            return
        with self._lock:
            free = [s for s in self._leaving if s.free(0)]
            self._leaving = [s for s in self._leaving if not s.free(0)]
        if free:
            pool.submit(_give_back, free)

    def let_go(self) -> None:
        """A pass ended (or was stopped): the slabs let go and not given back yet (a batch of
        them was held) are dropped, so that none outlives the pass for nothing: each is freed
        once no batch refers to it."""
        with self._lock:
            leaving, self._leaving = self._leaving, []
        leaving.clear()  # unmapped here, the lock free

    def drop(self) -> None:
        """The loader was closed: the slabs kept for reuse go (each freed once no batch
        refers to it) and the gathered batches' buffers with them; a later pass makes new."""
        with self._lock:
            slabs, self._slabs, self._leaving = self._slabs + self._leaving, [], []
        self.batches = BatchPool()
        slabs.clear()

    def short(self, rows: int) -> bool:
        """Whether a window of ``rows`` records now would need a third slab: none is free,
        and two that fit exist already (the window being served, and the one before it, which
        the consumer lets go of once it has moved on to the served one). The loader then
        starts the next window once that slab is free, instead of making one more (a third
        256 MiB of new memory, a quarter of a loader's peak RSS). Not once a consumer has kept
        batches (:attr:`kept`): waiting for it to let go would only hold the reads back."""
        if self.kept:
            return False
        with self._lock:
            fitting = [s for s in self._slabs if all(len(a) >= rows for a in s.storage.values())]
            return len(fitting) >= 2 and not any(s.free(rows) for s in fitting)

    def _slab(self, rows: int) -> _Slab:
        """The first free slab for these rows, else a new one."""
        with self._lock:
            for slab in self._slabs:
                if slab.free(rows):
                    return slab
        self.allocated += 1
        storage, slots = self._allocate(max(rows, self.rows))
        owners = [_owner(a) for a in storage.values()]
        slab = _Slab(storage, slots, owners, _refs(owners))
        with self._lock:
            self._slabs.append(slab)
            del self._slabs[: -self.KEEP]
            alive = [(r, n) for r, n in self._made if r() is not None]
            self._made = alive + [(weakref.ref(o), o.nbytes) for o in owners]
            held = sum(n for _, n in self._made)
            window_bytes = sum(o.nbytes for o in owners)
        if held > max(PINNED_WARNING * window_bytes, PINNED_WARNING_BYTES) and not self._warned:
            self._warned = True
            warnings.warn(
                f"batches you keep hold {held / window_bytes:.0f} loader windows' memory "
                f"({held / 2**30:.1f} GiB): a batch is a view of its window's memory, which is "
                "reused only once no batch refers to it. Copy what you keep "
                "({k: v.copy() for k, v in batch.items()}) or use a smaller shuffle_buffer.",
                RuntimeWarning,  # shown by default (ResourceWarning is not: nobody saw it)
                stacklevel=3,
            )
        return slab

    @staticmethod
    def _fresh(slab: _Slab, rows: int) -> list[tuple[np.ndarray, int, int]]:
        """The parts of the slab's first ``rows`` rows whose pages were never used, as
        ``(bytes, start, length)`` of at most FRESH_PART bytes each: for the read threads to
        map first (:func:`.gather.populate`; see the module docstring). None without the
        compiled part of :mod:`.gather`."""
        if rows <= slab.ready or gather.populate is None:
            return []
        parts = []
        for a in slab.storage.values():
            row = a.strides[0] if a.ndim else a.itemsize
            flat = a.reshape(-1).view(np.uint8)
            start, end = slab.ready * row, rows * row
            parts += [(flat, p, min(FRESH_PART, end - p)) for p in range(start, end, FRESH_PART)]
        slab.ready = rows
        return parts

    def _allocate(self, rows: int) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
        """A new slab per fixed-width column (and, shared, the slot table), ``rows`` long."""
        if not self.shared:
            return Window(self.schema, self.columns, rows).storage, None
        storage = Window(self.schema, self.columns, rows, alloc=shm.empty).storage
        return storage, shm.empty((rows,), np.dtype(np.int64))

    def put(self, window: Window | GatherWindow, pool: Executor | None = None) -> None:
        """The window is served: its slabs are free once its batches are dropped. A gathered
        window lets its sources go at once (its batches have buffers of their own), unmapped
        by a thread of ``pool``: each unmap takes the GIL back, which a consumer running
        Python may hold 5 ms, and done by the loader's own thread between two windows, that
        emptied the prefetch buffer (a Python-busy epoch waited 5.2-5.9 %, 2.0-3.9 % now)."""
        if isinstance(window, GatherWindow):
            if pool is None:
                window.close()
                return
            with self._lock:
                self._unmapping = [(f, w) for f, w in self._unmapping if not f.done()]
                self._unmapping.append((pool.submit(window.close), window))

    def unmapped(self, cancelled: bool = False) -> None:
        """Wait until the gathered windows served before are unmapped: called after the next
        window's first hand-over, so that two windows' pages are not mapped at once (later
        epochs of 2 GB peaked at 1,000-1,083 MiB without it). ``cancelled``: the pool was
        shut down, and the windows it did not unmap are unmapped here (again: a no-op)."""
        with self._lock:
            pending, self._unmapping = self._unmapping, []
        for future, window in pending:
            if cancelled:
                window.close()
            else:
                future.result()


def _give_back(slabs: list[_Slab]) -> None:
    """Give the memory of slabs nothing refers to back to the system, ``FREE_PART`` bytes at a
    time (the process's map lock is let go between two: a thread that maps a file waits for
    one part, not the whole), then drop them (unmapping what is left is quick). Small slabs
    (not in a map of their own), or all without the compiled part, are just dropped."""
    for slab in slabs:
        for owner in slab.owners:
            base = owner.base.obj if isinstance(owner.base, memoryview) else owner.base
            if gather.discard is not None and isinstance(base, mmap.mmap):
                gather.discard(owner, 0, owner.nbytes, FREE_PART)
    slabs.clear()


def _owner(a: np.ndarray) -> np.ndarray:
    """The array that owns ``a``'s memory (every view of ``a`` refers to it)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _refs(owners: list[np.ndarray]) -> int:
    return sum(sys.getrefcount(o) for o in owners)
